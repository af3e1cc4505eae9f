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


def _fresh(argv: list[str], timeout: int = 300, **env_changes: str) -> subprocess.CompletedProcess[str]:
    """``python -m redist_cli ARGV`` in a new process without the suite's device flags, as a user types it."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")} | env_changes
    return subprocess.run([sys.executable, "-m", "redist_cli", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.jax
def test_plan_autotune_asks_for_its_devices_in_a_fresh_process() -> None:
    r = _fresh(["plan", "f32[64@x,32@y]", "f32[64@y,32@x]", "--mesh", "x=2,y=4", "--autotune", "2"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("autotune: the planner's best plans, timed on this machine") and "demo" not in r.stderr


@pytest.mark.parametrize("argv,message", [
    (["--picture", "plan.txt"], "error: PictureError: --picture plan.txt: pictures are written as .png, .pdf, .svg"),
    (["--picture", "no/such/folder/plan.png"], "error: PictureError: --picture no/such/folder/plan.png: the folder"),
    (["--draw", "--dims", "1,3"], "error: PictureError: --dims 1,3: f32[8@x,8,8@y] has dimensions 0..2; dimension 3"),
    (["--draw", "--dims", "a"], "error: PictureError: --dims a: give one or two dimension numbers"),
    (["--draw", "--dims", "2,2"], "error: PictureError: --dims 2,2: give one or two different dimensions"),
    (["--dims", "1,2"], "error: PictureError: --dims chooses what --draw and --picture draw; add one of them"),
])
def test_picture_options_are_checked_before_anything_prints(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "f32[8@x,8,8@y]", "f32[8,8@y,8@x]", "--mesh", "x=2,y=4", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(message) and err.count("\n") == 1


def _words(text: str) -> str:
    """``text`` with line breaks and runs of spaces as single spaces (the terminal wraps long lines)."""
    return " ".join(text.split())


def test_dims_choose_what_rank_3_pictures_draw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "f32[8@x,8,8@y]", "f32[8,8@y,8@x]", "--mesh", "x=2,y=4", "--draw"]
    assert main(argv) == 0
    assert "Drawn: rows are dim 1 (8); columns are dim 2 (8); dim 0 not drawn" in _words(capsys.readouterr().out)
    png = tmp_path / "p.png"
    assert main([*argv, "--dims", "0,2", "--picture", str(png)]) == 0
    out = _words(capsys.readouterr().out)
    assert "Drawn: rows are dim 0 (8); columns are dim 2 (8); dim 1 not drawn" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["types", "f32[8@x,8,8@y]", "--mesh", "x=2,y=4", "--dims", "2"]) == 0
    out = _words(capsys.readouterr().out)
    assert "Drawn: columns are dim 2 (8); dims 0,1 not drawn" in out and "Choose the dimensions drawn with --dims" in out
    assert main(["types", "f32[8@x,8,8@y]", "--mesh", "x=2,y=4", "--dims", "3"]) == 2


def test_drawings_label_the_busiest_device_beside_the_mean(capsys: pytest.CaptureFixture[str]) -> None:
    """The swap of a 2-D sharding's axes: its permute step reaches devices 2-5 only, 2 MiB each, so
    the mean over the 8 devices (1 MiB) hides what the slowest device receives."""
    from redist.render import fmt_size
    from redist.visualize import busiest_recv, plan_frames

    argv = ["plan", "f32[2048@x,2048@y]", "f32[2048@y,2048@x]", "--mesh", "x=2,y=4", "--draw"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "received: 1 MiB per device (mean), 2 MiB on the busiest device" in out
    plan = redistribute(*argv[1:3], Mesh({"x": 2, "y": 4}))
    for f in plan_frames(plan)[1:]:
        assert f.matrix is not None and f.measure is not None
        assert f.matrix.sum(axis=1).mean() == pytest.approx(f.measure.recv_bytes)
        assert (f"received: {fmt_size(f.measure.recv_bytes)} per device (mean), "
                f"{fmt_size(busiest_recv(f.matrix))} on the busiest device") in out


def test_partir_strategies_any_case_and_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["partir", "--strategy", "bp", "--summary"]) == 0
    assert capsys.readouterr().out.startswith("mlp BP on {data=4,model=2}: flops/device")
    with pytest.raises(SystemExit) as e:
        main(["partir", "--strategy", "bq"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown strategy part 'BQ' in 'bq'; parts are BP, MP, Z2, Z3, EMB, SP, VP" in err
    assert main(["partir", "--strategy", "BP+SP"]) == 2
    assert capsys.readouterr().err == "error: --strategy BP+SP: SP applies to --model gpt or llama or moe, not mlp\n"
    assert main(["partir", "--strategy", "MP", "--mesh", "data=8"]) == 2
    assert "the mesh lacks model" in capsys.readouterr().err


def test_partir_help_lists_every_part_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    from partir_core import models, strategies
    from redist_cli.cmd_partir import MODELS, NEEDS, PARTS

    assert set(MODELS) == set(models.MODELS)
    assert set(PARTS) == {p for parts in strategies.STRATEGIES.values() for p in parts}
    for model in MODELS:  # NEEDS says what strategies.applicable says
        usable = {p for p in PARTS if model in NEEDS.get(p, MODELS)}
        assert {p for s in strategies.applicable(model) for p in strategies.STRATEGIES[s]} == usable
    with pytest.raises(SystemExit):
        main(["partir", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{p} (" in text for p in PARTS) and "{mlp,transformer,gpt,llama,moe}" in text


@pytest.mark.parametrize("argv,message", [
    (["calibrate", "--reps", "0"], "--reps 0: give at least 1 timed run per sample"),
    (["calibrate", "--sizes-kib", "4,a"], "--sizes-kib 4,a: give block sizes in KiB as whole numbers >= 1"),
    (["calibrate", "--devices", "1"], "--devices 1: calibration times collectives, so it needs at least 2 devices"),
    (["calibrate", "--local-processes", "3"], "--local-processes 3: give at least 2 processes that divide --devices 8"),
    (["calibrate", "--num-processes", "2"], "--num-processes 2 needs --coordinator HOST:PORT"),
    (["calibrate", "--num-processes", "2", "--process-id", "2", "--coordinator", "h:1"], "--process-id 2"),
    (["bench-plan", "--pairs", "4"], "--pairs 4: give at least 5 random pairs"),
    (["bench-plan", "--ladder", "-1"], "--ladder -1: give a count of random pairs (>= 0)"),
    (["compare", "f32[8@x]", "f32[8@y]", "--mesh", "x=2,y=4", "--reps", "0"], "--reps 0: give at least 1 timed round"),
])
def test_bad_counts_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {message}") and err.count("\n") == 1


def test_unknown_options_name_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["plan", "f32[8@x]", "f32[8@y]", "--mesh", "x=2,y=4", "--frobnicate"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: unrecognized arguments: --frobnicate (see 'redist plan --help')\n"


@pytest.mark.jax
def test_demo_imports_no_benchmarks() -> None:
    """The wheel ships no ``benchmarks`` package: the README's first command runs without it."""
    code = ("import sys; sys.modules['benchmarks'] = None; from redist_cli import main; "
            "sys.exit(main(['demo', '--cases', '4']))")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "values: OK" in r.stdout and "all values correct" in r.stdout
