"""Two models as full training steps (loss, grad, Adam) in plain JAX, with no sharding code.

``train_step(params, opt_state, batch) -> (new_params, new_opt_state, loss)``. Parameter names
are what strategies refer to (``w1``, ``wq``, ``embed``...). Sizes are arguments so tests stay
small and benchmarks can grow them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Params = dict[str, Any]


# -- shared pieces -------------------------------------------------------------------------------

def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy against integer labels (one-hot, as losses usually write it)."""
    z = logits - lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    logp = z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    return -jnp.mean(jnp.sum(logp * onehot, axis=-1))


def adam_init(params: Params) -> dict[str, Any]:
    zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
    return {"m": zeros, "v": dict(zeros), "count": jnp.zeros((), jnp.float32)}


def adam_update(params: Params, grads: Params, state: dict[str, Any], lr: float = 1e-2,
                b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple[Params, dict[str, Any]]:
    count = state["count"] + 1.0
    c1 = 1.0 - jnp.power(b1, count)
    c2 = 1.0 - jnp.power(b2, count)
    m = {k: b1 * state["m"][k] + (1 - b1) * g for k, g in grads.items()}
    v = {k: b2 * state["v"][k] + (1 - b2) * g * g for k, g in grads.items()}
    new = {k: p - lr * (m[k] / c1) / (jnp.sqrt(v[k] / c2) + eps) for k, p in params.items()}
    return new, {"m": m, "v": v, "count": count}


def make_train_step(loss_fn: Callable[[Params, Any], jax.Array]) -> Callable[..., Any]:
    def train_step(params: Params, opt_state: dict[str, Any], batch: Any) -> tuple[Params, dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        new_params, new_state = adam_update(params, grads, opt_state)
        return new_params, new_state, loss
    return train_step


@dataclass(frozen=True)
class Model:
    """A training step with example inputs: what tests and benchmarks partition."""

    name: str
    step: Callable[..., Any]
    params: Params
    opt_state: dict[str, Any]
    batch: dict[str, Any]

    @property
    def args(self) -> tuple[Any, Any, Any]:
        return (self.params, self.opt_state, self.batch)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> jax.Array:
    return jnp.asarray(rng.normal(0.0, scale, shape).astype(np.float32))


# -- MLP -------------------------------------------------------------------------------------------

def mlp_loss(params: Params, batch: dict[str, Any]) -> jax.Array:
    h = jax.nn.relu(batch["x"] @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return cross_entropy(logits, batch["y"])


def mlp(batch: int = 16, d_in: int = 16, hidden: int = 32, classes: int = 8, seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)
    params = {
        "w1": _normal(rng, (d_in, hidden), 1 / math.sqrt(d_in)),
        "b1": _normal(rng, (hidden,), 0.1),
        "w2": _normal(rng, (hidden, classes), 1 / math.sqrt(hidden)),
        "b2": _normal(rng, (classes,), 0.1),
    }
    data = {"x": _normal(rng, (batch, d_in), 1.0),
            "y": jnp.asarray(rng.integers(0, classes, (batch,)).astype(np.int32))}
    return Model("mlp", make_train_step(mlp_loss), params, adam_init(params), data)


# -- transformer block -----------------------------------------------------------------------------

def layer_norm(x: jax.Array, g: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def attention(h: jax.Array, p: Params) -> jax.Array:
    q = jnp.einsum("bsd,dhk->bshk", h, p["wq"])
    k = jnp.einsum("bsd,dhk->bshk", h, p["wk"])
    v = jnp.einsum("bsd,dhk->bshk", h, p["wv"])
    s = jnp.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(q.shape[-1])
    n = s.shape[-1]
    causal = lax.broadcasted_iota(jnp.int32, (n, n), 0) >= lax.broadcasted_iota(jnp.int32, (n, n), 1)
    s = jnp.where(causal, s, -1e9)
    s = s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    e = jnp.exp(s)
    a = e / jnp.sum(e, axis=-1, keepdims=True)
    o = jnp.einsum("bhqs,bshk->bqhk", a, v)
    return jnp.einsum("bqhk,hkd->bqd", o, p["wo"])


def transformer_loss(params: Params, batch: dict[str, Any]) -> jax.Array:
    x = params["embed"][batch["tokens"]]
    x = x + attention(layer_norm(x, params["ln1_g"], params["ln1_b"]), params)
    h = layer_norm(x, params["ln2_g"], params["ln2_b"])
    x = x + jax.nn.relu(h @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    logits = x @ params["unembed"]
    return cross_entropy(logits, batch["targets"])


def transformer(batch: int = 8, seq: int = 8, d_model: int = 16, heads: int = 4, head_dim: int = 4,
                ffn: int = 32, vocab: int = 32, seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)
    s = 1 / math.sqrt(d_model)
    params = {
        "embed": _normal(rng, (vocab, d_model), 1.0),
        "ln1_g": jnp.ones((d_model,), jnp.float32), "ln1_b": jnp.zeros((d_model,), jnp.float32),
        "wq": _normal(rng, (d_model, heads, head_dim), s), "wk": _normal(rng, (d_model, heads, head_dim), s),
        "wv": _normal(rng, (d_model, heads, head_dim), s),
        "wo": _normal(rng, (heads, head_dim, d_model), 1 / math.sqrt(heads * head_dim)),
        "ln2_g": jnp.ones((d_model,), jnp.float32), "ln2_b": jnp.zeros((d_model,), jnp.float32),
        "w1": _normal(rng, (d_model, ffn), s), "b1": jnp.zeros((ffn,), jnp.float32),
        "w2": _normal(rng, (ffn, d_model), 1 / math.sqrt(ffn)), "b2": jnp.zeros((d_model,), jnp.float32),
        "unembed": _normal(rng, (d_model, vocab), s),
    }
    data = {"tokens": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32)),
            "targets": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32))}
    return Model("transformer", make_train_step(transformer_loss), params, adam_init(params), data)


MODELS: dict[str, Callable[..., Model]] = {"mlp": mlp, "transformer": transformer}
