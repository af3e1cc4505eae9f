"""One tiny case end to end: both sides compiled, checked, timed, reported (8 simulated devices)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import our_side
from benchmarks.cases import Case
from benchmarks.random_pairs import PairSpec
from benchmarks.report import summarize, write_report
from benchmarks.run import SuiteResult, jax_meshes, run_case, run_suite
from redist.arrays import check_output, make_input

pytestmark = pytest.mark.jax

GATHER = Case("tiny_gather", "test", (("x", 2), ("y", 4)), "f32[64@x,32@y]", "f32[64,32@y]")
REDUCE = Case("tiny_reduce_scatter", "test", (("x", 2), ("y", 4)), "f32[16,32]{U:y}", "f32[16@y,32]")


def test_xla_side_bytes_match_the_ring_formula() -> None:
    r = run_case(GATHER, reps=2, with_ours=False)
    assert r.error is None and r.xla_check is None
    # gathering x (p=2) of a 32x8 f32 block: each device receives one 1 KiB block = the bound
    assert r.overlap_bound_bytes == 1024
    assert r.xla_best_bytes == 1024
    assert r.xla_primary is not None and r.xla_primary.collectives.kinds() == ("all-gather",)
    assert not r.xla_remat


def test_unreduced_input_and_check() -> None:
    src = REDUCE.src_type
    _, explicit = jax_meshes(REDUCE.mesh)
    x, expected = make_input(src, explicit)
    assert str(x.sharding.spec.unreduced) == str(frozenset({"y"}))
    # each device holds a partial; the sum over y of the partials is the reference
    per_device = [np.asarray(s.data) for s in sorted(x.addressable_shards, key=lambda s: s.device.id)]
    assert np.array_equal(sum(per_device[:4]), expected)
    r = run_case(REDUCE, reps=2, with_ours=False)
    assert r.error is None and r.xla_check is None
    assert r.xla_best_bytes is not None and r.xla_best_bytes > 0
    # a wrong answer is caught
    assert check_output(x, expected + 1, REDUCE.dst_type) is not None


@pytest.mark.skipif(not our_side.available(), reason="redist.redistribute not available yet")
def test_ours_end_to_end() -> None:
    r = run_case(GATHER, reps=3)
    assert r.error is None, r.error
    assert r.ours is not None and r.ours_check is None and r.timing is not None
    assert r.ours.lower_bound_bytes == pytest.approx(1024)
    assert r.timing.speedup > 0


def test_report_written(tmp_path: Path) -> None:
    suite: SuiteResult = run_suite(
        [GATHER], [], command="redist bench --cases tiny_gather --pairs 0", reps_named=2,
        pair_spec=PairSpec(count=0), progress=False,
    )
    paths = write_report(suite, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == sorted(f"{suite.date}{s}" for s in (".md", ".json", "-bytes.png", "-speedup.png"))
    md = (tmp_path / f"{suite.date}.md").read_text()
    assert "redist bench --cases tiny_gather --pairs 0" in md
    assert "tiny_gather" in md and "JAX " in md
    data = json.loads((tmp_path / f"{suite.date}.json").read_text())
    assert data["named"][0]["derived"]["xla_best_bytes"] == 1024
    assert summarize(suite.named).cases == 1


def test_full_rematerialization_is_detected() -> None:
    """XLA cannot transpose a 3x2 mesh layout efficiently and says so on file descriptor 2."""
    case = Case("tiny_size3", "test", (("x", 3), ("y", 2)), "f32[48@x,96@y]", "f32[48@y,96@x]")
    r = run_case(case, reps=2, with_ours=False)
    assert r.error is None and r.xla_check is None
    assert r.xla_remat
    assert r.xla_primary is not None and "rematerialization" in r.xla_primary.remat_messages[0]
    assert any("rematerialization" in n for n in r.notes)


def test_cli_bench(tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``redist bench`` runs the checkout's benchmark in a fresh process that sets its own devices."""
    from redist_cli.main import main

    monkeypatch.chdir(tmp_path)  # results go to ./redist-bench-results/<date>/, not into the package
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    rc = main(["bench", "--cases", "rank1_order_swap", "--pairs", "1", "--reps", "2", "--no-plots"])
    out, err = capfd.readouterr()
    assert rc == 0, err[-2000:]
    assert "geometric-mean speedup (XLA time / ours)" in out and "wrote redist-bench-results/" in out
    md = next((tmp_path / "redist-bench-results").glob("*/*.md")).read_text()
    assert "redist bench --cases rank1_order_swap --pairs 1 --reps 2" in md
    assert "rank1_order_swap" in md and "rand000" in md


def test_cli_bench_without_a_checkout_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from redist_cli import checkout
    from redist_cli.main import main

    monkeypatch.setattr(checkout, "benchmarks_root", lambda: None)
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the benchmark suites ship with the source checkout")
    assert "run redist bench again" in err


def test_bench_rejects_bad_counts_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench import main

    for argv, needle in ((["--pairs", "-1"], "--pairs -1"), (["--reps", "0"], "--reps 0"),
                         (["--no-plots", "--cases", "nope"], "--cases nope: no named case")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {needle}")
    with pytest.raises(SystemExit) as e:
        main(["--pairs", "many"])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_our_failure_keeps_xla_results(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(our_side, "available", lambda: True)
    monkeypatch.setattr(our_side, "measure_ours", boom)
    r = run_case(GATHER, reps=2)
    assert r.error == "ours: RuntimeError: planner exploded"
    assert r.xla_best_bytes == 1024 and r.ours is None and not r.ok


def test_cli_bench_checks_matplotlib_before_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import benchmarks.run
    from benchmarks.bench import main

    def ran(*a: object, **k: object) -> None:
        raise AssertionError("the benchmark ran cases before checking its dependencies")

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(benchmarks.run, "run_suite", ran)  # refused at once, not after running cases
    assert main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the benchmark plots need matplotlib") and ".[bench]" in err and "--no-plots" in err


def test_cli_bench_redraws_plots_from_a_committed_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench import main

    report = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "2026-11-21.json"
    assert main(["--plots-from", str(report), "--out", str(tmp_path)]) == 0
    for name in ("2026-11-21-bytes.png", "2026-11-21-speedup.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.count("wrote ") == 2
