"""``redistribute``: the entry point users call (docs/design.md section 5)."""

from __future__ import annotations

from typing import Any, overload

from redist.cost import CostModel
from redist.cross_mesh import CrossMeshPlan, cross_mesh_plan  # cross-mesh hook
from redist.errors import CostModelError, IncompatibleTypesError, UnsummableDtypeError
from redist.objective import HOW, Objective, as_objective
from redist.plan import Plan
from redist.profile import cost_model_for
from redist.reduced import plan_through_data
from redist.synth import cached_synthesize
from redist.tune_cache import cached_plan
from spmd_types import Mesh, ShardingType, parse
from spmd_types.layout import check_index_range
from spmd_types.placement import Placement  # cross-mesh hook

UNSUMMABLE_DTYPES = frozenset({"pred"})
"""Dtypes without addition in JAX collectives (``psum`` of bool raises inside JAX)."""

_JAX_HINTS = {
    "NamedSharding": "to move an array call redist.reshard(x, sharding); to plan from a sharding, "
    "convert it with spmd_types.jax_interop.from_named_sharding(sharding, shape, dtype)",
    "PartitionSpec": "to move an array call redist.reshard(x, spec); to plan from a spec, convert it "
    "with spmd_types.jax_interop.from_partition_spec(spec, shape, dtype, mesh)",
    "P": "to move an array call redist.reshard(x, spec); to plan from a spec, convert it "
    "with spmd_types.jax_interop.from_partition_spec(spec, shape, dtype, mesh)",  # PartitionSpec's class
    "ArrayImpl": "to move an array call redist.reshard(x, dst); its type is spmd_types.jax_interop.type_of(x)",
}


def _not_a_type(t: object, what: str) -> IncompatibleTypesError:
    name = type(t).__name__
    hint = _JAX_HINTS.get(name, _JAX_HINTS["ArrayImpl"] if "Tracer" in name else "")
    return IncompatibleTypesError(
        f"{what} must be a ShardingType or type text such as 'f32[8@x,4]', got {name}"
        + (f"; {hint}" if hint else "")
    )


def check_summable(s: ShardingType, d: ShardingType) -> None:
    """Refuse, at planning time, a pending sum of a dtype that cannot be added."""
    if s.dtype in UNSUMMABLE_DTYPES and (s.unreduced or d.unreduced):
        side = "source" if s.unreduced else "destination"
        raise UnsummableDtypeError(
            f"the {side} type {s if s.unreduced else d} has a pending sum (unreduced axes) of dtype "
            f"{s.dtype}, which cannot be summed; use an integer dtype (e.g. s8 or u8) for sums of "
            f"flags, or a type without unreduced axes"
        )


def as_type(t: ShardingType | str, mesh: Mesh | None, what: str) -> ShardingType:
    if isinstance(t, ShardingType):
        if mesh is not None and t.mesh != mesh:
            raise IncompatibleTypesError(f"{what} type {t} is on mesh {t.mesh}, not on {mesh}")
        return t
    if isinstance(t, str):
        if mesh is None:
            raise IncompatibleTypesError(f"{what} type {t!r} is text: pass the mesh to parse it on")
        return parse(t, mesh)
    if type(t).__name__ == "ShapedArray":  # jax.typeof(x): an abstract value carries its type
        from spmd_types.jax_interop import type_of_aval

        return as_type(type_of_aval(t), mesh, what)
    raise _not_a_type(t, what)


@overload
def redistribute(src: Placement, dst: Placement, mesh: Any = None, *, objective: Objective | str = ...,
                 cost_model: CostModel | None = None) -> CrossMeshPlan: ...  # cross-mesh hook
@overload
def redistribute(src: ShardingType | str, dst: ShardingType | str, mesh: Any = None, *,
                 objective: Objective | str = ..., cost_model: CostModel | None = None) -> Plan: ...
def redistribute(
    src: Any,
    dst: Any,
    mesh: Any = None,
    *,
    objective: Objective | str = Objective.MEASURED,
    cost_model: CostModel | None = None,
) -> Plan | CrossMeshPlan:
    """Plan the move of an array typed ``src`` to ``dst``: correct and within ``max(src, dst)``
    local bytes, ranked by ``objective`` (docs/design.md section 4.4). Deterministic and cached. Where an autotuning
    cache is in force (``REDIST_AUTOTUNE_CACHE``, ``redist.use_tune_cache``) and holds this move, its
    timed winner among the planner's candidates (docs/howto/autotune.md).

    Args:
        src, dst: ``ShardingType`` values or type text such as ``'f32[8@x,4]'``.
        mesh: needed for type text; ours, a ``jax.sharding.Mesh`` or an ``AbstractMesh``.
        objective: a ``redist.Objective`` or its name: ``"measured"`` (the default: least estimated
            time under the running backend's measured profile, bytes the tie-break), ``"bytes"``
            (least received bytes, so the transfer lower bound where it is attainable, then time)
            or ``"alpha-beta"`` (least time under the unmeasured alpha-beta model).
        cost_model: a ``CostModel`` to plan under instead (a calibration of your own,
            ``redist.profile.load_cost_model``; slow axes, ``CostModel.with_slow_axes``). Its own
            objective ranks the plans; an ``objective`` given beside it must be that one.

        Two ``spmd_types.placement.Placement`` values (a type and its device ids) instead plan a
        move between meshes over other devices: ``redist.cross_mesh_plan`` (docs/design.md 8.4).

    Returns:
        A ``Plan``; ``plan.objective`` names the objective it was ranked by. For placements, a
        ``CrossMeshPlan``.

    Raises:
        IncompatibleTypesError: ``src`` and ``dst`` differ in shape, dtype or mesh, or are not types.
        UnsummableDtypeError: a pending sum of a dtype JAX cannot add (``pred``).
        CostModelError: ``objective`` is not one of the three, ``cost_model`` is not a ``CostModel``
            instance, or its objective differs from an ``objective`` given beside it.
        SizeLimitError: a move of sizes past int64 (the planner's index math).
        ShardingTypeError: type text that does not parse or does not fit the mesh (a subclass).

    Examples:
        >>> from redist import redistribute
        >>> from spmd_types import Mesh
        >>> mesh = Mesh({"x": 2, "y": 4})
        >>> plan = redistribute("f32[1024@x,1024@y]", "f32[1024@y,1024@x]", mesh, objective="bytes")
        >>> plan.objective.value, plan.recv_bytes == plan.lower_bound_bytes
        ('bytes', True)
        >>> redistribute("f32[1024@x]", "f32[1024]", mesh).steps[0].kind
        'all_gather'
    """
    if isinstance(src, Placement) or isinstance(dst, Placement):  # cross-mesh hook (redist/cross_mesh.py)
        return cross_mesh_plan(src, dst)
    s, d = checked_pair(src, dst, mesh)
    cm = resolve_cost_model(objective, cost_model, s.mesh, objective_given=_given(objective))
    # reduced axes move as replicated data; a tuned winner where an autotuning cache is in force
    return plan_through_data(s, d, lambda a, b: cached_plan(a, b, cm) or cached_synthesize(a, b, cm))


def _given(objective: object) -> bool:
    """Whether ``objective`` was passed (anything but the default member itself)."""
    return objective is not Objective.MEASURED


def resolve_cost_model(objective: Any, cost_model: Any, mesh: Any = None, objective_given: bool = True) -> CostModel:
    """The model ``redistribute`` plans under: ``cost_model`` where given (a ``CostModel``
    instance whose objective agrees with ``objective`` if that was given), else
    ``cost_model_for(objective, mesh)``; anything else is a ``CostModelError`` naming the argument."""
    o = as_objective(objective)
    if cost_model is None:
        return cost_model_for(o, mesh)
    if not isinstance(cost_model, CostModel):
        raise CostModelError(_not_a_model(cost_model))
    if objective_given and cost_model.objective != o.value and not _measured_fallback(o, cost_model):
        raise CostModelError(f"objective={o.value!r} conflicts with cost_model, whose objective is "
                             f"{cost_model.objective!r}: pass one of them, or a cost model of that objective")
    return cost_model


def _measured_fallback(o: Objective, cm: CostModel) -> bool:
    """``measured`` asked where no profile ships: its model is the alpha-beta one (``cost_model_for``)."""
    return o is Objective.MEASURED and cm.objective == Objective.ALPHA_BETA.value and not cm.measured


def _not_a_model(cm: object) -> str:
    if isinstance(cm, str):
        return (f"cost_model={cm!r} is a string, not a CostModel: to choose an objective pass "
                f"objective={cm!r} instead ({HOW})")
    if isinstance(cm, type):
        return (f"cost_model={cm.__name__} is a class, not a CostModel instance: pass objective= "
                f"instead, or an instance such as redist.cost_model_for('bytes') ({HOW})")
    return (f"cost_model must be a redist.CostModel instance, got {type(cm).__name__}; pass objective= "
            f"instead ({HOW}), or build one with redist.cost_model_for / redist.profile.load_cost_model")


def checked_pair(src: ShardingType | str, dst: ShardingType | str, mesh: Any = None) -> tuple[ShardingType, ShardingType]:
    """``redistribute``'s arguments as two types of one move, or the typed error saying why not."""
    mesh = None if mesh is None else Mesh.coerce(mesh)
    s = as_type(src, mesh, "source")
    d = as_type(dst, mesh, "destination")
    if s.mesh != d.mesh:
        raise IncompatibleTypesError(f"source is on mesh {s.mesh} but destination on {d.mesh}")
    if s.shape != d.shape:
        raise IncompatibleTypesError(
            f"global shapes differ: source {list(s.shape)}, destination {list(d.shape)}; "
            f"redistribution does not reshape"
        )
    if s.dtype != d.dtype:
        raise IncompatibleTypesError(f"dtypes differ: source {s.dtype}, destination {d.dtype}")
    check_summable(s, d)
    if s != d:  # a move past int64 needs index math: SizeLimitError naming the dimension (moving nothing needs none)
        check_index_range(s)
        check_index_range(d)
    return s, d
