"""Loops, branches, remat, random numbers and the gather/reduce rules, on small programs: each
partitioned program equals JAX's, and its collectives are exactly the ones asserted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from partir_core import (
    Shard,
    ShardParams,
    TacticError,
    UnknownPrimitiveError,
    hlo_collectives,
    partition,
)
from partir_core.tactics import Tactic
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 2, "model": 4})
RNG = np.random.default_rng(0)


def _f32(*shape: int) -> jax.Array:
    return jnp.asarray(RNG.normal(size=shape).astype(np.float32))


def _run(fn: Callable[..., Any], args: tuple[Any, ...], schedule: list[Tactic]) -> dict[str, int]:
    """Partition, check against jit(fn), check simulator == program text; executed counts."""
    step = partition(fn, MESH, schedule)
    got = jax.tree_util.tree_leaves(step(*args))
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    sim = step.simulate()
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*args))
    return sim.counts()


def _control_loss(params: dict[str, Any], batch: dict[str, Any]) -> jax.Array:
    def body(h: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jax.checkpoint(lambda h: jnp.tanh(h @ w))(h)  # remat2 inside a scan body
        return h, jnp.sum(h)

    h, ys = lax.scan(body, batch["x"], params["ws"])
    keep = jax.random.bernoulli(batch["key"], 0.9, h.shape)  # key<fry> and random_bits
    h = jnp.where(keep, h / 0.9, 0.0)
    h = lax.cond(jnp.sum(h) > 0, lambda a: a * 2.0, lambda a: a - 1.0, h)
    h = lax.fori_loop(0, 3, lambda i, a: a * 1.5, h)
    n = lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] * 0.5), (0, lax.stop_gradient(h)))[1]
    return jnp.mean((h + n) ** 2) + jnp.sum(ys)


def _control_step(params: dict[str, Any], batch: dict[str, Any]) -> Any:
    loss, g = jax.value_and_grad(_control_loss)(params, batch)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, g), loss


CONTROL_ARGS = ({"ws": _f32(3, 8, 8) * 0.3}, {"x": _f32(16, 8), "key": jax.random.key(1)})


def test_loops_cond_remat_dropout_under_batch_parallelism() -> None:
    counts = _run(_control_step, CONTROL_ARGS, [Shard("batch/x", dim=0, axis="data")])
    # per layer: the forward scan's sum(h) output (1) and the backward scan's weight gradient
    # (1), 3 layers each; the cond's predicate sum(h) > 0: 1; the loss: 1. Dropout bits, the
    # branches, fori and while need nothing.
    assert counts == {"all_reduce": 3 + 3 + 1 + 1}


def test_stacked_params_shard_on_their_layer_dims_only() -> None:
    step = partition(_control_step, MESH, [Shard("batch/x", dim=0, axis="data"),
                                           ShardParams(axis="model", target="params")])
    a = step.trace(*CONTROL_ARGS)
    # ws is [3 layers, 8, 8]: 3 is not divisible, but the policy must not even consider dim 0
    (ws_type,) = [t for p, t in zip(a.program.input_paths, a.lowered.in_types) if p == "params/ws"]
    assert ws_type.dims[0] == () and any(ws_type.dims[1:])
    text = step.explain()
    assert "scan(" in text and "body 0 (" in text and "cond(" in text and "while(" in text
    _run(_control_step, CONTROL_ARGS, [Shard("batch/x", dim=0, axis="data"),
                                       ShardParams(axis="model", target="params")])


def test_a_key_cannot_be_sharded() -> None:
    step = partition(lambda k, x: x * jax.random.uniform(k[0], x.shape), MESH, [Shard("k", dim=0, axis="data")])
    with pytest.raises(TacticError, match="PRNG key"):
        step.trace(jax.random.split(jax.random.key(0), 8), _f32(8))


def test_unknown_primitive_in_a_loop_body_names_it_and_where() -> None:
    def f(x: jax.Array) -> jax.Array:
        return lax.scan(lambda c, r: (c + lax.cumlogsumexp(r, axis=0, reverse=True)[0] * 0 +
                                      jnp.fft.fft(r).real[0], None), 0.0, x)[0]
    with pytest.raises(UnknownPrimitiveError, match=r"'fft'.*in scan #\d+ body"):
        partition(f, MESH, []).trace(_f32(4, 8))


def test_label_cross_entropy_needs_no_communication_under_bp() -> None:
    def loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(logits, axis=-1)
        return jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]

    labels = jnp.asarray(RNG.integers(0, 32, (8, 4)).astype(np.int32))
    assert _run(jax.grad(lambda x, y: jnp.sum(loss(x, y) ** 2)), (_f32(8, 4, 32), labels),
                [Shard("x", dim=0, axis="data")]) == {}


def test_vocab_sharded_lookup_is_masked_and_all_reduced() -> None:
    # a table (2 MB) far larger than the looked-up rows (4 KB): each device looks up the ids in its
    # rows, zeros elsewhere, and one all-reduce of the rows finishes it (Megatron's embedding)
    ids = jnp.asarray(RNG.integers(0, 8192, (4, 4)).astype(np.int32))
    counts = _run(lambda t, i: t[i] * 2.0, (_f32(8192, 64), ids), [Shard("t", dim=0, axis="model")])
    assert counts == {"all_reduce": 1}


@pytest.mark.parametrize("fn,expected", [
    (lambda x: jnp.max(x, axis=1), 1), (lambda x: jnp.min(x, axis=1), 1),
    (lambda x: jnp.argmax(x, axis=1), 2)])
def test_max_over_a_sharded_dim_is_an_all_reduce(fn: Callable[..., Any], expected: int) -> None:
    x = _f32(8, 32)
    assert _run(fn, (x,), [Shard("x", dim=1, axis="model")]) == {"all_reduce": expected}
