"""The random-pair path of ``python -m benchmarks.speed`` (issue 11: "random pairs: no case below
0.9x"): pairs are drawn by ``benchmarks.random_pairs``, run through the named cases' machinery and
summarised in their own report section. No timing is asserted: only that every side ran, was
checked against the reference, and that the report and its files say what was run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.random_pairs import PairSpec, random_pairs
from benchmarks.speed import SIDES, main, random_section, run_random

pytestmark = pytest.mark.jax
TINY = PairSpec(seed=3, count=2, max_bytes=4096)


def test_random_pairs_run_and_are_reported() -> None:
    run = run_random(TINY, seconds=0.0, progress=False)
    assert run.errors == ()
    assert [r.case for r in run.rows] == [c.name for c in random_pairs(TINY)]
    assert len(run.controls) == 2
    for r in run.rows:
        assert set(r.median_s) == set(SIDES) and all(t > 0 for t in r.median_s.values())
        assert r.ok["ours"] and r.ok["ours_bytes"]  # our plans equal the NumPy reference
        assert r.collectives["ours"] and r.steps
    text = "\n".join(random_section(run))
    assert "## Random pairs (2, seed 3)" in text and "max_bytes=4096" in text
    assert "| random pairs timed (errors) | 2 (0) |" in text
    assert "### The worst 2" in text and "### Every pair" in text
    worst = min(run.rows, key=lambda r: r.speedup)
    table = text.split("### The worst 2")[1].split("### Every pair")[0]
    first = [ln for ln in table.splitlines() if ln.startswith("| rand")][0]
    assert first.startswith(f"| {worst.case} |") and worst.steps in first


def test_random_only_command_writes_the_random_report(tmp_path: Path) -> None:
    assert main(["--cases", "none", "--random", "2", "--seed", "1", "--random-seconds", "0",
                 "--out", str(tmp_path)]) == 0
    md = next(tmp_path.glob("*-speed-random.md")).read_text()
    assert "Command: `python -m benchmarks.speed --cases none --random 2 --seed 1 --random-seconds 0" in md
    assert "named cases" not in md and "## Random pairs (2, seed 1)" in md
    data = json.loads(next(tmp_path.glob("*-speed-random.json")).read_text())
    assert data["rows"] == [] and len(data["random"]["rows"]) == 2 and data["random"]["spec"]["seed"] == 1


def test_random_section_records_pairs_that_fail() -> None:
    from dataclasses import replace
    run = run_random(replace(TINY, count=1), seconds=0.0, progress=False)
    text = "\n".join(random_section(replace(run, errors=(("rand009_8_r1", "ValueError: a|b"),))))
    assert "| random pairs timed (errors) | 1 (1) |" in text
    assert text.endswith("| rand009_8_r1 | ValueError: a/b |")


@pytest.mark.parametrize("argv", [["--random", "-3"], ["--random-seconds", "-1"]])
def test_a_negative_count_or_budget_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--random -3`` once ran nothing and reported "No pair could be run": now argparse refuses it."""
    with pytest.raises(SystemExit) as e:
        main(["--cases", "none", *argv])
    assert e.value.code == 2 and "is below 0" in capsys.readouterr().err
