"""``reshard(x, dst)``: a drop-in for ``jax.sharding.reshard`` that runs our plans.

It reads the source type from ``x`` (its ``NamedSharding``, or its abstract value ``jax.typeof(x)``
while tracing), plans the move once per (source, destination) pair and runs the plan as one
``shard_map`` of JAX collectives (``redist.executor.apply_local``).

Why a primitive (``redist_reshard``) rather than a ``jax.custom_vjp``: JAX refuses forward-mode
differentiation of a ``custom_vjp`` function, and vmap of one would batch the ``shard_map`` body
(re-gathering a sharded batch dimension). A primitive states what the move is:

- linear, so its JVP is the same move on the tangent (``jax.jvp``, ``jax.linearize``);
- its transpose is the *reverse* move, planned by us (``jax.grad``, ``jax.vjp``);
- under ``jax.vmap`` it re-plans with the batch dimension inserted into both types, sharded as JAX
  shards it (``spmd_axis_name`` or the explicit axis the batch came on; replicated otherwise);
- it lowers (``jax.jit``) to the ``shard_map`` over the value's mesh and runs eagerly through
  ``redist.executor.compile_plan``.

Inside a user's ``shard_map`` the axes it made Manual are not part of the type: the value is the
manual block and ``reshard`` moves it over the remaining Explicit axes. Over all-manual axes the
value's global type is unknown to JAX; ``reshard_local(x, src, dst)`` is then the local-view form.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding, PartitionSpec

from redist.api import redistribute
from redist.cost import CostModel
from redist.errors import ExecutionError, IncompatibleTypesError
from redist.executor import apply_local, run_plan
from redist.plan import Plan, register_runner
from redist.profile import default_cost_model
from redist.transpose import cotangent_move
from spmd_types import Mesh, ShardingType, ShardingTypeError, parse
from spmd_types.errors import UnknownLayoutError
from spmd_types.jax_interop import (
    from_partition_spec,
    to_partition_spec,
    type_of,
    typed_mesh,
)
from spmd_types.memo import Scope, memo

__all__ = ["plan_for", "reshard", "reshard_local", "reshard_p", "run_traced"]


@memo(Scope.TYPE)
def plan_for(src: ShardingType, dst: ShardingType, cost_model: CostModel | None = None) -> Plan:
    """The plan ``reshard`` runs (cached: a traced function resharding twice plans once); the cost
    model defaults to ``redistribute``'s (fastest under the backend's measured profile)."""
    return redistribute(src, dst, cost_model=cost_model or default_cost_model(src.mesh))


# -- reading the source and destination ----------------------------------------------------------------


def _context_mesh() -> Any:
    """The abstract mesh of ``jax.set_mesh`` (or of the enclosing ``shard_map``), or ``None``."""
    m = jax.sharding.get_abstract_mesh()
    return None if m.empty else m


def _abstract(mesh: Any) -> Any:
    return getattr(mesh, "abstract_mesh", mesh)


def _jax_mesh_of(x: Any) -> Any:
    """The JAX mesh ``x`` is laid out on (concrete for arrays, abstract for tracers), or ``None``."""
    if isinstance(x, jax.core.Tracer):
        s = getattr(jax.typeof(x), "sharding", None)
    else:
        s = getattr(x, "sharding", None)
    return s.mesh if isinstance(s, NamedSharding) and not s.mesh.empty else None


def _dst_type(dst: Any, src: ShardingType, xmesh: Any) -> tuple[ShardingType, Any]:
    """(destination type, JAX mesh it names) from a NamedSharding, PartitionSpec or type text."""
    if isinstance(dst, NamedSharding):
        return from_partition_spec(dst.spec, src.shape, src.dtype, typed_mesh(dst.mesh)), dst.mesh
    jmesh = xmesh if xmesh is not None else _context_mesh()
    if isinstance(dst, PartitionSpec):
        if jmesh is None:
            raise UnknownLayoutError(
                f"destination {dst} is a PartitionSpec but neither x nor the context has a mesh: "
                f"pass NamedSharding(mesh, spec) or enter jax.set_mesh(mesh)"
            )
        return from_partition_spec(dst, src.shape, src.dtype, typed_mesh(jmesh)), jmesh
    if isinstance(dst, ShardingType):
        return dst, jmesh
    if isinstance(dst, str):
        return parse(dst, src.mesh), jmesh
    raise IncompatibleTypesError(
        f"reshard's destination must be a NamedSharding, a PartitionSpec, a ShardingType or type "
        f"text such as 'f32[8@x,4]'; got {type(dst).__name__}"
    )


def _source(x: Any, dst: Any) -> tuple[Any, ShardingType]:
    """(x, its type); a concrete array without a NamedSharding (one device, numpy) is first placed
    replicated on the destination's mesh, which is what ``jax.sharding.reshard`` does with it."""
    if isinstance(x, jax.core.Tracer) or isinstance(getattr(x, "sharding", None), NamedSharding):
        return x, type_of(x)
    jmesh = dst.mesh if isinstance(dst, NamedSharding) else jax.sharding.get_mesh()
    if jmesh.empty:
        raise UnknownLayoutError(
            f"x ({type(x).__name__}) is not laid out on a mesh and the destination names none; pass "
            f"NamedSharding(mesh, spec), or a PartitionSpec inside jax.set_mesh(mesh)"
        )
    x = jax.device_put(x, NamedSharding(jmesh, PartitionSpec()))
    return x, type_of(x)


def reshard(x: Any, dst: Any, *, cost_model: CostModel | None = None) -> Any:
    """``x`` laid out as ``dst`` (a ``NamedSharding``, a ``PartitionSpec`` on ``x``'s mesh or the
    ``jax.set_mesh`` mesh, or type text on ``x``'s mesh), moved by our plan.

    Works eagerly and under ``jax.jit``, ``jax.grad`` / ``jax.vjp``, ``jax.jvp``, ``jax.vmap`` and
    inside ``shard_map`` (over its non-manual axes). Planning errors (a pending sum of ``bool``,
    a mesh mismatch) are raised here, at the call, not inside JAX.
    """
    x, src = _source(x, dst)
    cm = cost_model or default_cost_model(src.mesh)
    d, dmesh = _dst_type(dst, src, _jax_mesh_of(x))
    if d.mesh != src.mesh:
        raise IncompatibleTypesError(
            f"x is on mesh {src.mesh} but the destination {dst} is on {d.mesh}; reshard does not "
            f"move arrays between meshes (use jax.device_put)"
        )
    plan = plan_for(src, d, cm)  # plan now: errors point at the caller
    return reshard_p.bind(x, plan=plan, amesh=_abstract(_jax_mesh_of(x) or dmesh))


def run_traced(plan: Plan, x: Any) -> Any:
    """``plan(x)`` for a tracer (``Plan.__call__`` under jit, grad, vmap...): checks ``x``'s type."""
    have = type_of(x)
    if have != plan.src:
        raise ExecutionError(f"the traced value is typed {have}, the plan's source is {plan.src}")
    return reshard_p.bind(x, plan=plan, amesh=_abstract(_jax_mesh_of(x)))


def reshard_local(x_local: Any, src: ShardingType | str, dst: ShardingType | str, mesh: Any = None) -> Any:
    """This device's block of ``dst`` from its block of ``src``: the local-view form, to call inside
    a ``shard_map`` whose manual axes include every axis of the types' mesh (``check_vma=False``).

    ``mesh`` (ours, a JAX ``Mesh`` or ``AbstractMesh``) defaults to the context mesh, which inside
    ``shard_map`` is the map's mesh. The cotangent of this form is JAX's transpose of the plan's
    collectives; use ``reshard`` on global arrays to get the planned reverse move.
    """
    if mesh is None:
        mesh = _context_mesh()
        if mesh is None and not isinstance(src, ShardingType):
            raise UnknownLayoutError("reshard_local needs a mesh: pass mesh=, or call it inside shard_map")
    m = None if mesh is None else Mesh.coerce(mesh)
    return apply_local(redistribute(src, dst, m), x_local)


# -- the primitive -------------------------------------------------------------------------------------

reshard_p = Primitive("redist_reshard")


def _spec(t: ShardingType) -> PartitionSpec:
    try:
        return to_partition_spec(t)
    except ShardingTypeError as e:
        raise IncompatibleTypesError(f"reshard's types must be expressible as PartitionSpecs: {e}") from None


def _abstract_eval(aval: Any, *, plan: Plan, amesh: Any) -> Any:
    return aval.update(sharding=NamedSharding(amesh, _spec(plan.dst)))


def _impl(x: Any, *, plan: Plan, amesh: Any) -> Any:
    if not isinstance(getattr(x, "sharding", None), NamedSharding):
        x = _place(x, plan, amesh)
    return run_plan(plan, x)


def _place(x: Any, plan: Plan, amesh: Any) -> Any:
    """A value JAX hands over unplaced (a NumPy constant from ``check_grads``, an instantiated zero
    cotangent) holds the global array: lay it out as the source on the context's devices."""
    cmesh = jax.sharding.get_mesh()
    if cmesh.empty or cmesh.abstract_mesh != amesh or plan.src.unreduced:
        raise UnknownLayoutError(
            f"reshard got an unplaced {type(x).__name__} for the source {plan.src}: place it with "
            f"jax.device_put(x, NamedSharding(mesh, spec)) or run under jax.set_mesh(mesh)"
        )
    return jax.device_put(x, NamedSharding(cmesh, _spec(plan.src)))


def _traced(x: Any, *, plan: Plan, amesh: Any) -> Any:
    """The plan as a ``shard_map`` over the (non-manual) axes of the value's mesh."""
    if not plan.steps:
        return x
    body = jax.shard_map(
        lambda b: apply_local(plan, b), mesh=amesh, in_specs=_spec(plan.src), out_specs=_spec(plan.dst),
        axis_names=set(plan.src.mesh.names), check_vma=False,
    )
    return body(x)


def _transpose(ct: Any, x: Any, *, plan: Plan, amesh: Any) -> Any:
    """The cotangent goes back by the reverse move (unreduced and reduced swapped), planned by us."""
    back = plan_for(*cotangent_move(plan.src, plan.dst), plan.cost_model)
    return [reshard_p.bind(ct, plan=back, amesh=amesh)]


def _batch(axis_data: Any, vals: Any, dims: Any, *, plan: Plan, amesh: Any) -> Any:
    """Re-plan with the batch dimension in both types: the source's from the batched value, the
    destination's as JAX's own ``reshard`` batches it (the vmap's explicit mesh axis, else none)."""
    (x,), (d,) = vals, dims
    if d is None:
        return reshard_p.bind(x, plan=plan, amesh=amesh), d
    bsrc = type_of(x) if isinstance(x, jax.core.Tracer) or hasattr(x, "sharding") else None
    if bsrc is None:  # pragma: no cover - batched values are arrays or tracers
        raise UnknownLayoutError(f"cannot read the layout of the batched value {x!r}")
    axes = getattr(axis_data, "explicit_mesh_axis", None)
    entry = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    dst = plan.dst
    bdst = ShardingType(
        bsrc.shape, dst.dtype, list(dst.dims[:d]) + [entry] + list(dst.dims[d:]), dst.mesh, dst.unreduced,
        dst.reduced,
    )
    return reshard_p.bind(x, plan=plan_for(bsrc, bdst, plan.cost_model), amesh=amesh), d


reshard_p.def_impl(_impl)
reshard_p.def_abstract_eval(_abstract_eval)
ad.deflinear2(reshard_p, _transpose)
batching.fancy_primitive_batchers[reshard_p] = _batch
mlir.register_lowering(reshard_p, mlir.lower_fun(_traced, multiple_results=False))


def _run(plan: Plan, x: Any) -> Any:
    """``plan(x)``: eagerly one compiled program; a tracer (under jit, grad, vmap...) goes through
    the ``redist_reshard`` primitive, so plans compose with JAX transformations."""
    if isinstance(x, jax.core.Tracer):
        return run_traced(plan, x)
    return run_plan(plan, x)


register_runner(_run)
