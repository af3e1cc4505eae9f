"""``reduced`` axes: the type (validation, equality, its data layout and its cotangent), plans
between reduced types (the data plan, retyped, proved by z3) and the reverse-mode rule.

JAX's own behaviour for the same moves is pinned in tests/test_reshard_conformance.py.
"""

from __future__ import annotations

import pickle

import jax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from strategies import jax_meshes, mesh_and_type, sharding_types

import proofs  # noqa: F401  (registers plan.verify)
from proofs.errors import VerificationError
from redist import autotune, redistribute
from redist.plan import Plan
from redist.transpose import cotangent_move
from spmd_types import DuplicateAxisError, Mesh, ShardingType, UnknownAxisError, parse
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import from_named_sharding, to_named_sharding, to_partition_spec, type_of

XY = Mesh({"x": 2, "y": 4})
FEW = settings(max_examples=15)


def T(text: str) -> ShardingType:
    return parse(text, XY)


# -- the type --------------------------------------------------------------------------------------------
@given(mesh_and_type(subaxes=True, reduced=True))
def test_reduced_types_are_canonical_and_hash_like_their_parts(mt):
    mesh, t = mt
    u = ShardingType(t.shape, t.dtype, t.dims, mesh, t.unreduced, t.reduced)
    assert u == t and hash(u) == hash(t) and t.replace() == t
    assert pickle.loads(pickle.dumps(t)) == t
    data = t.without_reduced()
    assert not data.reduced and data.dims == t.dims and data.unreduced == t.unreduced
    assert (data == t) == (not t.reduced)
    # data-wise a reduced axis is replicated: same blocks, bytes and replication
    assert data.local_shape == t.local_shape and data.replication == t.replication
    assert all(data.block(d) == t.block(d) for d in range(mesh.size))


@given(mesh_and_type(subaxes=True, reduced=True))
def test_cotangent_swaps_unreduced_and_reduced(mt):
    _, t = mt
    c = t.cotangent()
    assert c.unreduced == t.reduced and c.reduced == t.unreduced and c.dims == t.dims
    assert c.cotangent() == t


def test_reduced_is_part_of_equality():
    assert T("f32[8,4]{R:x}") != T("f32[8,4]") and T("f32[8,4]{R:x}") != T("f32[8,4]{U:x}")
    assert len({T("f32[8,4]{R:x}"), T("f32[8,4]"), T("f32[8,4]{U:x}"), T("f32[8,4]{R:x}")}) == 3
    assert ShardingType((8, 4), "f32", [(), ()], XY, reduced=["y", "x"]) == T("f32[8,4]{R:(x,y)}")
    assert T("f32[8@x,4]").replace(reduced=["y"]) == T("f32[8@x,4]{R:y}")


@pytest.mark.parametrize(
    "dims, unreduced, reduced, err, needles",
    [
        (["x", None], (), ["x"], DuplicateAxisError, ["'x'", "reduced", "dimension 0"]),
        ([None, None], ["y"], ["y"], DuplicateAxisError, ["'y'", "reduced", "unreduced"]),
        ([None, None], (), ["y", "y"], DuplicateAxisError, ["'y'"]),
        ([None, None], (), ["q"], UnknownAxisError, ["'q'"]),
        ([None, None], (), 3, UnknownAxisError, ["reduced", "3"]),
    ],
)
def test_an_axis_is_at_most_one_of_sharded_unreduced_reduced(dims, unreduced, reduced, err, needles):
    with pytest.raises(err) as e:
        ShardingType((8, 4), "f32", dims, XY, unreduced, reduced)
    for n in needles:
        assert n in str(e.value)


# -- JAX interop -----------------------------------------------------------------------------------------
@given(st.data())
def test_named_sharding_and_typeof_round_trip(data):
    """A reduced type -> NamedSharding -> a placed array (by ``device_put`` and by JAX's reshard):
    ``type_of`` and ``jax.typeof``'s text give the type back."""
    mesh = data.draw(jax_meshes())
    t = data.draw(sharding_types(mesh, max_rank=2, unreduced=False, reduced=True, dtypes=("f32", "s32")))
    jm = mesh.to_jax()
    ns = to_named_sharding(t, jm)
    assert ns.spec.reduced == frozenset(t.reduced)
    assert from_named_sharding(ns, t.shape, t.dtype) == t
    with jax.set_mesh(jm):
        x = jax.device_put(jax.numpy.zeros(t.shape, numpy_dtype(t.dtype)), NamedSharding(jm, P()))
        for y in (jax.sharding.reshard(x, ns), jax.device_put(x, ns)):
            assert type_of(y) == t
            assert parse(str(jax.typeof(y)), mesh) == t
        seen = []
        jax.jit(lambda v: seen.append(type_of(v)) or v)(y)
        assert seen == [t]  # a tracer's type too


def test_partition_spec_of_a_reduced_type():
    assert to_partition_spec(T("f32[8@y,4]{U:x}")) == P("y", None, unreduced={"x"})
    assert to_partition_spec(T("f32[8@y,4]{R:x}")) == P("y", None, reduced={"x"})


# -- plans -----------------------------------------------------------------------------------------------
@FEW
@given(st.data())
def test_plans_between_reduced_types_are_the_data_plans(data):
    """Reduced axes move nothing: the steps are those of the plan between the data layouts, only
    the endpoints carry ``reduced``; the step typing still holds from the typed source."""
    mesh = data.draw(jax_meshes(max_devices=8))
    src = data.draw(sharding_types(mesh, max_rank=2, unreduced=True, reduced=True, dtypes=("f32",)))
    dst = data.draw(sharding_types(mesh, shape=src.shape, dtype="f32", unreduced=False, reduced=True))
    p = redistribute(src, dst)
    q = redistribute(src.without_reduced(), dst.without_reduced())
    assert (p.src, p.dst) == (src, dst)
    assert p.steps == q.steps and p.types == q.types
    assert p.recv_bytes == q.recv_bytes


@pytest.mark.parametrize(
    "src, dst, kinds",
    [
        ("f32[8,4]", "f32[8,4]{R:x}", []),
        ("f32[8,4]{R:x}", "f32[8,4]", []),
        ("f32[8,4]{U:x}", "f32[8,4]{R:x}", ["all_reduce"]),
        ("f32[8,4]{R:x}", "f32[8@x,4]", ["dynamic_slice"]),
        ("f32[8@y,4]{R:x}", "f32[8,4@y]{R:x}", ["all_to_all"]),
        ("f32[8,4]{U:(x,y)}", "f32[8@y,4]{R:x}", ["reduce_scatter", "all_reduce"]),
    ],
)
def test_reduced_plans_are_proved(src, dst, kinds):
    p = redistribute(src, dst, XY)
    assert [s.kind for s in p.steps] == kinds
    cert = p.verify()
    assert cert.ok and cert.src == src and cert.dst == dst


@settings(max_examples=8)
@given(st.data())
def test_random_reduced_plans_are_proved(data):
    mesh = data.draw(jax_meshes(max_devices=8))
    src = data.draw(sharding_types(mesh, max_rank=2, unreduced=True, reduced=True, dtypes=("f32",)))
    dst = data.draw(sharding_types(mesh, shape=src.shape, dtype="f32", unreduced=True, reduced=True))
    cert = redistribute(src, dst).verify()
    assert cert.ok and (cert.src, cert.dst) == (str(src), str(dst))


def test_a_plan_that_drops_a_pending_sum_is_refuted_even_if_the_destination_is_reduced():
    """``U:x`` does not mean ``R:x``: a plan claiming it with no step is refuted (the reduced
    endpoint is proved, not assumed)."""
    bogus = Plan(T("f32[8,4]{U:x}"), T("f32[8,4]{R:x}"), (), ())
    with pytest.raises(VerificationError, match="destination"):
        bogus.verify()


# -- the reverse-mode rule -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "src, dst, back",
    [
        ("f32[8,4]{U:x}", "f32[8,4]", ("f32[8,4]", "f32[8,4]{R:x}")),
        ("f32[8,4]", "f32[8,4]{R:x}", ("f32[8,4]{U:x}", "f32[8,4]")),
        ("f32[8,4]{U:x}", "f32[8,4]{R:x}", ("f32[8,4]{U:x}", "f32[8,4]{R:x}")),
        ("f32[8@x,4]", "f32[8,4@y]", ("f32[8,4@y]", "f32[8@x,4]")),
        ("f32[8,4]{U:(x,y)}", "f32[8@y,4]{R:x}", ("f32[8@y,4]{U:x}", "f32[8,4]{R:(x,y)}")),
    ],
)
def test_cotangent_move_is_the_reverse_move_with_unreduced_and_reduced_swapped(src, dst, back):
    assert cotangent_move(T(src), T(dst)) == (T(back[0]), T(back[1]))


def test_autotune_times_the_data_plans_typed_as_asked():
    tuned = autotune("f32[8,4]{U:(x,y)}", "f32[8@y,4]{R:x}", XY, top=2, reps=1)
    assert tuned.trials and all((t.plan.src, t.plan.dst) == (T("f32[8,4]{U:(x,y)}"), T("f32[8@y,4]{R:x}"))
                                for t in tuned.trials)
    assert tuned.trials[0].plan.steps == redistribute("f32[8,4]{U:(x,y)}", "f32[8@y,4]{R:x}", XY).steps
