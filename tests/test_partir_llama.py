"""The Llama-style decoder and its mixture-of-experts variant (RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU, ``scan`` over stacked layers with ``jax.checkpoint``, f32 master
weights under bf16 activations, integer labels; top-2 experts with capacity) under every ready
strategy on {data=2, model=4} and {data=8}: the partitioned step equals the unpartitioned one and
the simulator predicts the program's collectives exactly.

Exactness is checked with f32 activations (the same code with every cast a no-op): the outputs
agree to float reassociation. With bf16 activations each partial sum is rounded to bf16 before it
is reduced, so gradients agree to bf16 precision, and Adam's first step (about ``lr * sign(g)``)
would turn a sign flip of a near-zero gradient into a ``2 * lr`` difference: there the loss and
the gradient moments are compared instead of the updated parameters."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import given
from hypothesis import strategies as st

from partir_core import hlo_collectives, partition
from partir_core import models as M
from partir_core import strategies as S
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESHES = {"data=2,model=4": Mesh({"data": 2, "model": 4}), "data=8": Mesh({"data": 8})}
SIZES = dict(batch=8, seq=8, d_model=16, heads=8, kv_heads=4, head_dim=4, vocab=32, layers=2)
FFN = {"llama": 32, "moe": 16}
LAYERS = SIZES["layers"]


@functools.cache
def _model(name: str, dtype: str) -> M.Model:
    return M.MODELS[name](**SIZES, ffn=FFN[name], dtype=getattr(jnp, dtype))


@functools.cache
def _reference(name: str, dtype: str) -> tuple[np.ndarray, ...]:
    m = _model(name, dtype)
    return tuple(np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args)))


# executed collectives per training step, as a practitioner counts them
HAND = {
    # one all-reduce per gradient (9 stacked block tensors, 10 with the router; embed, final norm,
    # unembed outside the loop) and one for the loss
    ("llama", "BP"): {"all_reduce": 9 * LAYERS + 3 + 1},
    ("moe", "BP"): {"all_reduce": 10 * LAYERS + 3 + 1},
    # Megatron per layer: attention and MLP outputs forward (2), the rematerialised forward needs
    # only the attention one again (1), the input gradients of both blocks backward (2)
    ("llama", "MP"): {"all_reduce": 5 * LAYERS},
}
CASES = [("llama", "data=2,model=4", s) for s in ("BP", "MP", "BP+MP", "BP+MP+Z3", "BP+MP+SP", "BP+MP+VP",
                                                  "BP+MP+SP+VP")]
CASES += [("moe", "data=2,model=4", s) for s in ("BP", "MP", "BP+MP", "BP+MP+Z3", "BP+MP+SP", "BP+MP+VP",
                                                "BP+MP+SP+VP", "EMB")]
CASES += [(m, "data=8", s) for m in ("llama", "moe") for s in ("BP", "Z3")]
CASES += [(m, "data=8", "Z2") for m in ("llama", "moe")] + [("llama", "data=2,model=4", "EMB")]
# The default profile runs one case per feature (hand counts, every tactic kind, both meshes, both
# models); HYPOTHESIS_PROFILE=thorough runs them all (each compiles two programs, ~10-25 s here).
DEFAULT_CASES = {("llama", "data=2,model=4", "MP"), ("llama", "data=2,model=4", "BP+MP+SP+VP"),
                 ("moe", "data=2,model=4", "BP"), ("moe", "data=2,model=4", "BP+MP+Z3"),
                 ("llama", "data=8", "Z3"), ("moe", "data=8", "Z2")}
CASES = CASES if THOROUGH else [c for c in CASES if c in DEFAULT_CASES]


def _run(name: str, mesh: str, strategy: str, dtype: str) -> tuple[list[np.ndarray], object]:
    m = _model(name, dtype)
    step = partition(m.step, MESHES[mesh], S.schedule(name, strategy))
    out = step(*m.args)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(jax.eval_shape(m.step, *m.args))
    assert step.simulate().hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)], step


@pytest.mark.parametrize("name,mesh,strategy", CASES)
def test_strategy_equals_unpartitioned_step_f32(name: str, mesh: str, strategy: str) -> None:
    got, step = _run(name, mesh, strategy, "float32")
    for g, r in zip(got, _reference(name, "float32")):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6)
    if (name, strategy) in HAND and mesh == "data=2,model=4":
        assert step.simulate().counts() == HAND[(name, strategy)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name,strategy", [("llama", "BP+MP+SP+VP")] + [("moe", "BP+MP")] * THOROUGH)
def test_strategy_equals_unpartitioned_step_bf16(name: str, strategy: str) -> None:
    m = _model(name, "bfloat16")
    got, _ = _run(name, "data=2,model=4", strategy, "bfloat16")
    ref = _reference(name, "bfloat16")
    np.testing.assert_allclose(got[-1], ref[-1], rtol=1e-3)  # the loss
    n_params = len(jax.tree_util.tree_leaves(m.params))
    first_m = n_params + 1  # outputs: new params, then opt_state {count, m..., v...}, then loss
    for g, r in zip(got[first_m:first_m + n_params], ref[first_m:first_m + n_params]):
        np.testing.assert_allclose(g, r, atol=3e-2 * float(np.abs(r).max()))


def _moe_by_loops(h: np.ndarray, p: dict[str, np.ndarray], capacity: int) -> np.ndarray:
    """Top-2 routing with capacity token by token: first choices claim slots before second ones."""
    b, s, _ = h.shape
    logits = np.einsum("bsd,de->bse", h, p["router"])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    silu = lambda x: x / (1 + np.exp(-x))
    for i in range(b):
        top = np.argsort(-probs[i], axis=-1, kind="stable")[:, :2]
        fill = np.zeros(probs.shape[-1], int)
        for k in range(2):
            for t in range(s):
                e = top[t, k]
                fill[e] += 1
                if fill[e] > capacity:
                    continue
                gate = probs[i, t, e] / probs[i, t, top[t]].sum()
                x = h[i, t]
                y = (silu(x @ p["w_gate"][e]) * (x @ p["w_up"][e])) @ p["w_down"][e]
                out[i, t] += gate * y
    return out


def test_moe_layer_routes_top2_with_capacity_as_a_loop_does() -> None:
    rng = np.random.default_rng(3)
    d, f, e, cap = 8, 6, 4, 3
    p = {"router": rng.normal(0, 1, (d, e)), "w_gate": rng.normal(0, 0.3, (e, d, f)),
         "w_up": rng.normal(0, 0.3, (e, d, f)), "w_down": rng.normal(0, 0.3, (e, f, d))}
    h = rng.normal(0, 1, (2, 8, d))
    want = _moe_by_loops(h, p, cap)
    got = M.moe_mlp(jnp.asarray(h, jnp.float32), {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}, cap)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    dropped = 2 * 8 * 2 - sum(min(cap, c) for c in _fills(h, p))
    assert dropped > 0  # the capacity bites in this example, so dropping is checked too


def _fills(h: np.ndarray, p: dict[str, np.ndarray]) -> list[int]:
    top = np.argsort(-np.einsum("bsd,de->bse", h, p["router"]), axis=-1, kind="stable")[..., :2]
    return [int((top[i] == e).sum()) for i in range(h.shape[0]) for e in range(p["router"].shape[1])]


def test_rotary_is_a_rotation_and_queries_group_onto_kv_heads() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(0, 1, (1, 5, 2, 8)), jnp.float32)
    y = M.rotary(x)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=-1), np.linalg.norm(np.asarray(x), axis=-1),
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(y[:, 0]), np.asarray(x[:, 0]), rtol=1e-6)  # position 0: angle 0
    m = M.llama(batch=1, seq=4, d_model=8, heads=4, kv_heads=2, head_dim=4, ffn=8, vocab=8, layers=1,
                dtype=jnp.float32)
    p = jax.tree_util.tree_map(lambda a: a[0], m.params["blocks"])
    h = jnp.asarray(rng.normal(0, 1, (1, 4, 8)), jnp.float32)
    # the same attention with each KV head repeated for its group of query heads (HF's repeat_kv)
    rep = dict(p, wk=jnp.repeat(p["wk"], 2, axis=1), wv=jnp.repeat(p["wv"], 2, axis=1))
    np.testing.assert_allclose(np.asarray(M.gqa_attention(h, p)), np.asarray(M.gqa_attention(h, rep)),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        M.llama(heads=4, kv_heads=3)
    assert math.isfinite(float(jax.jit(m.step)(*m.args)[2]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_simulator_counts_bytes_as_the_backend_moves_them(dtype: str) -> None:
    """XLA:CPU runs bf16 all-reduces and reduce-scatters in f32: ``wire_bytes`` equals the bytes
    the compiled program's collectives receive (loop bodies once per iteration), in bf16 and f32;
    ``recv_bytes`` stays at the arrays' width, and a backend without widening has the two equal."""
    from benchmarks.partitioner import executed_collectives
    from partir_core.simulate import simulate, wire_scale

    m = M.llama(batch=2, seq=8, d_model=16, heads=4, kv_heads=4, head_dim=4, ffn=32, vocab=32, layers=2,
                dtype=getattr(jnp, dtype))
    step = partition(m.step, MESHES["data=2,model=4"], S.schedule("llama", "BP+MP+SP+VP"))
    step.trace(*m.args)
    sim = step.simulate()
    assert sim.backend == "cpu"
    _, compiled = executed_collectives(step.compiled_text(*m.args), 8)
    assert sim.wire_bytes == compiled
    bf16_reduced = sum(c.recv_bytes * c.repeat for c in sim.collectives
                       if c.kind in ("all_reduce", "reduce_scatter") and c.src.startswith("bf16"))
    assert sim.wire_bytes - sim.recv_bytes == bf16_reduced
    assert (bf16_reduced > 0) == (dtype == "bfloat16")
    other = simulate(step.analysis.lowered, backend="gpu")
    assert other.wire_bytes == other.recv_bytes == sim.recv_bytes
    assert wire_scale("all_gather", "bf16", "cpu") == wire_scale("all_reduce", "f16", "cpu") == 1.0
    assert wire_scale("reduce_scatter", "bf16", "cpu") == 2.0


def test_sub_axes_split_an_axis_between_grouped_dimensions() -> None:
    """4 heads over model=4 regrouped as (2 KV heads, 2 queries each): the major half of ``model``
    indexes the KV head, the minor half the query in its group; composed back, it is ``model``."""
    from partir_core.propagate import clashes, compose, split_axes
    from spmd_types import SubAxis

    mesh = MESHES["data=2,model=4"]
    major, minor = SubAxis("model", 1, 2), SubAxis("model", 2, 2)
    assert split_axes(mesh, ("model",), [2, 2]) == [(major,), (minor,)]
    assert split_axes(mesh, ("model",), [4, 2]) == [("model",), ()]
    assert split_axes(mesh, ("data", "model"), [4, 2]) == [("data", major), (minor,)]
    assert split_axes(mesh, ("model",), [3, 4]) is None
    assert compose(mesh, [(major,), (minor,)], [2, 2]) == ("model",)
    assert not clashes(mesh, [major], [minor]) and clashes(mesh, ["model"], [minor])


KV2 = dict(batch=4, seq=8, d_model=16, heads=4, kv_heads=2, head_dim=4, ffn=32, vocab=32, layers=2)


@pytest.mark.parametrize("strategy", ["MP", "BP+MP"])
def test_fewer_kv_heads_than_the_model_axis_partition_by_query_group(strategy: str) -> None:
    """2 KV heads, model=4: each KV head is sharded over the major half of ``model`` (replicated
    on the two devices of its query group), the queries are never gathered, attention runs
    partitioned, and the step equals the unpartitioned one. Per layer and direction the
    collectives are Megatron's (attention and MLP outputs forward, the rematerialised attention
    output, the MLP's input gradient) plus, backward, each KV head's gradient summed over its
    query group (dk, dv: all-reduce over ``model:(2)2``) and the attention input gradient's two
    parts (queries over ``model``, keys/values over ``model:(1)2``); wk, wv and their Adam moments
    leave the program whole (a PartitionSpec cannot name a sub-axis): one all-gather each."""
    from spmd_types import SubAxis

    m = M.llama(**KV2, dtype=jnp.float32)
    step = partition(m.step, MESHES["data=2,model=4"], S.schedule("llama", strategy))
    out = step(*m.args)
    want = jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))
    for g, r in zip(jax.tree_util.tree_leaves(out), want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-5, atol=2e-6)
    sim = step.simulate()
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    a = step.analysis
    names = dict(zip(a.program.input_paths, a.program.inputs))
    for w in ("wk", "wv"):
        assert a.lowered.layouts[names[f"params/blocks/{w}"].id] == ((), (), (SubAxis("model", 1, 2),), ())
    gathers = [c for c in sim.collectives if c.kind == "all_gather"]
    assert sorted(c.reason for c in gathers) == sorted(
        f"output out/{o}/blocks/{w}" for o in ("0", "1/m", "1/v") for w in ("wk", "wv"))
    assert "params/blocks/wk [_,_,@model:(1)2,_]" in step.explain()
    if strategy == "MP":
        assert sim.counts() == {"all_reduce": 8 * LAYERS, "all_gather": 6}
        group = [c for c in sim.collectives if c.src.endswith("{U:(model:(2)2)}")]
        assert sum(c.repeat for c in group) == 2 * LAYERS and all(c.recv_bytes == 512 for c in group)


@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3), st.permutations(["a", "b"]),
       st.integers(0, 2))
def test_split_axes_then_compose_gives_the_axes_back(sizes: list[int], order: list[str], n_axes: int) -> None:
    """Whatever way a dimension's axes are split over its factors (sub-axes included), composing
    the factors' axes gives the dimension's axes back, each factor's blocks dividing its size."""
    from partir_core.propagate import compose, split_axes

    mesh = Mesh({"a": 2, "b": 4})
    axes = tuple(order[:n_axes])
    if math.prod(sizes) % math.prod(mesh.axis_size(a) for a in axes):
        return
    parts = split_axes(mesh, axes, sizes)
    assert parts is not None  # power-of-two sizes always split
    for part, n in zip(parts, sizes):
        assert n % math.prod(mesh.axis_size(a) for a in part) == 0
    assert compose(mesh, parts, sizes) == axes
