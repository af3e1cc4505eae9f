"""``redist.reshard`` against ``jax.sharding.reshard`` on 8 simulated CPU devices.

Every comparison runs both on the same input: equal values, equal output shardings (the abstract
values compare equal, spec included), equal gradients; eagerly, under ``jax.jit``, ``jax.grad``,
``jax.jvp``, ``jax.vmap`` and inside ``shard_map``. The lowered programs hold exactly the plan's
collectives, and a traced function plans each pair of types once.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads
from strategies import jax_meshes, type_pairs
from test_executor import _expected_kinds, _make_input

import redist
from redist import (
    CostModel,
    IncompatibleTypesError,
    UnsummableDtypeError,
    redistribute,
    reshard,
    reshard_local,
)
from redist.caches import clear_caches
from redist.hlo import parse_collectives
from redist.jax_reshard import plan_for
from spmd_types import Mesh, ShardingType, UnknownLayoutError
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import to_partition_spec

XY = Mesh({"x": 2, "y": 4})
FEW = settings(max_examples=10)


@cache
def jmesh(mesh: Mesh, explicit: bool = True) -> jax.sharding.Mesh:
    kind = AxisType.Explicit if explicit else AxisType.Auto
    devs = np.array(jax.devices()[: mesh.size], dtype=object).reshape([s for _, s in mesh.axes])
    return jax.sharding.Mesh(devs, mesh.names, axis_types=(kind,) * len(mesh.axes))


def ns(t: ShardingType) -> NamedSharding:
    return NamedSharding(jmesh(t.mesh), to_partition_spec(t))


def global_array(t: ShardingType, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    g = rng.integers(-3, 4, size=t.shape) if t.dtype != "pred" else rng.integers(0, 2, size=t.shape)
    return np.asarray(g).astype(numpy_dtype(t.dtype))  # type: ignore[call-overload]


def place(t: ShardingType, seed: int = 0) -> jax.Array:
    """An array laid out as ``t``; a pending sum is made by JAX's own reshard from a real layout."""
    plain = ShardingType(t.shape, t.dtype, t.dims, t.mesh)
    x = jax.device_put(global_array(t, seed), ns(plain))
    return jax.sharding.reshard(x, ns(t)) if t.unreduced else x


def same(a: jax.Array, b: jax.Array) -> None:
    assert jax.typeof(a) == jax.typeof(b), (jax.typeof(a), jax.typeof(b))
    assert a.sharding == b.sharding, (a.sharding, b.sharding)
    if not jax.typeof(a).sharding.spec.unreduced:
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _pairs(draw: Any, unreduced: bool = False, dtypes: tuple[str, ...] = ("f32", "s32")) -> tuple[ShardingType, ShardingType]:
    mesh = draw(jax_meshes(max_devices=8, max_axes=3))
    return draw(type_pairs(mesh, dtypes=dtypes, unreduced=unreduced))  # type: ignore[no-any-return]


# -- values and shardings: eager and jit ------------------------------------------------------------


@FEW
@given(st.data())
def test_eager_and_jit_match_jax_reshard(data: st.DataObject) -> None:
    src, dst = _pairs(data.draw, unreduced=True)
    x = place(src)
    ref = jax.sharding.reshard(x, ns(dst))
    same(reshard(x, ns(dst)), ref)
    same(jax.jit(lambda a: reshard(a, ns(dst)))(x), ref)
    same(reshard(x, str(dst)), ref)  # type text on x's mesh


def test_destination_forms_and_meshes() -> None:
    plan = redistribute("f32[8@x,8@y]", "f32[8@y,8@x]", XY)
    src, dst = plan.src, plan.dst
    x = place(src)
    ref = jax.sharding.reshard(x, ns(dst))
    with pytest.raises(UnknownLayoutError, match="NamedSharding.*jax.set_mesh"):  # as JAX: no mesh is set
        reshard(x, to_partition_spec(dst))
    with jax.set_mesh(jmesh(XY)):
        same(reshard(x, to_partition_spec(dst)), ref)  # PartitionSpec: mesh from context
        same(jax.jit(lambda a: reshard(a, P("y", "x")))(x), ref)  # PartitionSpec: mesh from context
    # a single-device array is placed replicated first, as jax.sharding.reshard does
    same(reshard(jnp.asarray(global_array(src)), ns(dst)), jax.sharding.reshard(jnp.asarray(global_array(src)), ns(dst)))
    # planning accepts JAX meshes, concrete or abstract: no devices needed
    for m in (jmesh(XY), jmesh(XY).abstract_mesh, "x=2,y=4"):
        assert redistribute("f32[8@x,8@y]", "f32[8@y,8@x]", m) == plan


def test_unreduced_destinations_match_jax() -> None:
    x = place(redistribute("f32[8@x,8@y]", "f32[8@x,8@y]", XY).src)
    for spec in (P(None, "y", unreduced={"x"}), P("y", unreduced={"x"}), P(unreduced={"x", "y"})):
        ref = jax.sharding.reshard(x, NamedSharding(jmesh(XY), spec))
        ours = jax.jit(lambda a, s=spec: reshard(a, NamedSharding(jmesh(XY), s)))(x)
        same(ours, ref)
        back = NamedSharding(jmesh(XY), P("x"))
        same(reshard(ours, back), jax.sharding.reshard(ref, back))  # the pending sums agree


def test_auto_axes_in_the_destination_are_refused_eagerly_and_traced_as_jax_refuses_them() -> None:
    am = jmesh(XY, explicit=False)
    x = jax.device_put(global_array(redistribute("f32[8,8]", "f32[8,8]", XY).src), NamedSharding(am, P("x", "y")))
    for fn in (lambda a: reshard(a, NamedSharding(am, P("y", "x"))),
               jax.jit(lambda a: reshard(a, NamedSharding(am, P("y", "x"))))):
        with pytest.raises(ValueError, match="Auto"):
            jax.sharding.reshard(x, NamedSharding(am, P("y", "x")))
        with pytest.raises(UnknownLayoutError, match="Auto.*Explicit"):
            fn(x)


# -- gradients ----------------------------------------------------------------------------------------


def _loss(fn: Any, dst: NamedSharding, w: np.ndarray) -> Any:
    return lambda a: jnp.sum(jnp.sin(fn(a, dst)) * w)


@settings(max_examples=6)
@given(st.data())
def test_grad_matches_jax_reshard(data: st.DataObject) -> None:
    src, dst = _pairs(data.draw, dtypes=("f32",))
    x = place(src)
    w = global_array(dst, seed=1)
    with jax.set_mesh(jmesh(src.mesh)):
        ours = jax.jit(jax.grad(_loss(reshard, ns(dst), w)))(x)
        ref = jax.jit(jax.grad(_loss(jax.sharding.reshard, ns(dst), w)))(x)
        same_close(ours, ref)
        eager = jax.grad(_loss(reshard, ns(dst), w))(x)  # eager grad needs set_mesh in JAX too
        same_close(eager, ref)


def same_close(a: jax.Array, b: jax.Array) -> None:
    assert jax.typeof(a) == jax.typeof(b) and a.sharding == b.sharding
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_check_grads_and_vjp_runs_the_reverse_plan() -> None:
    plan = redistribute("f32[16@(x,y),8]", "f32[16,8@(y,x)]", XY)
    x = place(plan.src)
    with jax.set_mesh(jmesh(XY)):
        check_grads(lambda a: reshard(a, ns(plan.dst)), (x,), order=1, modes=("rev", "fwd"))
        y, vjp = jax.vjp(lambda a: reshard(a, ns(plan.dst)), x)
        (ct,) = jax.jit(vjp)(y)
    same(ct, x)  # the move is a permutation of cells: its transpose takes y back to x
    back = redistribute(plan.dst, plan.src)
    hlo = jax.jit(vjp).lower(y).compile().as_text()
    assert Counter(parse_collectives(hlo).kinds()) == _expected_kinds(back)


def test_grad_through_a_pending_sum_equals_jax() -> None:
    """The cotangent of a pending sum is reduced (JAX's typing): the reverse plan runs and the
    gradient, its type and its layout are JAX's (more cases in tests/test_reshard_conformance.py)."""
    x = place(redistribute("f32[8@x,8@y]", "f32[8@x,8@y]", XY).src)

    def loss(impl):  # type: ignore[no-untyped-def]
        return jax.grad(lambda a: jnp.sum(impl(impl(a, P(None, "y", unreduced={"x"})), P("y")) ** 2))

    with jax.set_mesh(jmesh(XY)):
        same_close(loss(reshard)(x), loss(jax.sharding.reshard)(x))


# -- jvp and vmap --------------------------------------------------------------------------------------


@FEW
@given(st.data())
def test_jvp_matches_jax_reshard(data: st.DataObject) -> None:
    src, dst = _pairs(data.draw, dtypes=("f32",))
    x, t = place(src), place(src, seed=2)
    for fn in (lambda f: f, jax.jit):
        ours = fn(lambda a, b: jax.jvp(lambda z: reshard(z, ns(dst)), (a,), (b,)))(x, t)
        ref = jax.jvp(lambda z: jax.sharding.reshard(z, ns(dst)), (x,), (t,))
        same(ours[0], ref[0])
        same(ours[1], ref[1])


def _inner(t: ShardingType, drop: tuple[Any, ...]) -> ShardingType:
    """``t`` without its dimension 0 and without the axes in ``drop`` (they shard the batch)."""
    dims = [tuple(a for a in d if a not in drop) for d in t.dims[1:]]
    return ShardingType(t.shape[1:], t.dtype, dims, t.mesh)


@FEW
@given(st.data())
def test_vmap_matches_jax_reshard(data: st.DataObject) -> None:
    mesh = data.draw(jax_meshes(max_devices=8, max_axes=3))
    src, dst = data.draw(type_pairs(mesh, min_rank=2, dtypes=("f32",)))
    inner = NamedSharding(jmesh(mesh), to_partition_spec(_inner(dst, src.dims[0])))
    x = place(src)
    ref = jax.vmap(lambda a: jax.sharding.reshard(a, inner))(x)
    same(jax.vmap(lambda a: reshard(a, inner))(x), ref)
    same(jax.jit(jax.vmap(lambda a: reshard(a, inner)))(x), ref)


def test_vmap_over_a_replicated_batch_dimension_keeps_it_replicated() -> None:
    x = place(redistribute("f32[3,8@x,8@y]", "f32[3,8@x,8@y]", XY).src)
    inner = NamedSharding(jmesh(XY), P("y", "x"))
    ours = jax.jit(jax.vmap(lambda a: reshard(a, inner)))(x)
    assert ours.sharding.spec == P(None, "y", "x")
    same(ours, jax.vmap(lambda a: jax.sharding.reshard(a, inner))(x))
    with jax.set_mesh(jmesh(XY)):  # and gradients through the vmap
        w = global_array(redistribute("f32[3,8,8]", "f32[3,8,8]", XY).src)
        g = jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(jax.vmap(lambda z: reshard(z, inner))(a)) * w)))(x)
        r = jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(jax.vmap(lambda z: jax.sharding.reshard(z, inner))(a)) * w)))(x)
    same_close(g, r)


# -- inside shard_map ----------------------------------------------------------------------------------


@pytest.mark.parametrize("manual,spec_in,dst", [("x", P("x"), P("y", None)), ("y", P(None, "y"), P("x", None))])
def test_inside_a_partially_manual_shard_map(manual: str, spec_in: P, dst: P) -> None:
    x = place(redistribute("f32[8@x,16@y]", "f32[8@x,16@y]", XY).src)

    def run(fn: Any) -> jax.Array:
        body = jax.shard_map(lambda b: fn(b, dst), mesh=jmesh(XY), in_specs=spec_in, out_specs=spec_in,
                             axis_names={manual})
        return jax.jit(body)(x)

    same(run(reshard), run(jax.sharding.reshard))


def test_reshard_local_inside_a_fully_manual_shard_map() -> None:
    plan = redistribute("f32[8@x,16@y]", "f32[8@y,16@x]", XY)
    x = place(plan.src)
    body = jax.shard_map(lambda b: reshard_local(b, str(plan.src), str(plan.dst)), mesh=jmesh(XY),
                         in_specs=to_partition_spec(plan.src), out_specs=to_partition_spec(plan.dst), check_vma=False)
    same(jax.jit(body)(x), jax.sharding.reshard(x, ns(plan.dst)))
    # over all-manual axes JAX's reshard leaves the block as it is (ours hands it to JAX), and a
    # Manual axis in the destination is refused, naming what to call instead
    def inside(fn: Any, spec: P) -> jax.Array:
        return jax.jit(jax.shard_map(lambda b: fn(b, spec), mesh=jmesh(XY), in_specs=P("x", "y"),
                                     out_specs=P("x", "y")))(x)

    same(inside(reshard, P()), inside(jax.sharding.reshard, P()))
    with pytest.raises(ValueError, match="Manual"):
        inside(jax.sharding.reshard, P("y"))
    with pytest.raises(UnknownLayoutError, match="Manual.*reshard_local"):
        inside(reshard, P("y"))


# -- dtypes --------------------------------------------------------------------------------------------

SUMMABLE = ("bf16", "f16", "f32", "f8_e4m3fn", "f8_e5m2", "s8", "u8", "s16", "u16", "s32", "u32", "c64")


@pytest.mark.parametrize("dtype", SUMMABLE)
def test_every_summable_dtype_with_and_without_pending_sums(dtype: str) -> None:
    """Against JAX, except a pending sum of c64, which crashes XLA:CPU's compiler inside
    jax.sharding.reshard: that one against the NumPy global array (random integer partials)."""
    for src, dst in ((f"{dtype}[8@x,8@y]", f"{dtype}[8@y,8@x]"), (f"{dtype}[8,8@y]{{U:x}}", f"{dtype}[8@(y,x),8]")):
        plan = redistribute(src, dst, XY)
        if dtype == "c64" and plan.src.unreduced:
            continue
        x = place(plan.src)
        same(jax.jit(lambda a, d=plan.dst: reshard(a, ns(d)))(x), jax.sharding.reshard(x, ns(plan.dst)))
    if dtype != "c64":
        return
    summed = redistribute(f"{dtype}[8,8@y]{{U:x}}", f"{dtype}[8@(y,x),8]", XY)
    g = global_array(summed.src)
    xu = _make_input(summed.src, jmesh(XY), g)
    y = jax.jit(lambda a: reshard(a, ns(summed.dst)))(xu)
    assert y.sharding == ns(summed.dst) and y.dtype == g.dtype
    assert np.array_equal(np.asarray(y), g)


def test_bool_moves_but_its_pending_sums_are_refused_at_planning() -> None:
    x = place(redistribute("pred[8@x,8@y]", "pred[8@x,8@y]", XY).src)
    same(reshard(x, NamedSharding(jmesh(XY), P("y", "x"))), jax.sharding.reshard(x, NamedSharding(jmesh(XY), P("y", "x"))))
    with pytest.raises(UnsummableDtypeError, match="pred.*s8"):
        redistribute("pred[8,8@y]{U:x}", "pred[8@x,8@y]", XY)
    with jax.set_mesh(jmesh(XY)), pytest.raises(UnsummableDtypeError, match="destination"):
        jax.jit(lambda a: reshard(a, P(None, "y", unreduced={"x"})))(x)


# -- the lowered program and the planning cache --------------------------------------------------------


@FEW
@given(st.data())
def test_lowered_collectives_are_the_plans(data: st.DataObject) -> None:
    src, dst = _pairs(data.draw, unreduced=True)
    x = place(src)
    hlo = jax.jit(lambda a: reshard(a, ns(dst))).lower(x).compile().as_text()
    assert Counter(parse_collectives(hlo).kinds()) == _expected_kinds(plan_for(src, dst)), str(plan_for(src, dst))


def test_a_traced_function_plans_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import redist.synth.driver as synth  # cached_synthesize calls this module's synthesize

    calls: list[tuple[str, str]] = []
    real = synth.synthesize

    def counting(src: ShardingType, dst: ShardingType, *a: Any) -> Any:
        calls.append((str(src), str(dst)))
        return real(src, dst, *a)

    x = place(redistribute("f32[64@x,32@y]", "f32[64@x,32@y]", XY).src)
    monkeypatch.setattr(synth, "synthesize", counting)
    clear_caches("plans")
    dst = NamedSharding(jmesh(XY), P("y", "x"))
    f = jax.jit(lambda a: reshard(a, dst) * 2 + reshard(a, dst))
    f(x)
    f(x)
    assert calls == [("f32[64@x,32@y]", "f32[64@y,32@x]")]
    with jax.set_mesh(jmesh(XY)):
        jax.jit(jax.grad(lambda a: jnp.sum(f(a))))(x)
    assert calls[1:] == [("f32[64@y,32@x]", "f32[64@x,32@y]")]  # the reverse move, once


# -- mistakes name what to do instead -------------------------------------------------------------------


def test_mistakes_name_what_to_call_instead() -> None:
    x = place(redistribute("f32[8@x,8@y]", "f32[8@x,8@y]", XY).src)
    with pytest.raises(IncompatibleTypesError, match=r"redist\.reshard\(x, sharding\)"):
        redistribute(x.sharding, "f32[8@y,8@x]", XY)  # type: ignore[arg-type]
    with pytest.raises(IncompatibleTypesError, match=r"redist\.reshard\(x, spec\)"):
        redistribute("f32[8@x,8@y]", P("y", "x"), XY)  # type: ignore[arg-type]
    with pytest.raises(IncompatibleTypesError, match=r"type_of\(x\)"):
        redistribute(x, "f32[8@y,8@x]", XY)  # type: ignore[arg-type]
    with pytest.raises(UnknownLayoutError, match=r"NamedSharding\(mesh, spec\)"):
        reshard(jnp.zeros((8, 8)), P("x"))
    with jax.set_mesh(jmesh(XY)):  # a PartitionSpec and an unplaced array: the context's devices
        same(reshard(np.ones((8, 8), np.float32), P("x")), jax.sharding.reshard(np.ones((8, 8), np.float32), P("x")))
    small = NamedSharding(jmesh(Mesh({"x": 2, "y": 2})), P("y"))  # other devices: a cross-mesh plan
    same(reshard(x, small), jax.device_put(x, small))
    # plan(x) works on tracers now (it runs through reshard's primitive)
    plan = redistribute("f32[8@x,8@y]", "f32[8@y,8@x]", XY, cost_model=CostModel(objective="bytes"))
    same(jax.jit(plan)(x), plan(x))
    assert math.isclose(plan.recv_bytes, plan.lower_bound_bytes)
    assert redist.reshard is reshard


def test_readme_snippet_runs_as_written() -> None:
    """The README's first Python block (the reshard example) in a fresh interpreter."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    code = re.search(r"## What it does.*?```python\n(.*?)```", text, re.S)
    assert code is not None and "redist.reshard" in code.group(1)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run([sys.executable, "-c", code.group(1)], env=env, capture_output=True, text=True,
                         timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "float32[2048@y,2048@x]" and lines[1] == "float32[2048@x,2048@y] True", out.stdout
    assert lines[2].startswith("plan f32[2048@x,2048@y] -> f32[2048@y,2048@x]")
