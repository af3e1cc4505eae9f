"""``partir_core.auto``: the search recovers batch parallelism over ``data`` and Megatron over
``model`` on the transformer with nothing fixed, fits the memory budget by the simulator's peak,
finds the exhaustive best on a tiny MLP, is deterministic for a seed, and the found
schedule partitions the step into one that equals the unpartitioned step."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import pytest

from partir_core import Shard, auto, partition
from partir_core import auto_profile as P
from partir_core import models as M
from partir_core.auto import METHODS, AutoResult
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 2, "model": 4})
SIZES = dict(batch=8, seq=16, d_model=32, heads=4, head_dim=8, ffn=128, vocab=64)
# below the simulated peak of every hand strategy that replicates the parameters (BP 478,216 B,
# MP 426,504 B) and above BP+MP's (257,544 B)
BUDGET = 300_000
ATTENTION = {"params/wk": 1, "params/wo": 0, "params/wq": 1, "params/wv": 1}
MLP_BLOCK = {"params/b1": 0, "params/w1": 1, "params/w2": 0}


@functools.cache
def _transformer() -> tuple[M.Model, AutoResult]:
    m = M.transformer(**SIZES)
    r = auto(m.step, MESH, *m.args, memory_budget=BUDGET, seed=0, max_evaluations=60, time_budget_s=600,
             progress=False, measure_top=0)
    return m, r


def test_finds_batch_parallelism_and_megatron_with_nothing_fixed() -> None:
    _, r = _transformer()
    found = {(t.targets, t.axis) for t in r.found if isinstance(t, Shard)}
    assert (tuple(ATTENTION.items()), ("model",)) in found
    assert (tuple(MLP_BLOCK.items()), ("model",)) in found
    assert ((("batch/targets", 0), ("batch/tokens", 0)), ("data",)) in found
    assert r.stats.stopped_by == "evaluation budget" and r.stats.evaluations == 60
    assert "[found]" in r.explain()


def test_fixed_tactics_come_first_and_are_kept() -> None:
    m = M.transformer(**SIZES)
    bp = Shard("batch", dim=0, axis="data")
    r = auto(m.step, MESH, *m.args, memory_budget=BUDGET, fixed=[bp], seed=0, max_evaluations=15,
             time_budget_s=600, progress=False, measure_top=0)
    assert r.schedule[0] == bp and r.fixed == (bp,)
    assert "[fixed]" in r.explain()


def test_budget_respected_and_partitioned_step_equals_reference() -> None:
    m, r = _transformer()
    step = partition(m.step, MESH, r.schedule)
    got = jax.tree_util.tree_leaves(step(*m.args))
    sim = step.simulate()
    assert sim.peak_bytes == r.evaluation.peak_bytes <= BUDGET < r.baseline.peak_bytes
    lay = {p: lay for p, lay in zip(step.analysis.program.input_paths, step.analysis.lowered.in_types)}
    for path, d in {**ATTENTION, **MLP_BLOCK}.items():
        assert lay[path].dims[d] == ("model",), (path, lay[path])
    want = jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))
    for g, w in zip(got, want):  # float reassociation of the sharded sums, amplified by Adam's update
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def test_deterministic_for_a_seed() -> None:
    m = M.mlp()
    runs = [auto(m.step, MESH, *m.args, memory_budget=8000, seed=s, max_evaluations=30, time_budget_s=600, method="mcts",
                 progress=False, measure_top=0) for s in (3, 3)]
    assert runs[0].stats.stopped_by == "evaluation budget"
    assert [str(t) for t in runs[0].schedule] == [str(t) for t in runs[1].schedule]
    assert runs[0].evaluation == runs[1].evaluation
    assert runs[0].evaluation.peak_bytes <= 8000


def test_unfittable_budget_returns_least_overflow_and_says_so() -> None:
    m = M.mlp()
    r = auto(m.step, MESH, *m.args, memory_budget=100, max_evaluations=20, progress=False, measure_top=0)
    assert not r.evaluation.fits(100)
    assert "EXCEEDS" in r.explain()


def test_profile_features_count_matmul_flops_exactly() -> None:
    """Replicated MLP step: forward x@w1, h@w2; backward dW2, dh, dW1 (x needs no gradient)."""
    m = M.mlp(batch=16, d_in=16, hidden=32, classes=8)
    step = partition(m.step, MESH, [])
    step.trace(*m.args)
    f = P.features(step.analysis.lowered, step.simulate())
    assert f.dot_flops == 2 * 16 * 32 * (3 * 8 + 2 * 16)
    assert f.rounds == (0.0,) * len(P.KIND_ORDER) and f.recv_bytes == 0
    assert f.other_flops == step.simulate().flops - f.dot_flops > 0


def test_fit_recovers_a_known_profile_and_stays_non_negative() -> None:
    truth = P.CostProfile(1e-3, 2e-10, 5e-9, (3e-4, 1e-4, 0.0, 2e-5), 1e-9)
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(40):
        f = P.Features(*rng.uniform(1e6, 1e8, 2), tuple(rng.integers(0, 50, 4).astype(float)),
                       float(rng.uniform(0, 1e7)))
        samples.append((f, truth.time_s(f)))
    got = P.fit(samples)
    np.testing.assert_allclose(got.coefficients(), truth.coefficients(), rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="no negative"):
        P.CostProfile(0.0, -1.0, 0.0, (0.0,) * 4, 0.0)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_respects_the_evaluation_budget_and_is_deterministic(method: str) -> None:
    m = M.mlp()
    runs = [auto(m.step, MESH, *m.args, memory_budget=8000, seed=1, max_evaluations=12, method=method,
                 time_budget_s=600, progress=False, measure_top=0) for _ in range(2)]
    assert runs[0].stats.evaluations <= 12 and len(runs[0].stats.history) == runs[0].stats.evaluations
    assert runs[0].stats.method == method and method in runs[0].explain()
    assert [str(t) for t in runs[0].schedule] == [str(t) for t in runs[1].schedule]
    assert [e.score for e in runs[0].stats.history] == [e.score for e in runs[1].stats.history]
    scores = [e.score for e in runs[0].stats.history if e.fits(8000)]
    assert scores == sorted(scores, reverse=True)  # the best so far never gets worse


def test_unknown_method_is_a_typed_error() -> None:
    m = M.mlp()
    with pytest.raises(ValueError, match="unknown search method 'anneal'"):
        auto(m.step, MESH, *m.args, method="anneal", progress=False, measure_top=0)


def test_partition_accepts_the_auto_result_and_a_seed_fixes_the_schedule() -> None:
    """``partition(step, mesh, auto(...))``: the result itself is a schedule; two searches with
    one seed on the scan-over-layers GPT return the same schedule and the same scored program."""
    m = M.gpt(batch=4, seq=8, d_model=16, heads=4, head_dim=4, ffn=32, vocab=32, layers=2)
    runs = [auto(m.step, MESH, *m.args, memory_budget=60_000, seed=7, max_evaluations=10, time_budget_s=600,
                 progress=False, measure_top=0) for _ in range(2)]
    assert [str(t) for t in runs[0].schedule] == [str(t) for t in runs[1].schedule] != []
    assert runs[0].evaluation == runs[1].evaluation
    step = partition(m.step, MESH, runs[0])
    assert step.schedule == runs[0].schedule
    got = jax.tree_util.tree_leaves(step(*m.args))
    assert step.simulate().peak_bytes == runs[0].evaluation.peak_bytes
    want = jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)


def test_auto_result_from_another_mesh_or_a_bare_tactic_is_a_typed_error() -> None:
    from partir_core import TacticError

    m = M.mlp()
    r = auto(m.step, MESH, *m.args, max_evaluations=3, time_budget_s=600, progress=False, measure_top=0)
    with pytest.raises(TacticError, match="searched on mesh"):
        partition(m.step, Mesh({"data": 8}), r)
    with pytest.raises(TacticError, match="wrap it in a list"):
        partition(m.step, MESH, Shard("x", dim=0, axis="data"))  # type: ignore[arg-type]


def _exhaustive_best(m: M.Model, budget: int) -> tuple[int, Any]:
    """Every state reachable from the replicated program, costed: (how many, the best rank)."""
    from partir_core.auto import Evaluator, Objective, rules_of
    from partir_core.ir import trace
    from partir_core.propagate import Propagator
    from partir_core.search_space import State, build_space

    program = trace(m.step, *m.args)
    rules = rules_of(program)
    space = build_space(program, MESH, rules)
    ev = Evaluator(program, MESH, rules, Objective(memory_budget=budget))
    frontier = [State(Propagator(program, MESH, rules), ())]
    seen = {frontier[0].key}
    ranks = []
    while frontier:
        nxt = []
        for st in frontier:
            e = ev(st)
            ranks.append((not e.fits(budget), e.score))
            for a in space.actions:
                child = st.apply(space, a)
                if child is not None and child.key not in seen:
                    seen.add(child.key)
                    nxt.append(child)
        frontier = nxt
    return len(ranks), min(ranks)


@pytest.mark.parametrize("budget", [None, 8000])
def test_beam_finds_the_exhaustive_best_on_a_tiny_mlp(budget: int | None) -> None:
    """Every reachable schedule of the tiny MLP costed: the default search ends on its own
    (converged or exhausted, not on a budget) with the best one, in fewer evaluations."""
    m = M.mlp()
    n, (over, score) = _exhaustive_best(m, budget or 2**40)
    r = auto(m.step, MESH, *m.args, memory_budget=budget, time_budget_s=600, progress=False, measure_top=0)
    assert r.stats.stopped_by in ("converged", "exhausted")
    assert r.stats.evaluations < n
    assert (not r.evaluation.fits(budget), r.evaluation.score) == (over, pytest.approx(score, rel=1e-12))


def test_reach_ranks_batch_and_megatron_dims_first_and_drops_negligible_groups() -> None:
    """On the scan-over-layers GPT the groups not offered are stacked layer dimensions (sliced off
    by the loop: LayerNorm and bias stacks), and the batch, the sequence, the model width, the MLP width and the heads are the
    first five groups in the search's order."""
    from partir_core.auto import rules_of
    from partir_core.ir import trace
    from partir_core.search_space import build_space

    m = M.gpt(batch=4, seq=8, d_model=16, heads=4, head_dim=4, ffn=32, vocab=32, layers=2)
    program = trace(m.step, *m.args)
    space = build_space(program, MESH, rules_of(program))
    layer_dims = {i for i, g in enumerate(space.groups) if g.path.startswith("params/blocks/") and g.dim == 0}
    assert space.dropped and set(space.dropped) <= layer_dims
    assert not {a.group for a in space.actions} & set(space.dropped)
    first = []
    for a in space.ordered(MESH):
        if a.group not in first:
            first.append(a.group)
    reps = {(space.groups[i].path, space.groups[i].dim) for i in first[:5]}
    members = {pd for i in first[:5] for pd in space.groups[i].members}
    assert ("batch/tokens", 0) in members and ("batch/tokens", 1) in members
    assert ("params/blocks/w1", 2) in members and ("params/blocks/wq", 2) in members
    assert len(reps) == 5
