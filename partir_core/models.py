"""Models as full training steps (loss, grad, Adam) in plain JAX, with no sharding code.

``train_step(params, opt_state, batch[, key]) -> (new_params, new_opt_state, loss)``. ``gpt`` is
written as current JAX LLMs are: a ``scan`` over stacked layer parameters, ``jax.checkpoint`` per
layer, dropout from a PRNG key, tied input/output embeddings, an integer-label loss; ``llama`` as a
Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, bf16 activations
over f32 master weights) and ``moe`` as its top-2 mixture-of-experts variant. Parameter names
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
    tmap = jax.tree_util.tree_map
    return {"m": tmap(jnp.zeros_like, params), "v": tmap(jnp.zeros_like, params),
            "count": jnp.zeros((), jnp.float32)}


def adam_update(params: Params, grads: Params, state: dict[str, Any], lr: float = 1e-2,
                b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple[Params, dict[str, Any]]:
    """Adam on any pytree of parameters (flat dicts or nested, like the GPT's stacked blocks)."""
    tmap = jax.tree_util.tree_map
    count = state["count"] + 1.0
    c1 = 1.0 - jnp.power(b1, count)
    c2 = 1.0 - jnp.power(b2, count)
    m = tmap(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = tmap(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
    new = tmap(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
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
    key: Any = None

    @property
    def args(self) -> tuple[Any, ...]:
        """The step's arguments; a model with dropout takes a PRNG key last."""
        base = (self.params, self.opt_state, self.batch)
        return base if self.key is None else base + (self.key,)


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


# -- GPT, written the modern way ------------------------------------------------------------------

def label_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy against integer labels by ``take_along_axis`` (what optax does)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def dropout(key: jax.Array, x: jax.Array, rate: float) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def gpt_block(h: jax.Array, p: Params, key: jax.Array, rate: float) -> jax.Array:
    """Pre-LN block: causal attention and a GELU MLP, each followed by residual dropout."""
    k1, k2 = jax.random.split(key)
    h = h + dropout(k1, attention(layer_norm(h, p["ln1_g"], p["ln1_b"]), p), rate)
    u = layer_norm(h, p["ln2_g"], p["ln2_b"])
    m = jax.nn.gelu(u @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return h + dropout(k2, m, rate)


def gpt_loss(params: Params, batch: dict[str, Any], key: jax.Array, rate: float = 0.1) -> jax.Array:
    """Layers as one ``scan`` over stacked parameters, each rematerialised (``jax.checkpoint``);
    a key per layer; logits by the tied embedding; integer labels."""
    tokens = batch["tokens"]
    x = params["embed"][tokens] + params["pos"][None, : tokens.shape[1]]
    n_layers = params["blocks"]["w1"].shape[0]
    block = jax.checkpoint(lambda h, p, k: gpt_block(h, p, k, rate))

    def layer(h: jax.Array, xs: tuple[Params, jax.Array]) -> tuple[jax.Array, None]:
        return block(h, *xs), None

    x, _ = lax.scan(layer, x, (params["blocks"], jax.random.split(key, n_layers)))
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])
    logits = jnp.einsum("bsd,vd->bsv", x, params["embed"])
    return label_cross_entropy(logits, batch["labels"])


def gpt_step(params: Params, opt_state: dict[str, Any], batch: dict[str, Any],
             key: jax.Array) -> tuple[Params, dict[str, Any], jax.Array]:
    loss, grads = jax.value_and_grad(gpt_loss)(params, batch, key)
    new_params, new_state = adam_update(params, grads, opt_state)
    return new_params, new_state, loss


def gpt(batch: int = 8, seq: int = 8, d_model: int = 32, heads: int = 4, head_dim: int = 8,
        ffn: int = 64, vocab: int = 64, layers: int = 2, seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)
    s, n = 1 / math.sqrt(d_model), layers
    ones, zeros = jnp.ones((n, d_model), jnp.float32), jnp.zeros((n, d_model), jnp.float32)
    blocks = {
        "ln1_g": ones, "ln1_b": zeros, "ln2_g": ones, "ln2_b": zeros,
        "wq": _normal(rng, (n, d_model, heads, head_dim), s), "wk": _normal(rng, (n, d_model, heads, head_dim), s),
        "wv": _normal(rng, (n, d_model, heads, head_dim), s),
        "wo": _normal(rng, (n, heads, head_dim, d_model), 1 / math.sqrt(heads * head_dim)),
        "w1": _normal(rng, (n, d_model, ffn), s), "b1": jnp.zeros((n, ffn), jnp.float32),
        "w2": _normal(rng, (n, ffn, d_model), 1 / math.sqrt(ffn)), "b2": zeros,
    }
    params = {"embed": _normal(rng, (vocab, d_model), 0.5), "pos": _normal(rng, (seq, d_model), 0.1),
              "blocks": blocks, "lnf_g": jnp.ones((d_model,), jnp.float32),
              "lnf_b": jnp.zeros((d_model,), jnp.float32)}
    data = {"tokens": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32)),
            "labels": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32))}
    return Model("gpt", gpt_step, params, adam_init(params), data, jax.random.key(seed))


# -- Llama-style decoder and its mixture-of-experts variant ------------------------------------------

def rms_norm(x: jax.Array, g: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMSNorm computed in f32 whatever the activation dtype (as Llama does), cast back."""
    xf = x.astype(jnp.float32)
    y = xf * lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return (y * g).astype(x.dtype)


def rotary(x: jax.Array, theta: float = 10000.0) -> jax.Array:
    """Rotary position embedding over ``x``'s (batch, seq, heads, head_dim), rotate-half form."""
    seq, half = x.shape[1], x.shape[-1] // 2
    freqs = 1.0 / theta ** (jnp.arange(half, dtype=jnp.float32) / half)
    ang = jnp.arange(seq, dtype=jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = xf[..., :half], xf[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def gqa_attention(h: jax.Array, p: Params) -> jax.Array:
    """Causal grouped-query attention: ``wq`` has ``heads`` heads, ``wk``/``wv`` ``kv_heads``;
    query head ``j`` reads KV head ``j // (heads // kv_heads)`` (queries grouped by a reshape,
    as flax/MaxText write it). Scores and softmax in f32."""
    dt = h.dtype
    q = rotary(jnp.einsum("bsd,dhk->bshk", h, p["wq"].astype(dt)))
    k = rotary(jnp.einsum("bsd,dhk->bshk", h, p["wk"].astype(dt)))
    v = jnp.einsum("bsd,dhk->bshk", h, p["wv"].astype(dt))
    b, n, heads, hd = q.shape
    kv = k.shape[2]
    qg = q.reshape(b, n, kv, heads // kv, hd)
    s = jnp.einsum("bqngk,bsnk->bngqs", qg, k, preferred_element_type=jnp.float32) / math.sqrt(hd)
    causal = lax.broadcasted_iota(jnp.int32, (n, n), 0) >= lax.broadcasted_iota(jnp.int32, (n, n), 1)
    s = jnp.where(causal, s, -1e9)
    a = jax.nn.softmax(s, axis=-1).astype(dt)
    o = jnp.einsum("bngqs,bsnk->bqngk", a, v).reshape(b, n, heads, hd)
    return jnp.einsum("bqhk,hkd->bqd", o, p["wo"].astype(dt))


def swiglu(h: jax.Array, p: Params) -> jax.Array:
    dt = h.dtype
    gate = jax.nn.silu(h @ p["w_gate"].astype(dt))
    return (gate * (h @ p["w_up"].astype(dt))) @ p["w_down"].astype(dt)


def moe_mlp(h: jax.Array, p: Params, capacity: int) -> jax.Array:
    """Top-2 mixture of SwiGLU experts with capacity, dispatched and combined by einsum (GShard):
    per sequence, each token goes to its two most probable experts (gates renormalised), first
    choices before second ones, each expert taking at most ``capacity`` tokens (the rest dropped).
    Router in f32."""
    dt = h.dtype
    n_exp = p["router"].shape[-1]
    probs = jax.nn.softmax(jnp.einsum("bsd,de->bse", h.astype(jnp.float32), p["router"]), axis=-1)
    gate, idx = lax.top_k(probs, 2)  # (b, s, 2)
    gate = gate / jnp.sum(gate, axis=-1, keepdims=True)
    choice = jax.nn.one_hot(idx, n_exp, dtype=jnp.int32)  # (b, s, 2, e)
    b, n = h.shape[:2]
    order = jnp.swapaxes(choice, 1, 2).reshape(b, 2 * n, n_exp)  # first choices, then second ones
    pos = jnp.cumsum(order, axis=1) * order - 1  # slot in the expert's buffer, -1 where not chosen
    slot = jax.nn.one_hot(pos, capacity, dtype=jnp.float32)  # (b, 2s, e, c); -1 and >= c: all zero
    slot = jnp.swapaxes(slot.reshape(b, 2, n, n_exp, capacity), 1, 2)  # (b, s, 2, e, c)
    dispatch = jnp.sum(slot, axis=2).astype(dt)
    combine = jnp.einsum("bsk,bskec->bsec", gate, slot).astype(dt)
    xe = jnp.einsum("bsec,bsd->becd", dispatch, h)
    up = jax.nn.silu(jnp.einsum("becd,edf->becf", xe, p["w_gate"].astype(dt)))
    up = up * jnp.einsum("becd,edf->becf", xe, p["w_up"].astype(dt))
    ye = jnp.einsum("becf,efd->becd", up, p["w_down"].astype(dt))
    return jnp.einsum("bsec,becd->bsd", combine, ye)


def llama_block(h: jax.Array, p: Params, capacity: int) -> jax.Array:
    """Pre-norm block: RMSNorm, grouped-query attention with rotary embeddings, RMSNorm, SwiGLU
    (or the top-2 mixture of SwiGLU experts when the block has a ``router``)."""
    h = h + gqa_attention(rms_norm(h, p["attn_norm"]), p)
    u = rms_norm(h, p["mlp_norm"])
    return h + (moe_mlp(u, p, capacity) if "router" in p else swiglu(u, p))


def llama_loss(params: Params, batch: dict[str, Any], dtype: Any = jnp.bfloat16, capacity: int = 0) -> jax.Array:
    """f32 master weights, activations in ``dtype``: layers as one ``scan`` over stacked
    parameters, each rematerialised (``jax.checkpoint``); untied output projection; f32 logits
    and an integer-label loss."""
    x = params["embed"].astype(dtype)[batch["tokens"]]
    block = jax.checkpoint(lambda h, p: llama_block(h, p, capacity))

    def layer(h: jax.Array, p: Params) -> tuple[jax.Array, None]:
        return block(h, p), None

    x, _ = lax.scan(layer, x, params["blocks"])
    x = rms_norm(x, params["final_norm"])
    logits = jnp.einsum("bsd,dv->bsv", x, params["unembed"].astype(dtype), preferred_element_type=jnp.float32)
    return label_cross_entropy(logits, batch["labels"])


def _llama_step(dtype: Any, capacity: int) -> Callable[..., Any]:
    def llama_step(params: Params, opt_state: dict[str, Any],
                   batch: dict[str, Any]) -> tuple[Params, dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(llama_loss)(params, batch, dtype, capacity)
        new_params, new_state = adam_update(params, grads, opt_state)
        return new_params, new_state, loss
    return llama_step


def _llama_params(rng: np.random.Generator, layers: int, d_model: int, heads: int, kv_heads: int, head_dim: int,
                  ffn: int, vocab: int, experts: int) -> Params:
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads}): each KV head serves "
                         "a group of query heads")
    s, n = 1 / math.sqrt(d_model), layers
    blocks = {
        "attn_norm": jnp.ones((n, d_model), jnp.float32), "mlp_norm": jnp.ones((n, d_model), jnp.float32),
        "wq": _normal(rng, (n, d_model, heads, head_dim), s), "wk": _normal(rng, (n, d_model, kv_heads, head_dim), s),
        "wv": _normal(rng, (n, d_model, kv_heads, head_dim), s),
        "wo": _normal(rng, (n, heads, head_dim, d_model), 1 / math.sqrt(heads * head_dim)),
    }
    e = (experts,) if experts else ()
    blocks |= {"w_gate": _normal(rng, (n, *e, d_model, ffn), s), "w_up": _normal(rng, (n, *e, d_model, ffn), s),
               "w_down": _normal(rng, (n, *e, ffn, d_model), 1 / math.sqrt(ffn))}
    if experts:
        blocks["router"] = _normal(rng, (n, d_model, experts), s)
    return {"embed": _normal(rng, (vocab, d_model), 1.0), "blocks": blocks,
            "final_norm": jnp.ones((d_model,), jnp.float32), "unembed": _normal(rng, (d_model, vocab), s)}


def llama(batch: int = 8, seq: int = 8, d_model: int = 32, heads: int = 4, kv_heads: int = 2, head_dim: int = 8,
          ffn: int = 64, vocab: int = 64, layers: int = 2, dtype: Any = jnp.bfloat16, seed: int = 0) -> Model:
    """A Llama-style decoder training step (``llama_loss``; plain Adam as the GPT)."""
    rng = np.random.default_rng(seed)
    params = _llama_params(rng, layers, d_model, heads, kv_heads, head_dim, ffn, vocab, 0)
    data = {"tokens": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32)),
            "labels": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32))}
    return Model("llama", _llama_step(dtype, 0), params, adam_init(params), data)


def moe(batch: int = 8, seq: int = 8, d_model: int = 32, heads: int = 4, kv_heads: int = 2, head_dim: int = 8,
        ffn: int = 32, vocab: int = 64, layers: int = 2, experts: int = 4, capacity_factor: float = 1.25,
        dtype: Any = jnp.bfloat16, seed: int = 0) -> Model:
    """The Llama decoder with every MLP a top-2 mixture of ``experts`` SwiGLU experts; each expert
    takes ``ceil(capacity_factor * 2 * seq / experts)`` tokens per sequence (``moe_mlp``)."""
    rng = np.random.default_rng(seed)
    capacity = math.ceil(capacity_factor * 2 * seq / experts)
    params = _llama_params(rng, layers, d_model, heads, kv_heads, head_dim, ffn, vocab, experts)
    data = {"tokens": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32)),
            "labels": jnp.asarray(rng.integers(0, vocab, (batch, seq)).astype(np.int32))}
    return Model("moe", _llama_step(dtype, capacity), params, adam_init(params), data)


MODELS: dict[str, Callable[..., Model]] = {"mlp": mlp, "transformer": transformer, "gpt": gpt, "llama": llama,
                                           "moe": moe}
