"""The benchmark suites, which live in a source checkout and not in the installed package.

Why a separate process: the wheel ships ``redist``, ``spmd_types``, ``proofs``, ``partir_core`` and
this CLI, not ``benchmarks``; from an editable install (``pip install -e .``) the checkout beside
these packages holds it, and a fresh interpreter there also sets its own device count before JAX
starts. Without a checkout the command says, in one line, how to get one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import redist_cli

CLONE_HINT = ("the benchmark suites ship with the source checkout, not the installed package: "
              "git clone the redist repository, pip install -e '.[bench]' there and run {command} again")


def benchmarks_root() -> Path | None:
    """The checkout whose ``benchmarks`` package sits beside this CLI's package, if there is one."""
    root = Path(redist_cli.__file__).resolve().parent.parent
    return root if (root / "benchmarks" / "__init__.py").is_file() else None


def run_benchmark(python_args: Sequence[str], command: str) -> int:
    """Run ``python PYTHON_ARGS`` with the checkout on the path, in the caller's working directory
    (results land where the user is); its exit status, or 2 with one line where no checkout exists."""
    root = benchmarks_root()
    if root is None:
        print(f"error: {CLONE_HINT.format(command=command)}", file=sys.stderr)
        return 2
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *python_args], env=dict(os.environ, PYTHONPATH=path)).returncode
