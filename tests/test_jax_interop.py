"""JAX interop: Mesh <-> jax Mesh, type <-> PartitionSpec / NamedSharding, real arrays' types."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from strategies import jax_meshes, mesh_and_type, meshes, sharding_types

from spmd_types import (
    InvalidSizeError,
    Mesh,
    MeshError,
    MeshMismatchError,
    RankMismatchError,
    ShardingType,
    ShardingTypeError,
    SubAxis,
    UnknownAxisError,
    parse,
)
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import (
    from_named_sharding,
    from_partition_spec,
    mesh_to_jax,
    to_named_sharding,
    to_partition_spec,
    type_of,
)

pytestmark = pytest.mark.jax

# dtypes JAX keeps as they are without jax_enable_x64 (64-bit ones would be narrowed on device_put)
ARRAY_DTYPES = ("pred", "s8", "s16", "s32", "u8", "u16", "u32", "f16", "bf16", "f32", "c64", "f8_e4m3fn")


def test_eight_cpu_devices():
    assert len(jax.devices()) >= 8


# -- meshes ------------------------------------------------------------------------------------------------
@given(jax_meshes())
def test_mesh_to_jax_and_back(m):
    jm = m.to_jax()
    assert isinstance(jm, jax.sharding.Mesh)
    assert Mesh.from_jax(jm) == m
    assert tuple(jm.axis_names) == m.names
    assert dict(jm.shape) == m.shape
    assert all(t == AxisType.Explicit for t in jm.axis_types)
    assert list(jm.devices.flat) == list(jax.devices()[: m.size])  # row-major over the device list
    auto = mesh_to_jax(m, explicit=False)
    assert all(t == AxisType.Auto for t in auto.axis_types) and Mesh.from_jax(auto) == m
    assert Mesh.from_jax(jm.abstract_mesh) == m


def test_mesh_from_make_mesh():
    jm = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    assert Mesh.from_jax(jm) == Mesh({"x": 2, "y": 4})


def test_mesh_to_jax_custom_device_order():
    m = Mesh({"x": 2, "y": 2})
    devs = jax.devices()[:4][::-1]
    jm = m.to_jax(devs)
    assert list(jm.devices.flat) == devs
    assert Mesh.from_jax(jm) == m


def test_mesh_too_big_for_devices():
    with pytest.raises(MeshError) as e:
        Mesh({"x": 3, "y": 3}).to_jax()
    assert "9 devices" in str(e.value)
    with pytest.raises(MeshError, match="4 devices"):
        Mesh({"x": 4}).to_jax(jax.devices()[:2])


def test_mesh_from_jax_bad_names():
    jm = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x-1",))
    with pytest.raises(MeshError, match="x-1"):
        Mesh.from_jax(jm)


# -- PartitionSpec ----------------------------------------------------------------------------------------
@given(mesh_and_type(unreduced=True))
def test_partition_spec_round_trip(mt):
    mesh, t = mt
    spec = to_partition_spec(t)
    assert isinstance(spec, P)
    assert spec.unreduced == frozenset(t.unreduced)
    assert len(spec.partitions) == t.rank
    for entry, axes in zip(spec.partitions, t.dims):
        assert entry == (None if not axes else axes[0] if len(axes) == 1 else axes)
    assert from_partition_spec(spec, t.shape, t.dtype, mesh) == t
    # numpy dtypes and JAX's own dtype objects are accepted too
    assert from_partition_spec(spec, t.shape, numpy_dtype(t.dtype), mesh) == t


@given(st.data())
def test_partition_spec_to_type_to_partition_spec(data):
    """A PartitionSpec written by hand, with trailing dimensions left out, comes back padded."""
    mesh = data.draw(meshes())
    t = data.draw(sharding_types(mesh, min_rank=1))
    parts = list(to_partition_spec(t).partitions)
    while parts and parts[-1] is None:
        parts.pop()
    spec = P(*parts, unreduced=set(t.unreduced))
    u = from_partition_spec(spec, t.shape, t.dtype, mesh)
    assert u == t
    assert to_partition_spec(u) == P(*parts, *([None] * (t.rank - len(parts))), unreduced=set(t.unreduced))


@given(st.data())
def test_subaxes_cannot_become_partition_specs(data):
    mesh = data.draw(meshes(min_axes=2))
    t = data.draw(sharding_types(mesh, subaxes=True))
    subs = [a for a in t.used_axes() if isinstance(a, SubAxis)]
    if not subs:  # add a proper factor of an unused composite axis, to a dimension or as unreduced
        used = {mesh.span(a)[0] for a in t.used_axes()}
        free = [(n, s) for n, s in mesh.axes if n not in used and any(s % p == 0 for p in range(2, s))]
        assume(free)
        name, n = data.draw(st.sampled_from(free))
        size = data.draw(st.sampled_from([p for p in range(2, n) if n % p == 0]))
        pre = data.draw(st.sampled_from([q for q in range(1, n) if n % (q * size) == 0]))
        sub = SubAxis(name, pre, size)
        d = data.draw(st.integers(-1, t.rank - 1))
        if d < 0:
            t = t.replace(unreduced=set(t.unreduced) | {sub})
        else:
            shape = list(t.shape)
            shape[d] *= size
            dims = [list(a) for a in t.dims]
            dims[d].insert(data.draw(st.integers(0, len(dims[d]))), sub)
            t = ShardingType(shape, t.dtype, dims, mesh, t.unreduced)
        subs = [sub]
    with pytest.raises(ShardingTypeError) as e:
        to_partition_spec(t)
    assert any(str(a) in str(e.value) for a in subs)


@pytest.mark.parametrize(
    "text, needle",
    [("f32[8@(y:(1)2),4]", "y:(1)2"), ("f32[8@(x,y:(2)2)]", "y:(2)2"), ("f32[8@x]{U:y:(1)2}", "y:(1)2")],
)
def test_subaxis_errors_name_the_subaxis(text, needle):
    t = parse(text, Mesh({"x": 2, "y": 4}))
    with pytest.raises(ShardingTypeError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        to_partition_spec(t)


XY = Mesh({"x": 2, "y": 4})


@pytest.mark.parametrize(
    "spec, shape, dtype, err, needle",
    [
        (P("x", "y", None), (8, 8), "f32", RankMismatchError, "3 entries"),
        (P("q"), (8,), "f32", UnknownAxisError, "'q'"),
        (P(None, unreduced={"q"}), (8,), "f32", UnknownAxisError, "'q'"),
        (P("y"), (6,), "f32", ShardingTypeError, "dimension 0"),
        (P(P.UNCONSTRAINED), (8,), "f32", ShardingTypeError, "UNCONSTRAINED"),
        (P("x", reduced={"q"}), (8,), "f32", UnknownAxisError, "'q'"),
        (P("x"), (8,), "int4", InvalidSizeError, "int4"),
        (P("x"), (8,), "nonsense", InvalidSizeError, "nonsense"),
        (P("x"), (0,), "f32", InvalidSizeError, "dimension 0"),
        (("x",), (8,), "f32", ShardingTypeError, "PartitionSpec"),
    ],
)
def test_from_partition_spec_errors(spec, shape, dtype, err, needle):
    with pytest.raises(err) as e:
        from_partition_spec(spec, shape, dtype, XY)
    assert needle in str(e.value)


def test_regression_from_partition_spec_with_unreduced():
    """``list(spec)`` raises in JAX 0.10 when the spec has unreduced axes: this used to break
    ``from_partition_spec`` (and ``type_of``) for every unreduced array."""
    spec = P("x", None, unreduced={"y"})
    assert from_partition_spec(spec, (8, 4), "float32", XY) == parse("f32[8@x,4]{U:y}", XY)
    assert from_partition_spec(P(unreduced={"y"}), (8, 4), "f32", XY) == parse("f32[8,4]{U:y}", XY)


# -- NamedSharding ----------------------------------------------------------------------------------------
@given(st.data())
def test_named_sharding_round_trip(data):
    mesh = data.draw(jax_meshes())
    t = data.draw(sharding_types(mesh))
    jm = mesh.to_jax()
    ns = to_named_sharding(t, jm)
    assert isinstance(ns, NamedSharding) and ns.mesh == jm
    assert ns.spec == to_partition_spec(t)
    assert from_named_sharding(ns, t.shape, t.dtype) == t


def test_named_sharding_mesh_mismatch():
    t = parse("f32[8@x]", XY)
    other = Mesh({"x": 2, "y": 2}).to_jax()
    with pytest.raises(MeshMismatchError) as e:
        to_named_sharding(t, other)
    assert "{x=2,y=4}" in str(e.value) and "{x=2,y=2}" in str(e.value)


# -- real arrays ---------------------------------------------------------------------------------------------
def _acc_dtype(t: ShardingType) -> type:
    return np.complex128 if t.dtype.startswith("c") else np.float64


def _check_array(x: jax.Array, t: ShardingType, jm: jax.sharding.Mesh, value: np.ndarray) -> None:
    """type_of, the printed jax.typeof, JAX's own shard placement and the shards' contents all agree
    with ``t`` and the global ``value``: summing every device's local data into its block gives
    ``value`` once per copy (``replication / |unreduced group|`` copies: unreduced partial sums add
    up to the value within each group)."""
    assert type_of(x) == t
    assert parse(str(jax.typeof(x)), t.mesh) == t
    position = {d: p for p, d in enumerate(jm.devices.flat)}
    shards = x.addressable_shards
    assert len(shards) == t.mesh.size
    acc = np.zeros(t.shape, dtype=_acc_dtype(t))
    for s in shards:
        block = t.block(position[s.device])
        local = np.asarray(s.data)
        assert local.shape == t.local_shape
        if not t.unreduced:  # JAX 0.10 has no shard index for unreduced shardings
            got = tuple((sl.start or 0, t.shape[i] if sl.stop is None else sl.stop) for i, sl in enumerate(s.index))
            assert got == block
        acc[tuple(slice(lo, hi) for lo, hi in block)] += local.astype(acc.dtype)
    groups = int(np.prod([t.mesh.axis_size(a) for a in t.unreduced]))
    np.testing.assert_array_equal(acc, value.astype(acc.dtype) * (t.replication // groups))


@settings(max_examples=200 if THOROUGH else 12)
@given(st.data())
def test_device_put_arrays_have_their_type(data):
    mesh = data.draw(jax_meshes())
    # unreduced arrays come from computations (below): device_put of an unreduced sharding is not
    # implemented for most layouts in JAX 0.10 (NotImplementedError, or an abort inside Shardy)
    t = data.draw(sharding_types(mesh, max_rank=3, dtypes=ARRAY_DTYPES, unreduced=False))
    reverse = data.draw(st.booleans())
    devs = jax.devices()[: mesh.size]
    jm = mesh.to_jax(devs[::-1] if reverse else devs)
    value = (np.arange(int(np.prod(t.shape))) % 7).reshape(t.shape).astype(numpy_dtype(t.dtype))
    x = jax.device_put(value, to_named_sharding(t, jm))
    _check_array(x, t, jm, value)


def test_bf16_replicated_and_multi_axis_dims():
    jm = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    m = Mesh.from_jax(jm)
    value = np.arange(8 * 16).reshape(8, 16).astype(jnp.bfloat16)
    x = jax.device_put(value, NamedSharding(jm, P(("y", "x"), None)))
    assert str(jax.typeof(x)) == "bfloat16[8@(y,x),16]"
    t = parse(str(jax.typeof(x)), m)
    assert t == ShardingType((8, 16), "bf16", [("y", "x"), ()], m)
    assert str(t) == "bf16[8@(y,x),16]"
    _check_array(x, t, jm, value)
    z = jax.device_put(jnp.zeros((4, 6), jnp.float32), NamedSharding(jm, P(None, None)))
    assert parse(str(jax.typeof(z)), m) == type_of(z) == parse("f32[4,6]", m)


def test_non_power_of_two_mesh_array():
    m = Mesh({"a": 3, "b": 2, "c": 1})
    jm = m.to_jax()
    t = parse("s32[6@(b,a),5@c]", m)
    value = np.arange(30, dtype=np.int32).reshape(6, 5)
    x = jax.device_put(value, to_named_sharding(t, jm))
    _check_array(x, t, jm, value)


def test_unreduced_einsum_output():
    jm = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    m = Mesh.from_jax(jm)
    av = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) % 5
    bv = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) % 3
    with jax.set_mesh(jm):
        a = jax.device_put(av, P("x", "y"))
        b = jax.device_put(bv, P("y", None))
        out = jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", None, unreduced={"y"}))
    assert str(jax.typeof(out)) == "float32[8@x,4]{U:y}"
    t = parse(str(jax.typeof(out)), m)
    assert t == type_of(out) == ShardingType((8, 4), "f32", ["x", None], m, ["y"])
    assert to_partition_spec(t) == out.sharding.spec
    _check_array(out, t, jm, av @ bv)


def test_unreduced_over_two_axes_prints_in_mesh_order():
    jm = jax.make_mesh((2, 2, 2), ("z", "y", "x"), axis_types=(AxisType.Explicit,) * 3)
    m = Mesh.from_jax(jm)
    with jax.set_mesh(jm):
        a = jax.device_put(jnp.ones((8, 16)), P("x", ("y", "z")))
        b = jax.device_put(jnp.ones((16, 4)), P(("y", "z"), None))
        out = jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", unreduced={"y", "z"}))
    text = str(jax.typeof(out))
    assert text == "float32[8@x,4]{U:(z,y)}"
    t = parse(text, m)
    assert t == type_of(out) and str(t) == "f32[8@x,4]{U:(z,y)}"


def test_unreduced_device_put_of_supported_layout():
    """JAX 0.10 can device_put this unreduced layout (many others raise NotImplementedError)."""
    m = Mesh({"a": 2, "b": 2})
    jm = m.to_jax()
    t = parse("bf16[4@b]{U:a}", m)
    x = jax.device_put(np.ones(4, dtype=jnp.bfloat16), to_named_sharding(t, jm))
    assert type_of(x) == t and parse(str(jax.typeof(x)), m) == t


def test_type_of_rejects_non_named_shardings():
    with pytest.raises(ShardingTypeError, match="NamedSharding"):
        type_of(jnp.ones(3))  # SingleDeviceSharding
    with pytest.raises(ShardingTypeError, match="ndarray"):
        type_of(np.ones(3))  # type: ignore[arg-type]


def test_type_of_auto_mesh_array():
    m = Mesh({"a": 2, "b": 4})
    jm = mesh_to_jax(m, explicit=False)
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(jm, P("a")))
    assert type_of(x) == parse("f32[8@a,4]", m)


def test_from_named_sharding_rejects_other_shardings():
    with pytest.raises(ShardingTypeError, match="NamedSharding"):
        from_named_sharding(jnp.ones(3).sharding, (3,), "f32")  # type: ignore[arg-type]
