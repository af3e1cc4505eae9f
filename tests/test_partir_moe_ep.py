"""Expert parallelism on the mixture of experts (``EP``, ``ShardExperts``): the experts over
``data``, tokens dispatched to them and combined back by all-to-all (GShard/Switch).

The partitioned step equals the unpartitioned one (f32, as tests/test_partir_llama.py checks the
other strategies), its program has the token all-to-alls and no all-gather of expert weights,
and it needs less memory than the FSDP-style plan the same weight sharding got before EP (the
expert weights gathered for every matmul, their gradients reduce-scattered)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st

from partir_core import IndivisibleDimError, Shard, ShardExperts, hlo_collectives, partition
from partir_core import models as M
from partir_core import strategies as S
from partir_core.api import fn_mesh
from spmd_types import Mesh
from spmd_types.jax_interop import to_named_sharding

pytestmark = pytest.mark.jax
SIZES = dict(batch=8, seq=8, d_model=16, heads=8, kv_heads=4, head_dim=4, vocab=32, layers=2, ffn=16,
             dtype=jnp.float32)
LAYERS = SIZES["layers"]
MESHES = {"data=8": Mesh({"data": 8}), "data=2,model=4": Mesh({"data": 2, "model": 4})}
EXPERTS = {"data=8": 8, "data=2,model=4": 4}


@functools.cache
def _model(experts: int) -> M.Model:
    return M.moe(**SIZES, experts=experts)  # type: ignore[arg-type]


@functools.cache
def _reference(experts: int) -> tuple[np.ndarray, ...]:
    m = _model(experts)
    return tuple(np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args)))


def _temp_bytes(step, m: M.Model) -> int:  # type: ignore[no-untyped-def]
    """Temporary buffers of the compiled partitioned program (XLA's memory analysis, per device)."""
    a, fn = step._compiled(*m.args)
    jm = fn_mesh(step.mesh)
    specs = [jax.ShapeDtypeStruct(t.shape, x.dtype, sharding=to_named_sharding(t, jm))
             for x, t in zip(jax.tree_util.tree_leaves(m.args), a.lowered.in_types)]
    return int(fn.lower(*specs).compile().memory_analysis().temp_size_in_bytes)


def _run(mesh: str, schedule):  # type: ignore[no-untyped-def]
    m = _model(EXPERTS[mesh])
    step = partition(m.step, MESHES[mesh], schedule)
    got = [np.asarray(x) for x in jax.tree_util.tree_leaves(step(*m.args))]
    for g, r in zip(got, _reference(EXPERTS[mesh])):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6)
    sim = step.simulate()
    assert sim.hlo_counts() == hlo_collectives(step.lower_text(*m.args))
    return step, sim


# Per layer, tokens travel by all-to-all: to the experts and back in the forward pass, again in
# its rematerialisation (jax.checkpoint: the combine's backward reads the expert outputs), and the
# cotangents to the experts and back in the backward pass: 6. All-reduces: BP's one per gradient
# and the loss (10 stacked block tensors, embed, final norm, unembed, loss), less the three expert
# weights, whose gradients each device computes whole for its own experts.
EP_COUNTS = {"all_to_all": 6 * LAYERS, "all_reduce": 7 * LAYERS + 3 + 1}


def test_bp_ep_on_data8_moves_tokens_not_weights_and_needs_less_memory() -> None:
    m = _model(8)
    ep, sim = _run("data=8", S.schedule("moe", "BP+EP"))
    assert sim.counts() == EP_COUNTS
    lay = dict(zip(ep.analysis.program.input_paths, ep.analysis.lowered.in_types))
    assert str(lay["params/blocks/w_gate"]) == "f32[2,8@data,16,16]"  # each device: its expert
    assert str(lay["opt_state/m/blocks/w_down"]) == "f32[2,8@data,16,16]"
    assert str(lay["params/blocks/router"]) == "f32[2,16,8]"  # the router stays replicated
    assert str(lay["batch/tokens"]) == "s32[8@data,8]"
    # the same weight sharding without the expert layout: weights gathered, gradients scattered
    fsdp, fsim = _run("data=8", S.schedule("moe", "BP") + [Shard(S.EXPERTS, axis="data")])
    assert fsim.counts() == {"all_gather": 6 * LAYERS, "reduce_scatter": 3 * LAYERS, "all_reduce": 18}
    assert sim.peak_bytes < fsim.peak_bytes
    assert sim.recv_bytes < fsim.recv_bytes
    assert _temp_bytes(ep, m) < _temp_bytes(fsdp, m)


@pytest.mark.parametrize("strategy", ["BP+MP+EP"] + ["BP+EP"] * THOROUGH)
def test_ep_with_mp_on_data2_model4_equals_step(strategy: str) -> None:
    step, sim = _run("data=2,model=4", S.schedule("moe", strategy))
    counts = sim.counts()
    assert counts["all_to_all"] == 6 * LAYERS
    assert "all_gather" not in counts and "reduce_scatter" not in counts
    lay = dict(zip(step.analysis.program.input_paths, step.analysis.lowered.in_types))
    want = "f32[2,4@data,16,16@model]" if "MP" in strategy else "f32[2,4@data,16,16]"
    assert str(lay["params/blocks/w_up"]) == want


def _expert_gathers(low) -> list[str]:  # type: ignore[no-untyped-def]
    """Moves anywhere in the program (loop bodies too) that take ``data`` off an expert weight's
    (or its gradient's) expert dimension: (layer, expert, in, out) stacked, (expert, in, out) sliced."""
    out = []
    for step in low.steps:
        for body in step.bodies:
            out += _expert_gathers(body)
    for mv in low.moves():
        t = mv.src
        e = {3: 0, 4: 1}.get(len(t.shape))
        if (e is not None and t.shape[e:] == (4, 16, 16) and "data" in t.dims[e] and "data" not in mv.dst.dims[e]):
            out.append(f"{mv.src} -> {mv.dst} ({mv.reason})")
    return out


@pytest.mark.parametrize("strategy", ["BP+MP+SP+EP"] + ["BP+MP+Z3+EP", "BP+MP+EP"] * THOROUGH)
def test_ep_composes_with_sp_and_z3_keeping_experts_in_place(strategy: str) -> None:
    step, sim = _run("data=2,model=4", S.schedule("moe", strategy))
    assert sim.counts().get("all_to_all", 0) + sim.counts().get("exchange_all_to_all", 0) == 6 * LAYERS
    assert _expert_gathers(step.analysis.lowered) == []
    rest = strategy.removeprefix("BP+").removesuffix("+EP")  # the same, the experts sharded by Shard after BP
    fsdp, _ = _run("data=2,model=4", S.schedule("moe", "BP") + [Shard(S.EXPERTS, axis="data")]
                   + S.schedule("moe", rest))
    assert _expert_gathers(fsdp.analysis.lowered)  # the check can fail: the FSDP-style plan gathers


def test_ep_is_offered_for_the_mixture_only() -> None:
    assert {"BP+EP", "BP+MP+EP"} <= set(S.applicable("moe"))
    assert not any("EP" in s.split("+") for s in S.applicable("llama") + S.applicable("gpt"))
    assert S.schedule("moe", "EP+BP") == S.schedule("moe", "BP+EP")  # EP follows the batch tactic
    with pytest.raises(KeyError, match="EP needs experts"):
        S.schedule("llama", "BP+EP")


def test_experts_the_axis_does_not_divide_are_refused_by_name() -> None:
    m = _model(4)
    step = partition(m.step, MESHES["data=8"], S.schedule("moe", "BP+EP"))
    with pytest.raises(IndivisibleDimError, match=r"w_gate has 4 experts \(dimension 1\), not divisible by 8"):
        step.trace(*m.args)


def _moe_layer(h: jax.Array, d: jax.Array, w: jax.Array) -> jax.Array:
    xe = jnp.einsum("bsec,bsd->becd", d, h)
    return jnp.einsum("bsec,becf->bsf", d, jax.nn.silu(jnp.einsum("becd,edf->becf", xe, w)))


@settings(max_examples=6 if THOROUGH else 3, deadline=None)
@given(per_device=st.integers(1, 2), experts=st.sampled_from([2, 4]), slots=st.integers(1, 3),
       seed=st.integers(0, 99))
def test_dispatch_expert_combine_moves_tokens_both_ways(per_device: int, experts: int, slots: int,
                                                        seed: int) -> None:
    """Any batch, expert count and capacity: the layer equals its NumPy evaluation, the tokens go
    to the experts and back by one all-to-all each, and the weights stay in place; the gradient
    (the weights' and the tokens') moves the cotangents the same way: two all-to-alls more."""
    rng = np.random.default_rng(seed)
    mesh = Mesh({"data": 2})
    b, s, dm = 2 * per_device, 4, 8
    h = rng.normal(size=(b, s, dm)).astype(np.float32)
    d = (rng.random((b, s, experts, slots)) < 0.3).astype(np.float32)
    w = rng.normal(size=(experts, dm, dm)).astype(np.float32)
    tactics = [Shard({"h": 0, "d": 0}, axis="data"), ShardExperts({"w": 0}, axis="data")]
    step = partition(_moe_layer, mesh, tactics)
    xe = np.einsum("bsec,bsd->becd", d, h)
    u = np.einsum("becd,edf->becf", xe, w)
    want = np.einsum("bsec,becf->bsf", d, u / (1 + np.exp(-u)))
    np.testing.assert_allclose(np.asarray(step(h, d, w)), want, rtol=1e-5, atol=1e-5)
    assert step.simulate().counts() == {"all_to_all": 2}

    def loss(h: jax.Array, d: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.sum(_moe_layer(h, d, w) ** 2)

    grad = partition(jax.grad(loss, argnums=(0, 2)), mesh, tactics)
    for g, r in zip(grad(h, d, w), jax.grad(loss, argnums=(0, 2))(h, d, w)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-4)
    assert grad.simulate().counts() == {"all_to_all": 4}
    lay = dict(zip(grad.analysis.program.input_paths, grad.analysis.lowered.in_types))
    assert str(lay["w"]).startswith(f"f32[{experts}@data")


def test_bp_ep_needs_less_temp_memory_than_xla_given_the_same_shardings() -> None:
    """XLA's partitioner, given BP+EP's input and output shardings, gathers the expert weights
    (benchmarks.moe_ep measures both sides at a larger size)."""
    from benchmarks.moe_ep import sides

    ours, xla = sides(_model(8), S.schedule("moe", "BP+EP"), MESHES["data=8"])
    assert set(ours.counts) == {"all-to-all", "all-reduce"} and "all-gather" in xla.counts
    assert ours.temp_bytes < xla.temp_bytes and ours.recv_bytes < xla.recv_bytes


def test_bp_ep_in_bf16_matches_loss_and_gradient_moments() -> None:
    """The model's own bf16 activations (f32 master weights): each partial sum is rounded to bf16
    before it is reduced, so the loss and Adam's first moments (the gradients) are compared at
    bf16 precision, as tests/test_partir_llama.py does."""
    m = M.moe(**{**SIZES, "dtype": jnp.bfloat16}, experts=8)  # type: ignore[arg-type]
    step = partition(m.step, MESHES["data=8"], S.schedule("moe", "BP+EP"))
    got = [np.asarray(x, np.float32) for x in jax.tree_util.tree_leaves(step(*m.args))]
    ref = [np.asarray(x, np.float32) for x in jax.tree_util.tree_leaves(jax.jit(m.step)(*m.args))]
    np.testing.assert_allclose(got[-1], ref[-1], rtol=1e-3)
    n = len(jax.tree_util.tree_leaves(m.params))
    for g, r in zip(got[n + 1:2 * n + 1], ref[n + 1:2 * n + 1]):
        np.testing.assert_allclose(g, r, atol=3e-2 * float(np.abs(r).max()))
    assert step.simulate().counts() == EP_COUNTS
