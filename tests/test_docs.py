"""Every ```python block of README.md and docs/ runs, in order per file, in a fresh process on 8
simulated CPU devices (``tests/markdown_blocks.py``), so the documentation cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_blocks import blocks

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "markdown_blocks.py"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
EXECUTED = [p for p in DOCS if blocks(p.read_text())]


def run_markdown(path: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, str(RUNNER), str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.jax
@pytest.mark.parametrize("path", EXECUTED, ids=[str(p.relative_to(ROOT)) for p in EXECUTED])
def test_code_blocks_run(path: Path) -> None:
    r = run_markdown(path)
    assert r.returncode == 0, r.stderr[-4000:]


def test_docs_have_code() -> None:
    """The files a reader starts from run real code (an empty selection would pass vacuously)."""
    names = {str(p.relative_to(ROOT)) for p in EXECUTED}
    assert {"README.md", "docs/tutorial.md", "docs/index.md"} <= names


def test_failure_names_file_block_and_error(tmp_path: Path) -> None:
    md = tmp_path / "bad.md"
    md.write_text("text\n\n```python\nx = 1\n```\n\n```bash\nexit 0\n```\n<!-- runnable -->\n\n"
                  "```bash\nnot run\n```\n\n```python\ny = x + undefined_name\n```\n")
    assert [(b.number, b.line, b.lang) for b in blocks(md.read_text())] == [(1, 3, "python"), (2, 7, "bash"),
                                                                              (3, 16, "python")]
    r = run_markdown(md, timeout=60)
    assert r.returncode == 1
    assert f"{md} block 3 (line 16, python)" in r.stderr
    assert "NameError" in r.stderr and "y = x + undefined_name" in r.stderr
