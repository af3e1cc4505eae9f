"""``partir_core.auto``: the search recovers Megatron on the transformer once batch parallelism is
fixed, fits the memory budget by the simulator's peak, is deterministic for a seed, and the found
schedule partitions the step into one that equals the unpartitioned step."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from partir_core import Shard, auto, partition
from partir_core import models as M
from partir_core.auto import AutoResult
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
    r = auto(m.step, MESH, *m.args, memory_budget=BUDGET, fixed=[Shard("batch", dim=0, axis="data")],
             seed=0, max_evaluations=60, time_budget_s=600, progress=False)
    return m, r


def test_finds_megatron_after_fixed_batch_parallelism() -> None:
    _, r = _transformer()
    found = {(t.targets, t.axis) for t in r.found if isinstance(t, Shard)}
    assert (tuple(ATTENTION.items()), ("model",)) in found
    assert (tuple(MLP_BLOCK.items()), ("model",)) in found
    assert r.schedule[0] == Shard("batch", dim=0, axis="data")
    assert "[fixed]" in r.explain() and "[found]" in r.explain()


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
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)  # reordered f32 sums (Adam update)


def test_deterministic_for_a_seed() -> None:
    m = M.mlp()
    runs = [auto(m.step, MESH, *m.args, memory_budget=8000, seed=s, max_evaluations=30, time_budget_s=600,
                 progress=False) for s in (3, 3)]
    assert runs[0].stats.stopped_by == "evaluation budget"
    assert [str(t) for t in runs[0].schedule] == [str(t) for t in runs[1].schedule]
    assert runs[0].evaluation == runs[1].evaluation
    assert runs[0].evaluation.peak_bytes <= 8000


def test_unfittable_budget_returns_least_overflow_and_says_so() -> None:
    m = M.mlp()
    r = auto(m.step, MESH, *m.args, memory_budget=100, max_evaluations=20, progress=False)
    assert not r.evaluation.fits(100)
    assert "EXCEEDS" in r.explain()
