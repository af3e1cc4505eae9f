"""``redist.reshard`` as a drop-in where user programs leave the common path: PRNG key arrays,
NumPy and Python inputs under ``jax.jit``, Auto and mixed meshes, ``auto_axes`` /
``explicit_axes`` regions, ``jax.custom_vjp`` and ``jax.lax.scan``, destinations on another mesh,
``redist.record()`` and the eager fast path.

Each case runs the same program with ``jax.sharding.reshard`` and with ``redist.reshard`` and
compares values, output sharding, abstract value (``jax.typeof``: spec, mesh and axis types),
gradients, and the class of error where JAX raises. Further programs users write around a reshard
are listed by name: ``SAME_AS_JAX`` (each behaves as with JAX) and ``DIFFERS_FROM_JAX`` (where and
how ours differs, each with its own test).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from test_executor import _expected_kinds

import redist
from redist import IncompatibleTypesError, redistribute
from redist.caches import clear_caches
from redist.hlo import parse_collectives
from spmd_types import ShardingTypeError
from spmd_types.errors import RankMismatchError, UnknownLayoutError
from spmd_types.jax_interop import to_partition_spec

E, A = AxisType.Explicit, AxisType.Auto


@cache
def mesh(kinds: tuple[AxisType, AxisType] = (E, E), shape: tuple[int, int] = (2, 4),
         names: tuple[str, str] = ("x", "y")) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, names, axis_types=kinds)


def arange(shape: tuple[int, ...], sharding: Any) -> jax.Array:
    return jax.device_put(jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape), sharding)


def same(a: Any, b: Any, exact: bool = True) -> None:
    """Equal abstract values (shape, dtype, weak type, spec, mesh with axis types), equal
    concrete shardings and equal values (key arrays: equal key data). ``exact=False`` for values
    computed after the move: XLA may sum in another order around another program."""
    assert jax.typeof(a) == jax.typeof(b), (jax.typeof(a), jax.typeof(b))
    if hasattr(a, "sharding") and not isinstance(a, jax.core.Tracer):
        assert a.sharding == b.sharding, (a.sharding, b.sharding)
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    if exact:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    else:
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def both(run: Callable[[Callable[..., Any]], Any]) -> tuple[Any, Any]:
    """``run`` with JAX's reshard and with ours."""
    return run(jax.sharding.reshard), run(redist.reshard)


def both_same(run: Callable[[Callable[..., Any]], Any], exact: bool = True) -> None:
    ref, ours = both(run)
    jax.tree.map(lambda a, b: same(a, b, exact), ours, ref)


def both_raise(run: Callable[[Callable[..., Any]], Any], error: type[Exception], match: str,
               typed: bool = True) -> None:
    """JAX raises ``error``; so do we: a typed error of that class, or (``typed=False``, a move
    handed to ``jax.sharding.reshard``) JAX's own."""
    with pytest.raises(error, match=match):
        run(jax.sharding.reshard)
    with pytest.raises(error, match=match) as ours:
        run(redist.reshard)
    assert isinstance(ours.value, ShardingTypeError) == typed, type(ours.value)


# -- pytrees ------------------------------------------------------------------------------------------


def test_pytrees_take_one_destination_or_a_tree_prefix_of_them() -> None:
    x = arange((8, 8), NamedSharding(mesh(), P("x", "y")))
    tree = {"a": x, "b": (x, np.ones((8, 4), np.float32)), "c": keys(P("x"))}
    with jax.set_mesh(mesh()):
        both_same(lambda r: r(tree, P("y")))
        both_same(lambda r: jax.jit(lambda t: r(t, {"a": P(None, "x"), "b": P("y"), "c": P()}))(tree))
        both_same(lambda r: r((x, x), (P("y"), NamedSharding(mesh(), P(None, ("x", "y"))))))
        both_raise(lambda r: r((x, x), (P("y"), P("x"), P())), ValueError, "reshard out_shardings")


# -- PRNG key arrays -----------------------------------------------------------------------------------


def keys(spec: P, n: int = 8) -> jax.Array:
    with jax.set_mesh(mesh()):
        return jax.device_put(jax.random.split(jax.random.key(0), n), spec)


@pytest.mark.parametrize("spec,dst", [(P("x"), P("y")), (P("x"), P(("y", "x"))), (P(("x", "y")), P()),
                                      (P(), P("x"))])
def test_key_arrays_move_as_their_key_data(spec: P, dst: P) -> None:
    k = keys(spec)
    with jax.set_mesh(mesh()):
        both_same(lambda r: r(k, dst))
        both_same(lambda r: jax.jit(lambda a: r(a, dst))(k))
        both_same(lambda r: r(k, NamedSharding(mesh(), dst)))
        # the keys are the same keys: the random numbers drawn from them agree
        both_same(lambda r: jax.jit(lambda a: jax.vmap(lambda q: jax.random.normal(q, (3,)))(r(a, dst)))(k))


def test_key_arrays_under_vmap_and_with_a_gradient_elsewhere() -> None:
    k = keys(P("x"))
    w = arange((8, 4), NamedSharding(mesh(), P("y")))
    with jax.set_mesh(mesh()):
        both_same(lambda r: jax.vmap(lambda q: r(q, P()))(k))
        loss = lambda r: (lambda a, q: jnp.sum(a * jax.vmap(lambda z: jax.random.normal(z, (4,)))(r(q, P("y")))))
        both_same(lambda r: jax.jit(jax.grad(loss(r)))(w, k))


def test_key_arrays_refuse_type_text_destinations() -> None:
    with pytest.raises(IncompatibleTypesError, match="PRNG key.*NamedSharding"):
        redist.reshard(keys(P("x")), "u32[8@y,2]")


def test_the_key_move_is_our_plan_on_the_key_data() -> None:
    k = keys(P("x"))
    with jax.set_mesh(mesh()), redist.record() as log:
        jax.jit(lambda a: redist.reshard(a, P("y")))(k)
    (src, dst, plan), = log.plans
    assert (str(src), str(dst)) == ("u32[8@x,2]", "u32[8@y,2]")
    assert plan == redistribute("u32[8@x,2]", "u32[8@y,2]", "x=2,y=4")


# -- NumPy and Python inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.arange(8, dtype=np.int32), np.ones((8, 4), np.float32), 3.0, 7])
def test_numpy_and_python_inputs_under_jit_are_placed_as_jax_places_them(value: Any) -> None:
    dst = P("x") if np.ndim(value) else P()
    with jax.set_mesh(mesh()):
        both_same(lambda r: jax.jit(lambda: r(value, dst))())
        both_same(lambda r: jax.jit(lambda a: a + r(value, dst))(jnp.zeros_like(jnp.asarray(value))))
        both_same(lambda r: r(value, dst))  # eagerly
    if np.ndim(value):
        both_same(lambda r: r(value, NamedSharding(mesh(), P(None, "y") if np.ndim(value) == 2 else P("y"))))


def test_auto_axes_in_the_destination_are_refused_as_jax_refuses_them() -> None:
    am = mesh((A, A))
    spec = NamedSharding(am, P("x"))
    both_raise(lambda r: r(np.arange(8), spec), ValueError, "Auto")
    with jax.set_mesh(am):
        both_raise(lambda r: jax.jit(lambda: r(np.arange(8), spec))(), ValueError, "Auto")
    xa = arange((8, 8), NamedSharding(am, P("x", "y")))
    both_raise(lambda r: r(xa, NamedSharding(am, P("y", "x"))), ValueError, "Auto")
    with jax.set_mesh(am):
        both_raise(lambda r: jax.jit(lambda a: r(a, P("y", "x")))(xa), ValueError, "Auto")
    mm = mesh((E, A))
    xm = arange((8, 8), NamedSharding(mm, P("x")))
    with jax.set_mesh(mm):
        both_raise(lambda r: jax.jit(lambda a: r(a, P("y")))(xm), ValueError, "Auto")


# -- Auto and mixed meshes, auto_axes / explicit_axes regions ------------------------------------------


def test_an_all_auto_mesh_goes_to_jax() -> None:
    am = mesh((A, A))
    xa = arange((8, 8), NamedSharding(am, P("x", "y")))
    both_same(lambda r: r(xa, NamedSharding(am, P())))
    with jax.set_mesh(am):
        both_same(lambda r: jax.jit(lambda a: r(a, P()) * 2)(xa))
        with redist.record() as log:
            jax.jit(lambda a: redist.reshard(a, P()) * 3)(xa)
    assert not log.plans and len(log.delegated) == 1


MIXED = [((E, A), P("x"), P(None, "x")), ((E, A), P(), P("x")), ((E, A), P("x"), P()),
         ((A, E), P("y"), P(None, "y")), ((A, E), P(None, "y"), P()), ((A, E), P(), P("y"))]


@pytest.mark.parametrize("kinds,src,dst", MIXED)
def test_mixed_meshes_plan_the_explicit_axes(kinds: tuple[AxisType, AxisType], src: P, dst: P) -> None:
    """The Explicit axis is ours to plan, the Auto one XLA's; the next JAX op (which checks the
    aval's mesh against the context's) runs, and so do gradients."""
    m = mesh(kinds)
    x = arange((8, 8), NamedSharding(m, src))
    w = arange((8, 8), NamedSharding(m, dst))
    with jax.set_mesh(m):
        both_same(lambda r: jax.jit(lambda a: r(a, dst) * 2)(x))
        both_same(lambda r: r(x, dst))
        both_same(lambda r: jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(r(a, dst)) * w)))(x))
        with redist.record() as log:
            jax.jit(lambda a: redist.reshard(a, dst) * 5)(x)
    (s, t, _), = log.plans
    explicit = "x" if kinds[0] == E else "y"
    assert s.mesh.names == t.mesh.names == (explicit,)  # typed over the Explicit axis only


def test_eager_gradients_on_a_mixed_mesh_with_a_unit_auto_axis() -> None:
    """Eagerly the primal runs through the jitted lowering whenever the plan's axes are not all of
    the mesh's, a size-1 Auto axis included."""
    m = mesh((E, A), (8, 1))
    x = arange((8, 8), NamedSharding(m, P("x")))
    with jax.set_mesh(m):
        both_same(lambda r: (r(x, P(None, "x")), jax.grad(lambda a: jnp.sum(r(a, P(None, "x")) ** 2))(x)))


def test_the_mixed_mesh_program_holds_the_plans_collectives() -> None:
    m = mesh((E, A))
    x = arange((8, 16), NamedSharding(m, P("x")))
    with jax.set_mesh(m):
        hlo = jax.jit(lambda a: redist.reshard(a, P(None, "x"))).lower(x).compile().as_text()
    plan = redistribute("f32[8@x,16]", "f32[8,16@x]", "x=2")
    assert Counter(parse_collectives(hlo).kinds()) == _expected_kinds(plan)


def test_inside_auto_axes_and_explicit_axes_regions() -> None:
    x = arange((8, 8), NamedSharding(mesh(), P("x", "y")))
    with jax.set_mesh(mesh()):
        both_same(lambda r: jax.jit(jax.sharding.auto_axes(lambda a: r(a, P("y")) * 2, axes="x",
                                                           out_sharding=P("y", None)))(x))
        both_same(lambda r: jax.jit(jax.sharding.auto_axes(lambda a: r(a, P(None, "y")) + 1, axes="x",
                                                           out_sharding=P(None, "y")))(x))
    am = mesh((A, A))
    xa = arange((8, 8), NamedSharding(am, P("x", "y")))
    with jax.set_mesh(am):
        both_same(lambda r: jax.jit(jax.sharding.explicit_axes(lambda a: r(a, P("y", "x")) * 2, axes=("x", "y"),
                                                               in_sharding=P("x", "y")))(xa))
        both_same(lambda r: jax.jit(jax.sharding.explicit_axes(lambda a: jnp.sin(r(a, P(None, "x"))), axes="x",
                                                               in_sharding=P("x", None)))(xa))


# -- custom_vjp and scan -------------------------------------------------------------------------------


def test_inside_custom_vjp() -> None:
    x = arange((8, 8), NamedSharding(mesh(), P("x", "y")))

    def run(r: Callable[..., Any]) -> Any:
        @jax.custom_vjp
        def f(a: Any) -> Any:
            return r(a, P("y", "x")) * 2

        f.defvjp(lambda a: (r(a, P("y", "x")) * 2, None), lambda _, g: (r(g * 2, P("x", "y")),))
        loss = lambda a: jnp.sum(jnp.sin(f(a)))
        return jax.jit(loss)(x), jax.jit(jax.grad(loss))(x), jax.grad(loss)(x)

    with jax.set_mesh(mesh()):
        both_same(run)


def test_inside_a_scanned_minibatch_loop() -> None:
    xs = arange((4, 8, 8), NamedSharding(mesh(), P(None, "x", "y")))
    w = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)

    def run(r: Callable[..., Any]) -> Any:
        def body(c: Any, b: Any) -> Any:
            y = r(b, P("y", "x")) * r(w, P("y", "x"))  # a NumPy constant inside the body too
            return c + jnp.sum(jnp.sin(y)), r(y, P(None, "y"))

        loss = lambda s: jax.lax.scan(body, jnp.float32(0), s)
        return jax.jit(loss)(xs), jax.jit(jax.grad(lambda s: loss(s)[0]))(xs)

    with jax.set_mesh(mesh()):
        both_same(run, exact=False)


# -- another mesh over the same devices -----------------------------------------------------------------


OTHER_MESHES = [  # (source spec on x=2,y=4; destination mesh shape, names, spec; eagerly viewed and planned?)
    (P("x", "y"), (4, 2), ("a", "b"), P("a", "b"), False),  # a = x and the major half of y: a sub-axis
    (P("x", "y"), (4, 2), ("a", "b"), P("b", "a"), False),
    (P("x", "y"), (8, 1), ("z", "w"), P("z"), False),
    (P("x", "y"), (2, 4), ("y", "x"), P("x", "y"), True),  # the names swapped: x's blocks are f32[8@y,8@x] there
    (P(), (4, 2), ("a", "b"), P("b", "a"), True),  # replicated is replicated on any mesh
    (P(("x", "y")), (8, 1), ("z", "w"), P(None, "z"), True),  # (x,y) is z, position for position
    (P("x"), (2, 4), ("p", "q"), P("q"), True),
]


@pytest.mark.parametrize("src,shape,names,spec,viewed", OTHER_MESHES)
def test_a_destination_on_another_mesh(src: P, shape: tuple[int, int], names: tuple[str, str], spec: P,
                                       viewed: bool) -> None:
    """Where x's blocks are a type on the other mesh (same device list), x is seen as that type, no
    copy, and our plan moves it there: eagerly, and under jax.jit inside jax.set_mesh (the context
    names the tracer's devices); otherwise, and under jax.jit with no mesh set, JAX's reshard."""
    x = arange((8, 8), NamedSharding(mesh(), src))
    other = NamedSharding(mesh((E, E), shape, names), spec)
    both_same(lambda r: r(x, other))
    both_same(lambda r: jax.jit(lambda a: r(a, other))(x))
    with jax.set_mesh(mesh()):
        both_same(lambda r: jax.jit(lambda a: r(a, other))(x))
        ct = arange((8, 8), other)  # the cotangent goes back from the other mesh by the reverse move
        both_same(lambda r: jax.jit(lambda a, c: jax.vjp(lambda v: r(v, other), a)[1](c))(x, ct))
    with redist.record() as log:
        redist.reshard(x, other)
        jax.jit(lambda a: redist.reshard(a, other))(x)
        with jax.set_mesh(mesh()):
            jax.jit(lambda a: redist.reshard(a, other))(x)
    assert len(log.entries) == 3 and log.entries[1].plan is None
    for entry in (log.entries[0], log.entries[2]):
        assert (entry.plan is not None) == viewed
        if viewed:
            assert entry.plan.src.mesh.names == names and entry.dst == str(entry.plan.dst)
        else:
            assert entry.src == f"float32[8{'@x' if 'x' in str(src) else ''},8{'@y' if src == P('x', 'y') else ''}]"
            full = P(*spec, *[None] * (2 - len(spec)))
            assert entry.dst == f"{full} on mesh {{{names[0]}={shape[0]},{names[1]}={shape[1]}}}"
    assert log.entries[0].plan == log.entries[2].plan  # the same plan eagerly and under jit


@pytest.mark.parametrize("src,shape,names,spec", [c[:4] for c in OTHER_MESHES if c[4]])
def test_a_view_under_jit_compiles_to_the_plans_collectives_alone(src: P, shape: tuple[int, int],
                                                                   names: tuple[str, str], spec: P) -> None:
    """The view onto the other mesh is a relabel: the compiled program holds exactly the collectives
    of the plan on the destination mesh, and none at all where the view is the destination."""
    x = arange((8, 8), NamedSharding(mesh(), src))
    other = NamedSharding(mesh((E, E), shape, names), spec)
    with jax.set_mesh(mesh()), redist.record() as log:
        f = jax.jit(lambda a: redist.reshard(a, other))
        hlo = f.lower(x).compile().as_text() or ""
    (entry,) = log.entries
    assert entry.plan is not None
    assert Counter(parse_collectives(hlo).kinds()) == _expected_kinds(entry.plan)
    view = NamedSharding(other.mesh, P(*to_partition_spec(entry.plan.src)))
    with jax.set_mesh(mesh()):
        alone = jax.jit(lambda a: redist.reshard(a, view)).lower(x).compile().as_text() or ""
    assert parse_collectives(alone).kinds() == ()


def test_under_jit_the_context_mesh_names_the_tracers_devices() -> None:
    """Why the view under jax.jit trusts jax.set_mesh: jit refuses an argument on devices other
    than the context mesh's, with JAX's reshard and with ours, whichever destination is asked."""
    x = arange((8, 8), NamedSharding(mesh(), P("x", "y")))
    order = np.array(jax.devices()[::-1]).reshape(2, 4)
    reverse = jax.sharding.Mesh(order, ("x", "y"), axis_types=(E, E))
    other = NamedSharding(jax.sharding.Mesh(order, ("y", "x"), axis_types=(E, E)), P("x", "y"))
    with jax.set_mesh(reverse):
        both_raise(lambda r: jax.jit(lambda a: r(a, other))(x), ValueError, "incompatible devices", typed=False)


def test_other_devices_move_as_device_put_does() -> None:
    """JAX's reshard refuses other devices (or the same in another order); ours moves them with
    a cross-mesh plan, giving what ``jax.device_put`` gives."""
    x = arange((8, 8), NamedSharding(mesh(), P("x", "y")))
    small = NamedSharding(mesh((E, E), (2, 2)), P("y"))
    reverse = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"), axis_types=(E, E))
    for other in (small, NamedSharding(reverse, P("y"))):
        with pytest.raises(ValueError, match="devices"):
            jax.sharding.reshard(x, other)
        got, want = redist.reshard(x, other), jax.device_put(x, other)
        assert got.sharding.is_equivalent_to(want.sharding, 2)
        for a, b in zip(got.addressable_shards, want.addressable_shards):
            assert a.device == b.device and np.array_equal(np.asarray(a.data), np.asarray(b.data))


# -- recording what ran ---------------------------------------------------------------------------------


def test_record_lists_the_plans_run_inside_jit_grad_and_vmap() -> None:
    x = arange((8, 16), NamedSharding(mesh(), P("x", "y")))
    with jax.set_mesh(mesh()), redist.record() as log:
        f = jax.jit(lambda a: redist.reshard(a, P("y", "x")) * 2)
        f(x)
        f(x)  # a cached trace: not traced again, not recorded again
        jax.jit(jax.grad(lambda a: jnp.sum(redist.reshard(a, P(None, "x")))))(x)
        with redist.record() as inner:
            jax.vmap(lambda a: redist.reshard(a, P("x")), in_axes=1)(x)
    pairs = [(str(s), str(d)) for s, d, _ in log.plans]
    assert pairs == [("f32[8@x,16@y]", "f32[8@y,16@x]"),
                     ("f32[8@x,16@y]", "f32[8,16@x]"), ("f32[8,16@x]", "f32[8@x,16@y]"),  # forward, reverse
                     ("f32[8@x]", "f32[8@x]"), ("f32[8@x,16@y]", "f32[8@x,16@y]")]  # vmap: per example, batched
    assert [p for _, _, p in log.plans] == [e.plan for e in log.entries]
    assert inner.entries == log.entries[-2:]
    assert log.plans[0][2] == redistribute("f32[8@x,16@y]", "f32[8@y,16@x]", "x=2,y=4")
    assert "all_to_all" in str(log) or "permute" in str(log) or "exchange" in str(log)


def test_record_sees_eager_calls_on_the_fast_path() -> None:
    x = arange((8, 16), NamedSharding(mesh(), P("x", "y")))
    dst = NamedSharding(mesh(), P("y", "x"))
    redist.reshard(x, dst)  # warm
    with redist.record() as log:
        redist.reshard(x, dst)
        redist.reshard(x, dst)
    assert len(log.plans) == 2 and log.plans[0] == log.plans[1]
    redist.reshard(x, dst)
    assert len(log.entries) == 2  # the block is closed


# -- the eager fast path --------------------------------------------------------------------------------


def test_the_eager_fast_path_agrees_with_the_primitive_and_keys_on_the_context() -> None:
    from redist.jax_reshard import _fast_entry, reshard_p

    x = arange((8, 16), NamedSharding(mesh(), P("x", "y")))
    dst = NamedSharding(mesh(), P("y", "x"))
    clear_caches("plans")
    first = redist.reshard(x, dst)
    hits = _fast_entry.cache_info().hits
    again = redist.reshard(x, dst)
    assert _fast_entry.cache_info().hits == hits + 1
    plan = redistribute("f32[8@x,16@y]", "f32[8@y,16@x]", "x=2,y=4")
    by_primitive = reshard_p.bind(x, plan=plan, amesh=mesh().abstract_mesh)
    for y in (first, again):
        same(y, by_primitive)
        same(y, jax.sharding.reshard(x, dst))
    # a PartitionSpec is read on the context mesh: another context is another entry
    swapped = mesh((E, E), (2, 4), ("y", "x"))
    xs = arange((8, 16), NamedSharding(swapped, P("x", "y")))
    for m, a in ((mesh(), x), (swapped, xs), (mesh(), x)):
        with jax.set_mesh(m):
            same(redist.reshard(a, P("y")), jax.sharding.reshard(a, P("y")))
    with jax.set_mesh(mesh()):  # x's mesh is not the context's: the move goes to JAX's reshard
        both_same(lambda r: r(xs, P("y")))


def test_plan_call_runs_the_cached_executable() -> None:
    plan = redistribute("f32[8@x,16@y]", "f32[8@y,16@x]", "x=2,y=4")
    x = arange((8, 16), NamedSharding(mesh(), P("x", "y")))
    same(plan(x), jax.sharding.reshard(x, NamedSharding(mesh(), P("y", "x"))))
    same(plan(x), jax.jit(plan)(x))


def test_plan_x_runs_the_same_compiled_program_by_a_short_path(capsys: pytest.CaptureFixture[str]) -> None:
    """``plan(x)`` calls the very executable ``redist.executor._executable`` compiled (its C++
    function), and a warm call adds 4 function calls to it, as ``cProfile`` counts them
    (``Plan.__call__``, the runner, two dictionary lookups and an ``id``, less
    ``Compiled.__call__``). Reading ``x.sharding``, ``x.shape`` and ``x.dtype`` instead
    would add their three Python properties. The study runs at its smallest size."""
    from benchmarks.per_call import CASES
    from benchmarks.studies import per_call_path
    from redist.executor import _by_plan, _executable

    x = arange((64, 64), NamedSharding(mesh(), P("x")))
    plan = redistribute("f32[64@x,64]", "f32[64,64]", "x=2,y=4")
    plan(x).block_until_ready()
    exe = _executable(plan, x.sharding, x.shape, x.dtype)
    held = _by_plan()[id(plan)]
    assert held[0] is plan and held[1][(x.sharding, x.shape, x.dtype)] is exe._call  # type: ignore[attr-defined]
    gather = [c for c in CASES if c.name == "gather"]
    assert [per_call_path.python_calls(c) for c in gather] == [4]
    assert per_call_path.main(["--reps", "2", "--cases", "gather"]) == 0
    assert "| gather |" in capsys.readouterr().out


def test_the_per_call_benchmark_runs_and_leaves_the_caches_real(capsys: pytest.CaptureFixture[str]) -> None:
    """At its smallest size (no figure is asserted: the benchmark is for the clock)."""
    from benchmarks import per_call

    assert per_call.main(["--reps", "2", "--cases", "gather"]) == 0
    text = capsys.readouterr().out
    assert "| gather | `f32[64@x,64] -> f32[64,64]` | yes |" in text  # both compile one all-gather
    assert text.count("| gather |") == 3 and "python -m benchmarks.per_call --reps 2 --cases gather" in text
    # the Python-side table swaps the executables for the identity: afterwards they are real again
    x = arange((64, 64), NamedSharding(mesh(), P("x")))
    dst = NamedSharding(mesh(), P())
    same(redist.reshard(x, dst), jax.sharding.reshard(x, dst))
    plan = redistribute("f32[64@x,64]", "f32[64,64]", "x=2,y=4")
    same(plan(x), jax.sharding.reshard(x, dst))


def test_importing_redist_does_not_start_the_backend() -> None:
    """``jax.distributed.initialize`` must come before the backend starts: ``import redist`` (and
    its eager fast paths' type tests) must not start it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = "import redist\nfrom jax._src import xla_bridge\nprint(xla_bridge.backends_are_initialized())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.parametrize("bad", ["bytes", redist.CostModel, {"objective": "bytes"}, 3])
def test_a_misused_cost_model_is_a_typed_error_naming_it(bad: Any) -> None:
    x = arange((8, 8), NamedSharding(mesh(), P("x")))
    for args in ((x, NamedSharding(mesh(), P("y"))), (np.ones((8, 8), np.float32), NamedSharding(mesh(), P("y")))):
        with pytest.raises(IncompatibleTypesError, match="cost_model.*CostModel"):
            redist.reshard(*args, cost_model=bad)


# -- destinations as JAX reads them ------------------------------------------------------------------------


def test_a_partition_spec_with_no_mesh_set_is_refused_as_jax_refuses_it() -> None:
    """Outside ``jax.set_mesh`` a ``PartitionSpec`` names no mesh: JAX raises a ``ValueError`` telling
    the user to pass a ``NamedSharding`` or set a mesh; so do we (eagerly, under jit, NumPy input)."""
    x = arange((8, 8), NamedSharding(mesh(), P("x")))
    both_raise(lambda r: r(x, P("y")), ValueError, "NamedSharding.*jax.set_mesh")
    both_raise(lambda r: jax.jit(lambda a: r(a, P("y")))(x), ValueError, "NamedSharding.*jax.set_mesh")
    both_raise(lambda r: r(np.ones(8, np.float32), P("x")), ValueError, "NamedSharding.*jax.set_mesh")
    with jax.set_mesh(mesh()):
        redist.reshard(x, P("y"))  # the fast path's entry for this context
    both_raise(lambda r: r(x, P("y")), ValueError, "jax.set_mesh")


TRAILING = [P("x", "y", None), P("x", None, None), P(None, None, None), P(None, "y", None, None)]


@pytest.mark.parametrize("spec", TRAILING, ids=str)
def test_none_entries_past_the_rank_are_dropped_as_jax_drops_them(spec: P) -> None:
    x = arange((8, 8), NamedSharding(mesh(), P("x")))
    with jax.set_mesh(mesh()):
        both_same(lambda r: r(x, spec))
        both_same(lambda r: jax.jit(lambda a: r(a, spec))(x))
        both_same(lambda r: r([x, x], spec))
    both_same(lambda r: r(x, NamedSharding(mesh(), spec)))
    with jax.set_mesh(mesh()):  # key arrays: the spec is the key array's, the key data's dimension is ours
        both_same(lambda r: r(keys(P("x"), n=8).reshape(2, 4), spec))


def test_a_sharded_entry_past_the_rank_is_a_typed_error() -> None:
    """JAX 0.10.2 fails an internal assertion (``AssertionError: (2, P('x', None, 'y'))``) on a
    sharded entry past the array's rank, and on ``P('x')`` for a 0-d array; ours names the spec
    and the rank (``RankMismatchError``, a ``ValueError``)."""
    x = arange((8, 8), NamedSharding(mesh(), P("x")))
    s = jax.device_put(np.float32(3), NamedSharding(mesh(), P()))
    with jax.set_mesh(mesh()):
        for a, spec in ((x, P("x", None, "y")), (s, P("x"))):
            with pytest.raises(AssertionError):
                jax.sharding.reshard(a, spec)
            with pytest.raises(RankMismatchError, match=f"{len(spec)} entries.*rank {a.ndim}"):
                redist.reshard(a, spec)


def test_moves_that_move_nothing_give_jax_s_sharding() -> None:
    """``P('x')`` on a rank-2 array placed as ``P('x')``: JAX's result is laid out as ``P('x', None)``
    (an equal sharding is a requirement of ``jax.jit`` caches keyed on it); ours too, eagerly
    (the fast path and the primitive) and under jit, with the same buffers."""
    x = arange((8, 8), NamedSharding(mesh(), P("x")))
    with jax.set_mesh(mesh()):
        for dst in (P("x"), P("x", None), NamedSharding(mesh(), P("x"))):
            both_same(lambda r, d=dst: r(x, d))
            both_same(lambda r, d=dst: r({"a": x}, d))
            both_same(lambda r, d=dst: jax.jit(lambda a: r(a, d))(x))
    y = redist.reshard(x, NamedSharding(mesh(), P("x")))
    assert [s.data.unsafe_buffer_pointer() for s in y.addressable_shards] == \
        [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]


@pytest.mark.parametrize("spec", [P("y", reduced={"x"}), P(None, unreduced={"x"}), P(reduced={"x", "y"})],
                         ids=["y-reduced-x", "unreduced-x", "reduced-x-y"])  # str(P) orders a set by hash
def test_key_arrays_with_reduced_or_unreduced_axes_are_refused_as_jax_refuses_them(spec: P) -> None:
    """JAX 0.10.2 cannot hold a key array with reduced or unreduced axes (``jax.random.wrap_key_data``
    raises a ``ValueError``); ours raises a typed ``ValueError`` naming the axes and what to drop."""
    k = keys(P("x"))
    with jax.set_mesh(mesh()):
        both_raise(lambda r: r(k, spec), ValueError, "reduced")
        both_raise(lambda r: jax.jit(lambda a: r(a, spec))(k), ValueError, "reduced")
        with pytest.raises(IncompatibleTypesError, match=r"key array.*\['x'.*drop (un)?reduced="):
            redist.reshard(k, spec)


# -- further programs users write: which behave as JAX does ---------------------------------------------
#
# Every entry of SAME_AS_JAX gives the same values, shardings and abstract values with both
# implementations (eagerly or under jit as written). Where ours differs, DIFFERS_FROM_JAX says how.

def _placed_by_device_put(spec: P) -> jax.Array:
    with jax.set_mesh(mesh()):
        return jax.device_put(np.arange(32, dtype=np.float32).reshape(4, 8), spec)


def _of(dtype: Any) -> jax.Array:
    return jax.device_put(jnp.arange(64).reshape(8, 8).astype(dtype), NamedSharding(mesh(), P("x")))


def _from_callback() -> jax.Array:
    whole = np.arange(64, dtype=np.float32).reshape(8, 8)
    return jax.make_array_from_callback((8, 8), NamedSharding(mesh(), P("x", "y")), lambda i: whole[i])


def _x() -> jax.Array:
    return arange((8, 8), NamedSharding(mesh(), P("x")))


def _cond(r: Callable[..., Any]) -> Any:
    f = lambda a, p: jax.lax.cond(p, lambda b: r(b, P("y")) * 2, lambda b: r(b, P("y")) + 1, a)
    g = jax.grad(lambda a: jnp.sum(jax.lax.cond(True, lambda b: r(b, P(None, "y")) ** 2, lambda b: r(b, P(None, "y")), a)))
    return jax.jit(f)(_x(), True), jax.jit(f)(_x(), False), jax.jit(g)(_x())


def _fori(r: Callable[..., Any]) -> Any:
    body = lambda i, b: r(jnp.sin(r(b, P("y"))), P("x"))
    return (jax.jit(lambda a: jax.lax.fori_loop(0, 3, body, a))(_x()),
            jax.jit(jax.grad(lambda a: jnp.sum(jax.lax.fori_loop(0, 3, body, a))))(_x()))


SAME_AS_JAX: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "device_put P() to P(None, x)": lambda r: r(_placed_by_device_put(P()), P(None, "x")),
    "device_put P(None, x) to P()": lambda r: r(_placed_by_device_put(P(None, "x")), P()),
    "device_put P(None, x) to P(y), jit": lambda r: jax.jit(lambda a: r(a, P("y")))(_placed_by_device_put(P(None, "x"))),
    "0-d to P()": lambda r: r(jax.device_put(np.float32(3), P()), P()),
    "0-d to P(), jit": lambda r: jax.jit(lambda a: r(a, P()))(jax.device_put(np.float32(3), P())),
    "0-d to a pending sum": lambda r: jax.jit(lambda a: r(r(a, P(unreduced={"x"})), P()))(jax.device_put(np.float32(3), P())),
    "bf16": lambda r: (r(_of(jnp.bfloat16), P(None, "y")), jax.jit(lambda a: r(a, P("y", "x")))(_of(jnp.bfloat16))),
    "bf16 pending sum": lambda r: jax.jit(lambda a: r(r(a, P(unreduced={"y"})), P("y")))(_of(jnp.bfloat16)),
    "int8": lambda r: (r(_of(jnp.int8), P(None, "y")), jax.jit(lambda a: r(a, P(reduced={"y"})))(_of(jnp.int8))),
    "int8 pending sum": lambda r: jax.jit(lambda a: r(r(a, P(unreduced={"y"})), P()))(_of(jnp.int8)),
    "bool": lambda r: (r(_of(jnp.bool_), P(None, "y")), jax.jit(lambda a: r(a, P("y", "x")))(_of(jnp.bool_))),
    "bool reduced": lambda r: r(_of(jnp.bool_), P(reduced={"y"})),
    "donated input": lambda r: jax.jit(lambda a: r(a, P("y")), donate_argnums=0)(_x()),
    "make_array_from_callback": lambda r: (r(_from_callback(), P("y", "x")),
                                           jax.jit(lambda a: r(a, P(None, "x")))(_from_callback())),
    "pytree under jit": lambda r: jax.jit(lambda t: r(t, {"a": P(None, "x"), "b": [P("y"), P()]}))(
        {"a": _x(), "b": [_x(), _from_callback()]}),
    "jax.remat": lambda r: jax.jit(jax.grad(jax.remat(lambda a: jnp.sum(jnp.sin(r(a, P("y")))))))(_x()),
    "nested jit": lambda r: jax.jit(lambda a: jax.jit(lambda b: r(b, P("y")) * 2)(a))(_x()),
    "lax.cond branches and their gradient": _cond,
    "lax.fori_loop and its gradient": _fori,
    "complex64 and its gradient": lambda r: (r(_of(jnp.complex64) * 1j, P("y", "x")), jax.jit(jax.grad(
        lambda a: jnp.sum(jnp.abs(r(a, P("y"))) ** 2)))(_of(jnp.complex64))),
    "jvp of grad (Hessian-vector)": lambda r: jax.jit(lambda a: jax.jvp(jax.grad(
        lambda b: jnp.sum(jnp.sin(r(b, P("y"))))), (a,), (a,))[1])(_x()),
    "jax.linearize": lambda r: jax.linearize(lambda a: r(a, P("y")) * 2, _x())[1](_x()),
    "lax.map": lambda r: jax.jit(lambda a: jax.lax.map(lambda b: r(b, P("y")), a))(
        jax.device_put(jnp.arange(64.0).reshape(2, 4, 8), NamedSharding(mesh(), P(None, "x")))),
    "jax.checkpoint with a policy": lambda r: jax.jit(jax.grad(jax.checkpoint(
        lambda a: jnp.sum(jnp.sin(r(a, P("y")))), policy=jax.checkpoint_policies.nothing_saveable)))(_x()),
    "a list of Python floats": lambda r: r([1.0, 2.0], P()),
    "lax.while_loop": lambda r: jax.jit(lambda a: jax.lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, r(r(c[1], P("y")), P("x"))), (0, a)))(_x()),
}

DIFFERS_FROM_JAX = {
    "a pending sum of bool (P(unreduced=...) on a bool array)":
        "JAX types it; ours raises UnsummableDtypeError at the call (summing flags is not defined; use s8/u8)",
    "a sharded PartitionSpec entry past the rank (and P('x') on a 0-d array)":
        "JAX fails an internal assertion; ours raises RankMismatchError naming the spec and the rank",
    "key arrays to reduced or unreduced axes": "both raise a ValueError; ours names the axes to drop",
}


@pytest.mark.parametrize("name", SAME_AS_JAX)
def test_further_user_programs_behave_as_with_jax(name: str) -> None:
    with jax.set_mesh(mesh()):
        both_same(SAME_AS_JAX[name], exact=False)


def test_a_pending_sum_of_bool_is_refused_where_jax_types_it() -> None:
    with jax.set_mesh(mesh()):
        assert str(jax.typeof(jax.sharding.reshard(_of(jnp.bool_), P(unreduced={"y"})))) == "bool[8,8]{U:y}"
        with pytest.raises(redist.UnsummableDtypeError, match="pred.*s8"):
            redist.reshard(_of(jnp.bool_), P(unreduced={"y"}))


def test_weak_typed_values_stay_weak_as_in_jax() -> None:
    """A weak-typed array (a Python scalar's type, ``~float32``) keeps its weak type through JAX's
    reshard, eagerly and under jit; through ours too (eagerly it runs the jitted lowering)."""
    with jax.set_mesh(mesh()):
        weak = jax.jit(lambda: jnp.full((8, 8), 2.0))()
        assert jax.typeof(weak).weak_type
        for dst in (P("x"), P(None, "y"), P()):
            both_same(lambda r, d=dst: r(weak, d))
            both_same(lambda r, d=dst: jax.jit(lambda a: r(a, d) * 3)(weak))


def test_unconstrained_on_an_explicit_mesh_is_refused_as_jax_refuses_it() -> None:
    x = _x()
    with jax.set_mesh(mesh()):
        both_raise(lambda r: r(x, P("y", P.UNCONSTRAINED)), ValueError, "UNCONSTRAINED")
        with pytest.raises(UnknownLayoutError, match="only Auto axes do: give an axis or None"):
            redist.reshard(x, P("y", P.UNCONSTRAINED))


def test_zero_size_arrays_go_to_jax() -> None:
    """No sharding type has a zero-size dimension, and nothing moves: JAX's reshard lays it out."""
    with jax.set_mesh(mesh()):
        empty = jax.device_put(jnp.zeros((0, 8)), P())
        for run in (lambda r: r(empty, P(None, "y")), lambda r: jax.jit(lambda a: r(a, P(None, "y")))(empty)):
            ref, ours = both(run)
            assert jax.typeof(ours) == jax.typeof(ref) and ours.sharding == ref.sharding and ours.shape == (0, 8)
        with redist.record() as log:
            redist.reshard(empty, P(None, "y"))
    assert len(log.delegated) == 1


def test_eval_shape_gives_jax_s_abstract_value() -> None:
    x = _x()
    with jax.set_mesh(mesh()):
        ref, ours = both(lambda r: jax.eval_shape(lambda a: r(a, P("y", "x")), x))
    assert ours == ref and str(ours.sharding.spec) == str(ref.sharding.spec)
