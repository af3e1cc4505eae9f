"""``redist plan`` and ``redist demo``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redist import redistribute
from redist_cli.main import main
from spmd_types import Mesh

ROOT = Path(__file__).resolve().parent.parent


def test_plan_prints_the_plan_and_its_measures(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "f32[512@(x,y),128]", "f32[512,128@(y,x)]", "--mesh", "x=2,y=4"])
    out = capsys.readouterr().out
    assert rc == 0
    plan = redistribute("f32[512@(x,y),128]", "f32[512,128@(y,x)]", Mesh({"x": 2, "y": 4}))
    assert out.startswith(str(plan) + "\n")
    for word in ("recv_bytes", "lower_bound_bytes", "peak_bytes", "time_s", "collectives"):
        assert word in out
    assert f"{plan.recv_bytes:,.1f} B/device" in out


def test_plan_with_slow_axes_and_equal_types(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "{x=2,y=4}"]
    assert main(argv) == 0
    fast = [line for line in capsys.readouterr().out.splitlines() if "time_s" in line]
    assert main(argv + ["--slow-axes", "x"]) == 0
    slow = [line for line in capsys.readouterr().out.splitlines() if "time_s" in line]
    assert len(fast) == len(slow) == 1 and fast != slow  # crossing x costs more on a slow axis
    assert main(["plan", "f32[64@x]", "f32[64@x]", "--mesh", "x=2,y=4"]) == 0
    assert "(0 steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["plan", "f32[512@q]", "f32[512]", "--mesh", "x=2,y=4"], "'q'"),
        (["plan", "f32[7@x]", "f32[7]", "--mesh", "x=2,y=4"], "7"),
        (["plan", "f32[8@x]", "f32[16@x]", "--mesh", "x=2,y=4"], "global shapes differ"),
        (["plan", "f32[8@x]", "s32[8@x]", "--mesh", "x=2,y=4"], "dtypes differ"),
        (["plan", "f32[8@x", "f32[8]", "--mesh", "x=2,y=4"], "error"),
        (["plan", "f32[8@x]", "f32[8]", "--mesh", "x=two"], "x=2"),
        (["plan", "f32[8@x]", "f32[8]", "--mesh", "x=2,y=4", "--slow-axes", "z"], "'z'"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err


@pytest.mark.jax
def test_demo_cases_run_and_check_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--cases", "3", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("values: OK") == 2
    assert "XLA (jit identity, out_shardings=dst)" in out and "recv / device" in out
    assert "reduce-scatter" in out and "all values correct" in out
    assert main(["demo", "--cases", "9"]) == 2


@pytest.mark.jax
def test_readme_demo_command_sets_its_own_devices() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    code = "import sys; from redist_cli import main; sys.exit(main(['demo']))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.count("values: OK") == 4 and "all values correct" in r.stdout
