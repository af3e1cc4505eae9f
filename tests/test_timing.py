"""The one interleaving timer (redist.timing): the balanced order, the rounds it schedules and the
calls ``interleaved_runs`` makes, checked on counts and order, never on the clock."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from redist.timing import balanced_order, interleaved_runs, period, schedule, time_interleaved


def _adjacent(rows: list[list[Any]]) -> Counter[tuple[Any, Any]]:
    return Counter((r[i], r[i + 1]) for r in rows for i in range(len(r) - 1))


@pytest.mark.parametrize("n", range(1, 10))
def test_every_ordered_pair_is_adjacent_equally_often_over_a_period(n: int) -> None:
    rows = [balanced_order(list(range(n)), r) for r in range(period(n))]
    assert all(sorted(r) == list(range(n)) for r in rows)
    for pos in range(n):  # each side in each position equally often
        assert Counter(r[pos] for r in rows) == Counter({s: period(n) // n for s in range(n)})
    pairs = _adjacent(rows)  # each ordered pair of distinct sides adjacent once (n even), twice (n odd)
    assert pairs == Counter({(a, b): (1 if n % 2 == 0 else 2) for a in range(n) for b in range(n) if a != b})
    assert balanced_order(list(range(n)), period(n)) == rows[0]


def test_a_plain_rotation_would_fail_the_pair_property() -> None:
    """What the balance buys: a plain rotation (A B C, B C A, C A B) runs B right after A in two
    rounds and A right after B in none; the balanced order runs both orders equally often."""
    rotation = [[(i + k) % 3 for k in range(3)] for i in range(3)]
    assert _adjacent(rotation)[(0, 1)] == 2 and _adjacent(rotation)[(1, 0)] == 0
    balanced = [balanced_order([0, 1, 2], r) for r in range(period(3))]
    assert _adjacent(balanced)[(0, 1)] == _adjacent(balanced)[(1, 0)] == 2


def test_schedule_counts_rounds() -> None:
    assert len(list(schedule(3, 4))) == 4  # exactly reps without a budget
    assert len(list(schedule(3, 4, whole_periods=True))) == period(3) == 6
    assert len(list(schedule(4, 9, whole_periods=True))) == 12
    assert list(schedule(2, 3)) == [[0, 1], [1, 0], [0, 1]]
    # a budget that outlasts max_reps: max_reps rounded up to a whole period
    assert len(list(schedule(3, 1, budget_s=60.0, max_reps=7))) == 12
    assert len(list(schedule(0, 2))) == 2 and list(schedule(0, 1)) == [[]]


class _Out:
    def block_until_ready(self) -> _Out:
        return self


def test_interleaved_runs_calls_each_program_once_a_round_in_the_balanced_order() -> None:
    log: list[str] = []

    def prog(name: str) -> Any:
        def run(x: Any) -> _Out:
            log.append(name)
            return _Out()
        return run

    times = interleaved_runs([(prog(n), None) for n in "abc"], reps=6, warmup=1)
    assert [len(t) for t in times] == [6, 6, 6]
    assert log[:3] == list("abc")  # the warm-up, in the given order
    rounds = [log[3 + 3 * r: 6 + 3 * r] for r in range(6)]
    assert rounds == [balanced_order("abc", r) for r in range(6)]
    t = time_interleaved(prog("x"), None, prog("o"), None, reps=3, warmup=0)
    assert t.reps == 3 and log[-6:] == list("xooxxo")


def test_calibration_samples_run_in_the_balanced_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """``redist calibrate`` and autotuning time their plans in the same order (each call followed
    by the empty program): only the calls are faked, the loop is ``calibrate.samples``'s own."""
    from types import SimpleNamespace

    import redist.calibrate as cal

    log: list[Any] = []
    monkeypatch.setattr(cal, "compile_plan", lambda plan: plan.name)
    monkeypatch.setattr(cal, "_empty", lambda t: "empty")
    monkeypatch.setattr(cal, "_input", lambda t: None)
    monkeypatch.setattr(cal, "_call", lambda fn, x: (log.append(fn), (0.0, 1.0))[1])
    monkeypatch.setattr(cal, "_sample", lambda plan, seconds: plan.name)
    plans = [SimpleNamespace(name=n, src=SimpleNamespace(mesh="m")) for n in "abc"]
    assert cal.samples(plans, reps=6, warmup=0, clock="own") == list("abc")  # type: ignore[arg-type]
    assert log[1::2] == ["empty"] * 18
    assert [log[0::2][3 * r: 3 * r + 3] for r in range(6)] == [balanced_order("abc", r) for r in range(6)]
