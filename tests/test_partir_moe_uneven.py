"""The mixture of experts under padded batch parallelism: batch 7 on ``{data=8}``.

Its router takes ``top_k`` over the experts and numbers each expert's tokens by a ``cumsum`` along
the sequence, both along dimensions that are not padded (each padded batch row runs alone), and
the padded interpreter admits cumulative ops along a padded dimension too: ``pad.py`` pads at the
end, so a forward prefix of the true rows never reads the padding, and a reverse one selects the
identity there first. ``top_k`` along a padded dimension selects -inf there. Each kind is checked
against the plain function on random sizes, then whole steps against the unpartitioned one (f32;
moments and loss at float precision, parameters to 1% of Adam's step, as tests/test_partir_uneven.py
explains). A sort along a padded dimension stays refused, by name."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st

from partir_core import Shard, UnevenPrimitiveError, hlo_collectives, partition
from partir_core import models as M
from partir_core import strategies as S
from partir_core.pad import pad_function, pad_inputs, slice_outputs
from spmd_types import Mesh

pytestmark = pytest.mark.jax
LR = 1e-2  # models.adam_update's default step size
CUMULATIVE = {"cumsum": jax.lax.cumsum, "cumprod": jax.lax.cumprod, "cummax": jax.lax.cummax,
              "cummin": jax.lax.cummin, "cumlogsumexp": jax.lax.cumlogsumexp}


def _padded_call(fn, args, pads):  # type: ignore[no-untyped-def]
    """Run ``fn`` through the padded interpreter (no partitioning) and cut the outputs back."""
    padded, _, padding = pad_function(fn, args, pads)
    leaves, tree = jax.tree_util.tree_flatten(args)
    outs = jax.tree_util.tree_leaves(padded(*jax.tree_util.tree_unflatten(tree, pad_inputs(leaves, padding))))
    return [np.asarray(x) for x in slice_outputs(outs, padding, None)]


@settings(max_examples=20 if THOROUGH else 6, deadline=None)
@given(prim=st.sampled_from(sorted(CUMULATIVE)), rows=st.integers(1, 7), cols=st.integers(1, 5),
       padded_dim=st.integers(0, 1), axis=st.integers(0, 1), reverse=st.booleans(), extra=st.integers(1, 3),
       seed=st.integers(0, 99))
def test_cumulative_ops_on_padded_operands_equal_the_function(prim: str, rows: int, cols: int, padded_dim: int,
                                                              axis: int, reverse: bool, extra: int,
                                                              seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.uniform(0.5, 1.5, size=(rows, cols)).astype(np.float32))

    def f(x: jax.Array) -> jax.Array:
        return CUMULATIVE[prim](x, axis=axis, reverse=reverse)

    got = _padded_call(f, (x,), {0: {padded_dim: x.shape[padded_dim] + extra}})
    np.testing.assert_allclose(got[0], np.asarray(f(x)), rtol=1e-5, atol=1e-6)


@settings(max_examples=12 if THOROUGH else 4, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(2, 6), padded_dim=st.integers(0, 1), axis=st.integers(0, 1),
       extra=st.integers(1, 3), seed=st.integers(0, 99))
def test_top_k_on_padded_operands_equals_the_function(rows: int, cols: int, padded_dim: int, axis: int,
                                                      extra: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(rows, cols)).astype(np.float32)) - 50.0  # below the zero padding
    k = min(2, x.shape[axis])

    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.top_k(jnp.moveaxis(x, axis, -1), k)

    got = _padded_call(f, (x,), {0: {padded_dim: x.shape[padded_dim] + extra}})
    for g, r in zip(got, f(x)):
        np.testing.assert_array_equal(g, np.asarray(r))


def test_sort_along_a_padded_dimension_stays_refused_by_name() -> None:
    x = jnp.arange(7.0)[::-1]
    with pytest.raises(UnevenPrimitiveError, match=r"sort has no padding rule on padded dimension\(s\) \[0\]"):
        _padded_call(lambda x: jnp.sort(x), (x,), {0: {0: 8}})
    step = partition(lambda x: jnp.sort(x, axis=0), Mesh({"data": 8}), [Shard("x", dim=0, axis="data")])
    with pytest.raises(UnevenPrimitiveError, match="sort"):
        step(x)


SIZES = dict(seq=8, d_model=16, heads=8, kv_heads=4, head_dim=4, vocab=32, layers=1, ffn=16, experts=8,
             dtype=jnp.float32)


@functools.cache
def _moe(batch: int) -> M.Model:
    return M.moe(batch=batch, **SIZES)  # type: ignore[arg-type]


# (strategy, collectives per step): BP one all-reduce per gradient (10 block tensors, embed, final
# norm, unembed) and the loss, as at batch 8; EP's six token all-to-alls per layer and three
# all-reduces fewer (tests/test_partir_moe_ep.py)
CASES = [("BP", {"all_reduce": 14})] + [("BP+EP", {"all_reduce": 11, "all_to_all": 6})] * THOROUGH


@pytest.mark.parametrize("strategy,counts", CASES, ids=[c[0] for c in CASES])
def test_moe_batch_7_on_data8_equals_unpartitioned_step(strategy: str, counts: dict[str, int]) -> None:
    m = _moe(7)
    step = partition(m.step, Mesh({"data": 8}), S.schedule("moe", strategy))
    got = [np.asarray(x) for x in jax.tree_util.tree_leaves(step(*m.args))]
    ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]
    n_params = len(jax.tree_util.tree_leaves(m.params))
    for k, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape
        tol = dict(atol=LR * 1e-2) if k < n_params else dict(rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(g, r, **tol)  # type: ignore[arg-type]
    assert step.padding is not None and step.padding.inputs[-1] == ((0, 7, 8),)  # batch/tokens 7 -> 8
    sim = step.simulate()
    assert sim.counts() == counts
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    assert sim.pad_bytes == 2 * 8 * 4  # tokens and labels each gain one row of 8 int32
