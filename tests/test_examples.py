"""Each script in examples/ runs as a user would run it (a fresh process, 8 simulated CPU devices)
and prints the line that says it did what its docstring promises."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

# script -> (extra arguments for a small, fast run, text its output must contain)
EXPECT = {
    "01_plan_and_run.py": (["256"], "equals jax.sharding.reshard on all 8 devices"),
    "02_verify.py": ([], "refuted as expected: property 'memory' violated"),
    "03_partition_mlp.py": ([], "(equal to the unpartitioned step)"),
    "04_transformer_strategies.py": ([], "BP+MP+Z3"),
}


def test_every_example_is_tested_and_documented() -> None:
    assert sorted(p.name for p in EXAMPLES) == sorted(EXPECT)
    for p in EXAMPLES:
        doc = ast.get_docstring(ast.parse(p.read_text())) or ""
        assert "Run: ``python examples/" in doc, f"{p.name}: the docstring must say how to run it"


@pytest.mark.jax
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_runs(name: str) -> None:
    args, expected = EXPECT[name]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{name} failed:\n{r.stderr[-4000:]}"
    assert expected in r.stdout, f"{name} did not print {expected!r}:\n{r.stdout[-2000:]}"
