"""``redist bench``: our redistributions against the XLA SPMD partitioner (``benchmarks.bench``).

The options are the benchmark's own (``redist bench --help`` prints them); they are passed through
to ``python -m benchmarks.bench`` in the source checkout (``redist_cli.checkout``).
"""

from __future__ import annotations

import argparse
from typing import Any

from redist_cli.checkout import run_benchmark


def register(sub: Any, handlers: dict[str, Any]) -> None:
    # add_help=False: --help is the benchmark's own, passed through with every other option
    sub.add_parser("bench", add_help=False,
                   help="compare redistributions against the XLA SPMD partitioner (from a source checkout)")
    handlers["bench"] = run_bench


def run_bench(args: argparse.Namespace) -> int:
    return run_benchmark(["-m", "benchmarks.bench", *args.passed], "redist bench")
