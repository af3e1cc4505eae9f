"""A GPT written with flax (linen) and optax, as a client outside the project writes one:
``nn.scan`` over ``nn.remat`` blocks, ``MultiHeadDotProductAttention`` with a causal mask,
``nn.Dropout`` drawing from a ``dropout`` rng, a tied ``nn.Embed`` (``attend``), optax's
integer-label cross-entropy and SGD with momentum. Partitioned with batch and Megatron tactics named by flax's
own parameter paths, the step equals the unpartitioned one and the collectives equal a hand
count."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from partir_core import hlo_collectives, partition
from partir_core.tactics import Shard
from spmd_types import Mesh

nn = pytest.importorskip("flax.linen")
optax = pytest.importorskip("optax")

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 2, "model": 4})
B, T, D, H, HD, F, V, L = 4, 8, 16, 4, 4, 32, 32, 2
RATE = 0.1


class Block(nn.Module):  # type: ignore[misc, name-defined]
    @nn.compact
    def __call__(self, h: jax.Array, _: Any) -> tuple[jax.Array, None]:
        mask = nn.make_causal_mask(jnp.ones(h.shape[:2], jnp.int32))
        a = nn.MultiHeadDotProductAttention(num_heads=H, qkv_features=H * HD, deterministic=True,
                                            name="attn")(nn.LayerNorm(name="ln1")(h), mask=mask)
        h = h + nn.Dropout(RATE, deterministic=False)(a)
        u = nn.LayerNorm(name="ln2")(h)
        m = nn.Dense(D, name="w2")(nn.gelu(nn.Dense(F, name="w1")(u)))
        return h + nn.Dropout(RATE, deterministic=False)(m), None


class GPT(nn.Module):  # type: ignore[misc, name-defined]
    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(V, D, name="embed")
        pos = self.param("pos", nn.initializers.normal(0.1), (T, D))
        x = embed(tokens) + pos[None]
        stack = nn.scan(nn.remat(Block), variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                        length=L)
        x, _ = stack(name="blocks")(x, None)
        return embed.attend(nn.LayerNorm(name="lnf")(x))


MODEL = GPT()
TX = optax.sgd(1e-2, momentum=0.9)
"""Not Adam here: the key projection's bias has a zero gradient in exact arithmetic (softmax is
invariant to it), and Adam's normalised update turns float noise of 1e-9 into a 1e-3 step, so no
two summation orders (partitioned or not) agree on it."""


def step(params: Any, opt_state: Any, batch: dict[str, jax.Array], key: jax.Array) -> Any:
    def loss_fn(p: Any) -> jax.Array:
        logits = MODEL.apply({"params": p}, batch["tokens"], rngs={"dropout": key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@functools.cache
def _args() -> tuple[Any, ...]:
    rng = np.random.default_rng(0)
    batch = {"tokens": jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32),
             "labels": jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32)}
    params = MODEL.init({"params": jax.random.key(1), "dropout": jax.random.key(2)}, batch["tokens"])["params"]
    return params, TX.init(params), batch, jax.random.key(3)


@functools.cache
def _reference() -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(step)(*_args()))]


# flax's names for Megatron: q/k/v kernels [layer, d, heads, head_dim] and biases [layer, heads,
# head_dim] by head, the output projection [layer, heads, head_dim, d] by head, w1 by column, w2 by row
MEGATRON = {"params/blocks/attn/query/kernel": 2, "params/blocks/attn/key/kernel": 2,
            "params/blocks/attn/value/kernel": 2, "params/blocks/attn/query/bias": 1,
            "params/blocks/attn/key/bias": 1, "params/blocks/attn/value/bias": 1,
            "params/blocks/attn/out/kernel": 1, "params/blocks/w1/kernel": 2, "params/blocks/w1/bias": 1,
            "params/blocks/w2/kernel": 1}
BLOCK = 16  # stacked leaves per block: 2 LNs x 2, q/k/v/out kernel and bias, w1 and w2 kernel and bias
N_PARAMS = BLOCK * L + 4  # gradients all-reduced per step: a stacked one once per layer (in the loop)
HAND = {
    "BP": {"all_reduce": N_PARAMS + 1},  # one per gradient, one for the loss
    # Megatron per layer: attention and MLP forward (2), the remat forward's attention (1), backward (2)
    "BP+MP": {"all_reduce": 5 * L + N_PARAMS + 1},
}
SCHEDULES = {"BP": [Shard("batch", dim=0, axis="data")],
             "BP+MP": [Shard("batch", dim=0, axis="data"), Shard(MEGATRON, axis="model")]}


@pytest.mark.parametrize("strategy", sorted(SCHEDULES))
def test_flax_gpt_partitioned_equals_unpartitioned(strategy: str) -> None:
    args = _args()
    assert len(jax.tree_util.tree_leaves(args[0])) == BLOCK + 4
    p = partition(step, MESH, SCHEDULES[strategy])
    out = p(*args)
    for g, r in zip(jax.tree_util.tree_leaves(out), _reference()):
        np.testing.assert_allclose(np.asarray(g), r, rtol=2e-5, atol=2e-6)
    sim = p.simulate()
    assert sim.hlo_counts() == hlo_collectives(p.lower_text(*args))
    assert sim.counts() == HAND[strategy]
