"""Uneven dimensions: a dimension a tactic shards over axes that do not divide it is padded to the
next multiple inside the partitioned program (``partition(..., uneven="pad")``, the default) and
the step equals the unpartitioned one; ``uneven="refuse"`` raises ``IndivisibleDimError``.

The padded interpreter (``partir_core.pad``) is checked on its own against the plain function on
random sizes, then whole training steps under BP (batch 7), MP (6 heads over ``model=4``), SP
(sequence 126) and VP (vocabulary 1001), f32. Adam's first step divides each gradient by its own
magnitude plus ``eps=1e-8``, so a gradient near 1e-8 (rare vocabulary rows) turns float
reassociation into a visible parameter difference: the loss and both Adam moments (the gradient
and its square) are compared at float precision, the updated parameters to 1% of the step size."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st

from partir_core import (
    IndivisibleDimError,
    PartitionError,
    Shard,
    UnevenPrimitiveError,
    hlo_collectives,
    partition,
)
from partir_core import models as M
from partir_core import strategies as S
from partir_core.pad import pad_function, pad_inputs, slice_outputs
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 2, "model": 4})
LR = 1e-2  # models.adam_update's default step size


def _padded_call(fn, args, pads):  # type: ignore[no-untyped-def]
    """Run ``fn`` through the padded interpreter (no partitioning) and cut the outputs back."""
    padded, _, padding = pad_function(fn, args, pads)
    leaves, tree = jax.tree_util.tree_flatten(args)
    outs = jax.tree_util.tree_leaves(padded(*jax.tree_util.tree_unflatten(tree, pad_inputs(leaves, padding))))
    return [np.asarray(x) for x in slice_outputs(outs, padding, None)]


def _softmax_stats(x: jax.Array, w: jax.Array) -> tuple[jax.Array, ...]:
    """Every masked kind on the padded last dimension: max, argmax, mean, log-softmax loss and a
    contraction, plus an elementwise result that keeps the dimension."""
    logp = jax.nn.log_softmax(x, axis=-1)
    return (x.max(-1), jnp.argmax(x, -1), x.mean(-1), -logp.mean(), x @ w, jnp.tanh(x) * 2.0,
            jax.grad(lambda x: jax.nn.logsumexp(x, axis=-1).sum())(x))


@settings(max_examples=12 if THOROUGH else 5, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 9), multiple=st.integers(2, 4), seed=st.integers(0, 99))
def test_padded_interpreter_equals_function(rows: int, n: int, multiple: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(rows, n)).astype(np.float32)) - 50.0  # all negative: max must ignore padding
    w = jnp.asarray(rng.normal(size=(n, 3)).astype(np.float32))
    padded = -(-n // multiple) * multiple
    got = _padded_call(_softmax_stats, (x, w), {0: {1: padded}, 1: {0: padded}})
    for g, r in zip(got, jax.tree_util.tree_leaves(_softmax_stats(x, w))):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, np.asarray(r), rtol=1e-5, atol=1e-5)


def test_primitive_without_padding_rule_is_refused_by_name() -> None:
    x = jnp.arange(7.0)
    with pytest.raises(UnevenPrimitiveError, match=r"sort .*dimension\(s\) \[0\]"):
        _padded_call(lambda x: jnp.sort(x), (x,), {0: {0: 8}})


# -- whole steps ------------------------------------------------------------------------------------


def _mlp_step_sum(params, batch):  # type: ignore[no-untyped-def]
    return M.make_train_step(M.mlp_loss)(params, M.adam_init(params), batch)


def _check_step(got: list[np.ndarray], ref: list[np.ndarray], n_params: int) -> None:
    """Outputs are (params, {count, m, v}, loss): moments and loss at float precision, params to
    1% of the step size (see the module docstring)."""
    for k, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape
        tol = dict(atol=LR * 1e-2) if k < n_params else dict(rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(g, r, **tol)  # type: ignore[arg-type]


def test_mlp_batch_7_under_bp_equals_step_with_hand_counts() -> None:
    m = M.mlp(batch=7)
    mesh = Mesh({"data": 4, "model": 2})
    step = partition(m.step, mesh, S.schedule("mlp", "BP"))
    got = [np.asarray(x) for x in jax.tree_util.tree_leaves(step(*m.args))]
    ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6)
    sim = step.simulate()
    # one all-reduce per gradient (w1, b1, w2, b2) and one for the loss: padding adds none
    assert sim.counts() == {"all_reduce": 5}
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    assert step.analysis.lowered.in_types[-2].shape == (8, 16)  # batch/x enters padded to 8
    # x f32[7,16] and y i32[7] each gain one row: 16*4 + 4 bytes; outputs are not padded
    assert sim.pad_bytes == 68
    assert sim.pad_flops > 0
    text = step.explain()
    assert "input batch/x: dim 0: 7 -> 8" in text and "padding adds 68 B" in text


def test_mlp_classes_7_sharded_keeps_softmax_exact_and_cuts_outputs() -> None:
    m = M.mlp(batch=8, classes=7)
    step = partition(m.step, Mesh({"data": 4, "model": 2}), [Shard({"w2": 1, "b2": 0}, axis="data")])
    got = [np.asarray(x) for x in jax.tree_util.tree_leaves(step(*m.args))]
    ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]
    _check_step(got, ref, len(jax.tree_util.tree_leaves(m.params)))
    assert step.simulate().hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    # w2 (32x7) and b2 (7) gain a column in params, m and v, in and out: (32 + 1) * 4 B * 6
    assert step.simulate().pad_bytes == 33 * 4 * 6


def test_refuse_keeps_indivisible_error() -> None:
    m = M.mlp(batch=7)
    step = partition(m.step, Mesh({"data": 4, "model": 2}), S.schedule("mlp", "BP"), uneven="refuse")
    with pytest.raises(IndivisibleDimError, match="batch/x dimension 0 has size 7, not divisible by 4"):
        step.trace(*m.args)


def test_bad_uneven_option_is_typed() -> None:
    with pytest.raises(PartitionError, match="uneven= must be 'pad' or 'refuse'"):
        partition(M.mlp().step, MESH, [], uneven="crop")


def test_unpaddable_primitive_in_a_step_names_it() -> None:
    def f(x: jax.Array) -> jax.Array:
        return jnp.sort(x, axis=0)

    step = partition(f, Mesh({"data": 4, "model": 2}), [Shard("x", dim=0, axis="data")])
    with pytest.raises(UnevenPrimitiveError, match="sort"):
        step(jnp.arange(7.0))


# GPT and Llama: (model, strategy, uneven sizes, collectives per step). The default profile runs
# one (vocabulary 1001 under VP, ~40 s here); the thorough profile every uneven kind. Counts as a
# practitioner counts them (one layer): BP one all-reduce per gradient (GPT 16, Llama 9 + 3) and
# one for the loss, MP Megatron's 5 per layer: both equal to the even sizes they pad to. VP: the
# lookup, the loss's max and sum, the embedding gradient and the loss value; one all-reduce fewer
# than vocabulary 1004 (the masked softmax's backward is lowered another way). SP: two all-gathers
# more than sequence 128 (the key mask in attention's backward gathers the sequence again).
SMALL = dict(batch=8, seq=8, d_model=16, head_dim=4, ffn=32, vocab=32, layers=1)
CASES = [
    ("llama", "VP", dict(heads=4, kv_heads=2, vocab=1001), {"all_reduce": 5}),
    ("gpt", "MP", dict(heads=6), {"all_reduce": 5}),
    ("gpt", "BP", dict(heads=4, batch=7), {"all_reduce": 17}),
    ("gpt", "VP", dict(heads=4, vocab=1001), {"all_reduce": 5}),
    ("gpt", "SP", dict(heads=4, seq=126, batch=2), {"all_gather": 6, "reduce_scatter": 2, "all_reduce": 16}),
    ("llama", "BP", dict(heads=4, kv_heads=2, batch=7), {"all_reduce": 13}),
]
CASES = CASES if THOROUGH else CASES[:1]


@functools.cache
def _model(name: str, key: tuple[tuple[str, int], ...]) -> M.Model:
    kw = {**SMALL, **dict(key)}
    if name == "llama":
        kw["dtype"] = jnp.float32
    return M.MODELS[name](**kw)


@pytest.mark.parametrize("name,strategy,sizes,counts", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_uneven_model_step_equals_unpartitioned(name: str, strategy: str, sizes: dict[str, int],
                                                counts: dict[str, int]) -> None:
    m = _model(name, tuple(sorted(sizes.items())))
    step = partition(m.step, MESH, S.schedule(name, strategy))
    got = [np.asarray(x) for x in jax.tree_util.tree_leaves(step(*m.args))]
    ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]
    _check_step(got, ref, len(jax.tree_util.tree_leaves(m.params)))
    assert step.padding is not None and any(step.padding.inputs)
    sim = step.simulate()
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    assert sim.pad_bytes > 0
    assert sim.counts() == counts
    with pytest.raises(IndivisibleDimError):
        partition(m.step, MESH, S.schedule(name, strategy), uneven="refuse").trace(*m.args)
