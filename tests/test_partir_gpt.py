"""The modern GPT (scan over stacked layers, checkpoint, dropout, tied embeddings, integer labels)
under every ready strategy on {data=2, model=4}: the partitioned step equals the unpartitioned one,
the simulator predicts the program's collectives exactly, and the counts equal a hand count."""

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
MESH = Mesh({"data": 2, "model": 4})
LAYERS = 2
BLOCK_PARAMS = 12  # ln1 g/b, wq, wk, wv, wo, ln2 g/b, w1, b1, w2, b2 (stacked)


@functools.cache
def _model() -> M.Model:
    return M.gpt(batch=4, seq=8, d_model=16, heads=4, head_dim=4, ffn=32, vocab=32, layers=LAYERS)


@functools.cache
def _reference() -> list[np.ndarray]:
    m = _model()
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]


# executed collectives per training step, as a practitioner counts them
HAND = {
    # one all-reduce per gradient (12 per layer, inside the backward loop; embed, pos, final LN
    # g and b outside) and one for the loss; the label loss and the lookup need none
    "BP": {"all_reduce": BLOCK_PARAMS * LAYERS + 4 + 1},
    # Megatron per layer: attention and MLP outputs forward (2), the rematerialised forward
    # needs only the attention one again (1), the input gradients of both blocks backward (2)
    "MP": {"all_reduce": 5 * LAYERS},
}


@pytest.mark.parametrize("strategy", ["BP", "MP", "BP+MP", "BP+MP+Z3", "BP+MP+SP+VP"])
def test_gpt_strategy_equals_unpartitioned_step(strategy: str) -> None:
    m = _model()
    step = partition(m.step, MESH, S.schedule("gpt", strategy))
    out = step(*m.args)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(jax.eval_shape(m.step, *m.args))
    for g, r in zip(jax.tree_util.tree_leaves(out), _reference()):
        np.testing.assert_allclose(np.asarray(g), r, rtol=2e-5, atol=2e-6)
    sim = step.simulate()
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    if strategy in HAND:
        assert sim.counts() == HAND[strategy]
