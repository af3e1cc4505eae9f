"""The Gloo benchmark's paired statistics, tie classification and ceiling line (issue 11): exact
quantities on fixed numbers and fixed HLO text, never a clock."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.multiprocess import hlo_verdict, summary
from benchmarks.paired import balanced_order, median_ci, paired_ratio, period, spans, spread


def test_balanced_order_puts_every_side_in_every_position() -> None:
    assert [balanced_order("AB", r) for r in range(4)] == [list("AB"), list("BA"), list("AB"), list("BA")]
    assert balanced_order([], 3) == []


@pytest.mark.parametrize("n", range(1, 14))
def test_balanced_order_runs_each_side_after_each_other_equally_often(n: int) -> None:
    """Over one period every side holds every position equally often and follows every other side
    equally often (a plain rotation fails the second: a side always follows the same neighbour)."""
    names = [f"s{i}" for i in range(n)]
    rows = [balanced_order(names, r) for r in range(period(n))]
    assert all(sorted(r) == sorted(names) for r in rows)
    for pos in range(n):
        assert len(set(Counter(r[pos] for r in rows).values())) == 1
    follows = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1
    assert balanced_order(names, period(n)) == rows[0]


def test_median_ci_takes_order_statistics() -> None:
    ci = median_ci([float(v) for v in range(1, 101)])
    assert ci.median == 50.5 and ci.n == 100
    # ranks 50 -+ 1.96 * 10 / 2: the 41st and 60th values (1-based)
    assert (ci.lo, ci.hi) == (41.0, 60.0)
    assert median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0, 3)
    assert not ci.excludes(50.0) and ci.excludes(61.0)
    with pytest.raises(ValueError):
        median_ci([])


def test_paired_ratio_is_the_median_of_per_pair_ratios() -> None:
    # a slow phase hits both sides of pair 3: the ratio of medians would be 2.0 / 1.5, the pairs say 2.0
    a, b = [2.0, 2.0, 20.0, 2.0, 2.0], [1.0, 1.0, 10.0, 1.5, 1.0]
    assert paired_ratio(a, b).median == 2.0
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


def test_spans_run_from_the_last_start_to_the_last_end() -> None:
    starts = [[0.0, 10.0], [1.0, 10.5]]
    ends = [[3.0, 12.0], [2.5, 13.0]]
    assert spans(starts, ends) == [2.0, 2.5]
    with pytest.raises(ValueError):
        spans([[0.0]], [[1.0, 2.0]])
    assert spread([1.1, 0.9, 1.0]) == (0.9, 1.1)


_MODULE = """HloModule m, num_partitions=8

ENTRY %main (p: f32[64,32]) -> f32[64,32] {
  %p = f32[64,32]{1,0} parameter(0)
  %c = f32[64,32]{1,0} copy(%p)
  %a2a = f32[64,32]{1,0} all-to-all(%c), replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}
  ROOT %cp = f32[64,32]{1,0} collective-permute(%a2a), source_target_pairs={{0,2},{2,0}}
}
"""


def test_hlo_verdict_tie_same_differs() -> None:
    block = 64 * 32 * 4
    assert hlo_verdict(_MODULE, _MODULE, block) == "tie"
    no_copy = _MODULE.replace("  %c = f32[64,32]{1,0} copy(%p)\n", "").replace("all-to-all(%c)", "all-to-all(%p)")
    assert hlo_verdict(_MODULE, no_copy, block) == "same"  # one local pass (the copy) fewer
    reordered = "\n".join(_MODULE.splitlines()[:5] + [
        "  %cp = f32[64,32]{1,0} collective-permute(%c), source_target_pairs={{0,2},{2,0}}",
        "  ROOT %a2a = f32[64,32]{1,0} all-to-all(%cp), replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}",
        "}"])
    assert hlo_verdict(_MODULE, reordered, block) == "same"  # the permute first
    other = _MODULE.replace("{{0,1},{2,3},{4,5},{6,7}}", "{{0,4},{1,5},{2,6},{3,7}}")
    assert hlo_verdict(_MODULE, other, block) == "differs"


def test_summary_prints_the_ceiling_of_structural_ties() -> None:
    lines = [f"c{i} OK 1 steps  xla 1.000 ms  ours 1.000 ms  {s:.2f}x (0.90-1.10)  predicted 1.000 ms"
             f"  A/A 1.00x (0.95-1.05)  call +0.100 ms  reps 64  hlo {v}: ours x; xla x"
             for i, (s, v) in enumerate([(1.0, "tie"), (1.0, "tie"), (1.69, "differs"), (1.69, "same")])]
    out = summary(lines)
    assert "4 cases: geomean 1.30x, worst 1.00x (c0), 0 below 0.95x" in out
    assert "A/A control (XLA vs XLA) geomean 1.00x, range 1.00-1.00x" in out
    assert "2 of 4 cases are structural ties" in out and "1.3^(4/2) = 1.69x; they measured 1.69x" in out


def test_summary_prints_the_collective_floor_ceiling() -> None:
    """With ``--floor`` each case line ends in its floors and ceiling; the summary gives their
    geometric mean over all cases, the structural ties and the rest."""
    rows = [(1.0, "tie", 1.0), (1.0, "tie", 1.21), (1.5, "differs", 2.0), (1.2, "same", 1.28)]
    lines = [f"c{i} OK 1 steps  xla 1.000 ms  ours 1.000 ms  {s:.2f}x (0.90-1.10)  predicted 1.000 ms"
             f"  A/A 1.00x (0.95-1.05)  call +0.100 ms  reps 64  floor ours 0.500 / xla 0.600 ms (ceiling {c:.2f}x)"
             f"  hlo {v}: ours x; xla x" for i, (s, v, c) in enumerate(rows)]
    out = summary(lines)
    assert "collective floor: geomean ceiling" in out
    assert "1.33x over all 4; 1.10x on the 2 structural ties, 1.60x on the other 2" in out


def test_floor_text_takes_the_lesser_floor_and_never_goes_below_the_speedup() -> None:
    from benchmarks.multiprocess import floor_text

    med = {"xla": 4e-3, "dispatch": 1e-4, "bare:a": 1e-3, "bare:b": 2e-3}
    uses = {"ours": ["bare:a"], "xla": ["bare:a", "bare:b"]}
    # ours 1.0 ms, XLA's 1 + 2 - 0.1 (one dispatch counted once) = 2.9 ms: ceiling 4 / 1 = 4x
    assert floor_text(med, uses, 1.5) == "  floor ours 1.000 / xla 2.900 ms (ceiling 4.00x)"
    assert floor_text(med, uses, 5.0).endswith("(ceiling 5.00x)")
    assert floor_text(med, {"ours": ["bare:a"]}, 1.5) == ""  # XLA has a collective with no bare form


def test_gather_spans_on_one_process_are_its_own_times() -> None:
    from redist.coordination import gather_spans

    assert gather_spans("t", [0.0, 5.0], [1.5, 7.0]) == [1.5, 2.0]


def test_calibration_clock_is_checked() -> None:
    from redist.calibrate import CLOCKS, samples
    from redist.errors import CalibrationError

    assert CLOCKS == ("span", "own")
    with pytest.raises(CalibrationError, match="clock 'wall' is not one of"):
        samples([], 1, clock="wall")
