"""Every model x strategy: the partitioned training step equals the unpartitioned one, and the
simulator predicts exactly the collectives the emitted program contains."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from partir_core import hlo_collectives, partition
from partir_core import models as M
from partir_core import strategies as S
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 4, "model": 2})
CASES = [(m, s) for m in ("mlp", "transformer") for s in S.applicable(m)]


@functools.cache
def _model(name: str) -> M.Model:
    return M.MODELS[name]()


@functools.cache
def _reference(name: str) -> list[np.ndarray]:
    m = _model(name)
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]


@pytest.mark.parametrize("model,strategy", CASES)
def test_partitioned_step_matches_and_simulator_predicts_hlo(model: str, strategy: str) -> None:
    m = _model(model)
    step = partition(m.step, MESH, S.schedule(model, strategy))
    out = step(*m.args)
    got = jax.tree_util.tree_leaves(out)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(jax.eval_shape(m.step, *m.args))
    for g, r in zip(got, _reference(model)):
        np.testing.assert_allclose(np.asarray(g), r, rtol=2e-5, atol=2e-6)
    assert step.simulate().hlo_counts() == hlo_collectives(step.lower_text(*m.args))


# what a practitioner derives by hand for Megatron (one all-reduce per block and direction)
@pytest.mark.parametrize("model,expected", [("mlp", 1), ("transformer", 4)])
def test_megatron_collectives_match_hand_count(model: str, expected: int) -> None:
    m = _model(model)
    step = partition(m.step, MESH, S.schedule(model, "MP"))
    step.trace(*m.args)
    counts = step.simulate().counts()
    # mlp: forward all-reduce after w2 only (the input needs no gradient); transformer: forward
    # after attention and after the MLP, backward the same two for the residual stream's gradient
    assert counts == {"all_reduce": expected}


def test_bp_reduces_each_gradient_once_and_the_loss() -> None:
    m = _model("mlp")
    step = partition(m.step, MESH, S.schedule("mlp", "BP"))
    step.trace(*m.args)
    reasons = {c.reason for c in step.simulate().collectives}
    # one pending-sum reduction per parameter gradient (4) and one for the loss
    assert len(reasons) == 5
