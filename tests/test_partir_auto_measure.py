"""``auto(..., measure_top=K)``: the clock chooses among the K best distinct schedules by score that
fit the budget. A timer injected in place of the clock makes every check machine-independent:
the timer's fastest wins, the candidates are distinct, fit, come best score first and start with
the simulator's own pick, and ``measure_top=0`` is exactly the simulator-only search."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from partir_core import Shard, auto, partition
from partir_core import models as M
from partir_core.auto import MEASURE_MARGIN, Beam, Evaluator, Objective, _measure, candidates, pick, rules_of
from partir_core.clock import ClockTimer, can_measure, compile_schedule
from partir_core.errors import PartitionError
from partir_core.ir import trace
from partir_core.propagate import Propagator
from partir_core.search_space import SearchSpace, State, build_space
from partir_core.tactics import Tactic
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 2, "model": 4})
BUDGET = 8000  # the MLP's replicated peak is 18,440 B: the budget rules some schedules out
GPT = dict(batch=4, seq=8, d_model=16, heads=4, head_dim=4, ffn=32, vocab=32, layers=2)


class FakeTimer:
    """Returns the given seconds for the first schedules it is handed (fewer: the time ran out),
    and records every call."""

    def __init__(self, times: Sequence[float]) -> None:
        self.times = list(times)
        self.calls: list[tuple[list[tuple[Tactic, ...]], float]] = []

    def __call__(self, schedules: Sequence[tuple[Tactic, ...]], deadline: float) -> list[float]:
        self.calls.append((list(schedules), deadline))
        return self.times[:len(schedules)]


def _auto(m: M.Model, **kw: Any) -> Any:
    kw.setdefault("memory_budget", BUDGET)
    return auto(m.step, MESH, *m.args, time_budget_s=600, progress=False, **kw)


@functools.cache
def _simulator_only() -> Any:
    return _auto(M.mlp(), measure_top=0)


def test_the_timers_fastest_candidate_wins() -> None:
    timer = FakeTimer([3e-3, 2e-3, 1e-3])
    r = _auto(M.mlp(), measure_top=3, timer=timer)
    meas = r.measurement
    assert meas is not None and len(timer.calls) == 1 and len(meas.candidates) == 3
    assert meas.chosen == 2 and [c.measured_s for c in meas.candidates] == [3e-3, 2e-3, 1e-3]
    assert r.schedule == r.fixed + meas.candidates[2].found
    assert r.evaluation == meas.candidates[2].evaluation
    assert [t for t, _ in r.steps] == list(meas.candidates[2].found)
    assert "[chosen]" in r.explain() and "not deterministic across machines" in r.explain()


def test_candidates_are_distinct_fit_and_come_best_score_first() -> None:
    timer = FakeTimer([1.0] * 4)
    m = M.mlp()
    r = _auto(m, measure_top=4, timer=timer)
    assert r.measurement is not None
    cands = r.measurement.candidates
    assert len(cands) == 4 and r.measurement.chosen == 0  # ties go to the better score
    assert [c.found for c in cands][0] == _simulator_only().found
    scores = [c.evaluation.score for c in cands]
    assert scores == sorted(scores)
    assert all(c.evaluation.peak_bytes <= BUDGET for c in cands)
    layouts = set()
    for c in cands:  # distinct programs: each candidate's input layouts differ from the others'
        step = partition(m.step, MESH, list(c.found))
        a = step.trace(*m.args)
        layouts.add(tuple(str(t) for t in a.lowered.in_types))
        assert step.simulate().peak_bytes == c.evaluation.peak_bytes
    assert len(layouts) == 4
    assert [list(s) for s in timer.calls[0][0]] == [list(c.found) for c in cands]


def test_measure_top_zero_is_the_simulator_alone_and_deterministic() -> None:
    r0, again = _simulator_only(), _auto(M.mlp(), measure_top=0)
    first_wins = _auto(M.mlp(), measure_top=3, timer=FakeTimer([1e-3, 2e-3, 3e-3]))
    assert r0.measurement is None and "== measured" not in r0.explain()
    assert r0.schedule == again.schedule == first_wins.schedule
    assert r0.evaluation == again.evaluation == first_wins.evaluation
    # remembering the candidates does not change the search itself
    assert r0.stats.history == first_wins.stats.history and r0.stats.evaluations == first_wins.stats.evaluations


def test_fixed_tactics_lead_every_timed_schedule_and_the_deadline_is_the_budget() -> None:
    m = M.gpt(**GPT)
    bp = Shard("batch", dim=0, axis="data")
    timer = FakeTimer([2e-3, 1e-3])
    before = time.perf_counter()
    r = auto(m.step, MESH, *m.args, fixed=[bp], max_evaluations=10, time_budget_s=600, progress=False,
             measure_top=2, timer=timer)
    schedules, deadline = timer.calls[0]
    assert len(schedules) == 2 and all(s[0] == bp for s in schedules)
    assert before + 600 <= deadline <= time.perf_counter() + 600
    assert r.schedule == schedules[1] and r.fixed == (bp,)


def test_candidates_the_time_ran_out_for_are_not_chosen() -> None:
    r = _auto(M.mlp(), measure_top=3, timer=FakeTimer([2e-3, 1e-3]))
    assert r.measurement is not None
    assert [c.measured_s for c in r.measurement.candidates] == [2e-3, 1e-3, None]
    assert r.measurement.chosen == 1 and "not compiled in time" in r.explain()


def test_nothing_is_timed_when_no_schedule_fits_or_one_is_asked_for() -> None:
    timer = FakeTimer([1e-3] * 3)
    over = _auto(M.mlp(), memory_budget=100, max_evaluations=20, measure_top=3, timer=timer)
    one = _auto(M.mlp(), measure_top=1, timer=timer)
    assert timer.calls == [] and over.measurement is None and one.measurement is None
    assert not over.evaluation.fits(100) and one.schedule == _simulator_only().schedule


def test_a_negative_measure_top_or_a_margin_out_of_range_is_a_typed_error() -> None:
    m = M.mlp()
    with pytest.raises(PartitionError, match="measure_top must be >= 0"):
        auto(m.step, MESH, *m.args, measure_top=-1, progress=False)
    with pytest.raises(PartitionError, match="measure_margin must be in"):
        auto(m.step, MESH, *m.args, measure_margin=1.0, progress=False)


def test_a_candidate_must_beat_the_best_scored_by_the_margin() -> None:
    r = _auto(M.mlp(), measure_top=3, timer=FakeTimer([1.0, 0.97, 0.98]))
    assert r.measurement is not None and r.measurement.chosen == 0
    assert r.schedule == _simulator_only().schedule
    assert pick([1.0, 0.94, 0.9], 0.05) == 2 and pick([1.0, 0.96], 0.05) == 0 and pick([1.0, 0.96], 0.0) == 1
    assert pick([None, 2.0, 1.0], 0.05) == 2 and pick([], 0.05) == 0


def test_measuring_where_possible_needs_concrete_arrays_and_devices() -> None:
    m = M.mlp()
    abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), m.args)
    assert can_measure(MESH, m.args)
    assert not can_measure(MESH, abstract)
    assert not can_measure(Mesh({"data": 2 * len(jax.devices())}), m.args)
    r = auto(m.step, MESH, *abstract, memory_budget=BUDGET, max_evaluations=6, time_budget_s=600, progress=False,
             measure_top=None)
    assert r.measurement is None
    # the default times nothing: the simulator alone, deterministic for a seed
    assert auto(m.step, MESH, *m.args, memory_budget=BUDGET, max_evaluations=6, progress=False).measurement is None


def test_the_clock_compiles_what_partition_runs_and_times_each_candidate() -> None:
    """The real clock (only structure asserted: its medians are the machine's)."""
    m = M.mlp()
    r0 = _simulator_only()
    done = compile_schedule(m.step, MESH, r0.schedule, *m.args)
    got = jax.tree_util.tree_leaves(done())
    want = jax.tree_util.tree_leaves(partition(m.step, MESH, r0)(*m.args))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    times = ClockTimer(m.step, MESH, m.args, min_rounds=2, max_rounds=2, warmup=1)(
        [r0.schedule, ()], time.perf_counter())
    assert len(times) == 2 and all(t > 0 for t in times)
    r = _auto(m, max_evaluations=10, measure_top=2)
    assert r.measurement is not None and len(r.measurement.candidates) == 2
    measured = [c.measured_s for c in r.measurement.candidates]
    assert all(t is not None and t > 0 for t in measured)
    assert r.measurement.chosen == pick(measured, MEASURE_MARGIN)


@functools.cache
def _searched() -> tuple[Evaluator, SearchSpace, State]:
    m = M.mlp()
    program = trace(m.step, *m.args)
    rules = rules_of(program)
    space = build_space(program, MESH, rules)
    evaluate = Evaluator(program, MESH, rules, Objective(memory_budget=BUDGET), keep=5)
    search = Beam(space, evaluate, State(Propagator(program, MESH, rules), ()))
    search.run(600.0, None, time.perf_counter())
    return evaluate, space, search.best


@given(st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=5))
def test_the_fastest_measured_candidate_is_chosen_past_the_margin(times: list[float]) -> None:
    evaluate, space, best = _searched()
    states = candidates(evaluate, best)
    assert len(states) == 5 and states[0] is best
    chosen, meas = _measure(evaluate, space, (), best, FakeTimer(times), time.perf_counter())
    assert meas is not None
    fastest = min(range(len(times)), key=lambda i: (times[i], i))
    want = fastest if times[fastest] < times[0] * (1 - MEASURE_MARGIN) else 0
    assert meas.chosen == want and chosen is states[want]
    assert all(times[want] * (1 - MEASURE_MARGIN) <= t for t in times)  # none beat it by the margin
    assert [c.measured_s for c in meas.candidates] == times + [None] * (5 - len(times))
