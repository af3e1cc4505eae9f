"""``redist``: help, version, errors, ``plan`` and ``types`` (text and pictures), ``demo``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from redist import CostModel, redistribute
from redist_cli.main import main
from spmd_types import Mesh

ROOT = Path(__file__).resolve().parent.parent


def test_plan_prints_each_step_in_words_and_the_measures(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "f32[512@(x,y),128]", "f32[512,128@(y,x)]", "--mesh", "x=2,y=4", "--objective", "bytes"])
    out = capsys.readouterr().out
    assert rc == 0
    plan = redistribute("f32[512@(x,y),128]", "f32[512,128@(y,x)]", Mesh({"x": 2, "y": 4}),
                        cost_model=CostModel(objective="bytes"))
    assert out.splitlines()[0] == f"{plan.src} -> {plan.dst} on mesh {{x=2,y=4}}: 1 step, 1 collective"
    assert "exchange as one all-to-all to f32[512,128@(y,x)]" in out
    assert "one all-to-all replaces the exchange's collective-permute rounds" in out
    assert "28,672 B (28 KiB)" in out and ".0 B" not in out  # whole bytes with units
    for words in ("received per device", "lower bound 28,672 B (28 KiB): met", "peak memory per device",
                  "max(source, destination) 32,768 B (32 KiB): met", "estimated time"):
        assert words in out
    assert out.count("28,672 B") == 3  # the step, the total and its bound: no line repeats another


def test_singular_and_plural(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]", "--mesh", "x=2,y=4"]) == 0
    out = capsys.readouterr().out
    assert ": 1 step, 1 collective\n" in out and "1 steps" not in out and "1 collectives" not in out
    assert main(["plan", "f32[8@y]", "f32[8@x]", "--mesh", "x=2,y=4"]) == 0
    assert ": 2 steps, 2 collectives\n" in capsys.readouterr().out  # permute, all-gather


def test_plan_with_slow_axes_and_equal_types(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "{x=2,y=4}"]
    assert main(argv) == 0
    fast = [line for line in capsys.readouterr().out.splitlines() if "estimated time" in line]
    assert main(argv + ["--slow-axes", "x"]) == 0
    slow = [line for line in capsys.readouterr().out.splitlines() if "estimated time" in line]
    assert len(fast) == len(slow) == 1 and fast != slow  # crossing x costs more on a slow axis
    assert main(["plan", "f32[64@x]", "f32[64@x]", "--mesh", "x=2,y=4"]) == 0
    out = capsys.readouterr().out
    assert ": 0 steps, 0 collectives" in out and "nothing to do" in out


def test_no_arguments_prints_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: redist") and "commands:" in out and "examples:" in out
    assert "redist plan 'f32[" in out and "arguments are required" not in out
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"redist {version('redist')}"


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["plan", "f32[8@x]", "--mesh", "x=2,y=4"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "dst" in err and "redist plan --help" in err


def test_picture_and_terminal_drawing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "plan.png"
    argv = ["plan", "f32[2048@x,2048@y]", "f32[2048@y,2048@x]", "--mesh", "x=2,y=4"]
    assert main(argv + ["--picture", str(png), "--draw"]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"wrote {png}" in out and "source f32[2048@x,2048@y]" in out
    assert "bytes received (row: receiver, column: sender)" in out and "1M" in out
    types_png = tmp_path / "types.png"
    assert main(["types", "f32[8@x,4]{U:y}", "f32[8@x,4@y,2]", "--mesh", "x=2,y=4", "--blocks",
                 "--picture", str(types_png)]) == 0
    out = capsys.readouterr().out
    assert types_png.read_bytes()[:4] == b"\x89PNG"
    assert "replication" not in out and "a partial sum over y (4 partials)" in out and "Σ 0-3" in out
    assert "[4:8, 0:4] partial" in out


def test_picture_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = ["plan", "f32[8@y]", "f32[8@x]", "--mesh", "x=2,y=4", "--picture", str(tmp_path / "p.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: pictures need matplotlib") and "redist[viz]" in err and err.count("\n") == 1
    assert main(["types", "f32[8@x]", "--mesh", "x=2", "--picture", str(tmp_path / "nodir" / "t.png")]) == 2


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
    first, *rest = capsys.readouterr().err.splitlines()
    # one line; a syntax error adds only the offending text with a caret under the column
    assert first.startswith("error: ") and needle in first and all(r.startswith("  ") for r in rest)


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


def test_output_into_a_closed_pipe_is_not_an_error() -> None:
    """``redist types ... | head`` stops reading early: exit 0, nothing on stderr."""
    cmd = f"{sys.executable} -m redist_cli types 'f32[256@data,512]{{U:model}}' --mesh data=2,model=4 --blocks | head -1"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_plan_objective_flag_and_slow_axes_keep_the_objective(capsys: pytest.CaptureFixture[str]) -> None:
    """The default is the library's (fastest under the measured profile); --objective bytes gives
    the transfer bound; --slow-axes changes the axes' costs, not the objective."""
    args = ["plan", "f32[131072]{U:y}", "f32[131072@y]", "--mesh", "x=2,y=4"]
    assert main(args) == 0
    default = capsys.readouterr().out.splitlines()[0]
    assert main(args + ["--objective", "bytes"]) == 0
    by_bytes = capsys.readouterr().out.splitlines()[0]
    assert by_bytes.endswith("1 step, 4 collectives") and default.endswith("1 step, 1 collective")
    assert main(args + ["--slow-axes", "x"]) == 0
    assert "measured cost profile, slow axes x" in capsys.readouterr().out


def test_plan_autotune_times_the_best_plans_and_prints_the_kept_one(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "s32[4,8@y,512,16@x]", "s32[4,8@x,512@y,16]", "--mesh", "x=2,y=4"]
    assert main([*argv, "--autotune", "2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("autotune: the planner's best plans, timed on this machine")
    rows = [line for line in lines if " us" in line and "│" in line and "estimated" not in line][:2]
    assert len(rows) == 2 and "(the model's choice)" in rows[0]
    assert sum(line.startswith("kept") for line in lines) == 1
    assert any(line.startswith("s32[4,8@y,512,16@x] -> s32[4,8@x,512@y,16] on mesh") for line in lines)
    for bad in ("-1", "0"):  # 0 is refused, not read as "off": leaving the flag out is off
        assert main([*argv, "--autotune", bad]) == 2
        err = capsys.readouterr().err
        assert f"error: autotune: --autotune={bad} is out of range; it is how many plans to time, at least 1" in err
        assert err.rstrip().endswith("at least 1; leave the flag out to time none")
