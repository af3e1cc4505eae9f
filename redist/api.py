"""``redistribute``: the entry point users call (docs/design.md section 5)."""

from __future__ import annotations

from typing import Any

from redist.cost import CostModel
from redist.errors import IncompatibleTypesError, UnsummableDtypeError
from redist.plan import Plan
from redist.profile import default_cost_model
from redist.synth import cached_synthesize
from redist.tune_cache import cached_plan
from spmd_types import Mesh, ShardingType, parse

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


def redistribute(
    src: ShardingType | str,
    dst: ShardingType | str,
    mesh: Any = None,
    *,
    cost_model: CostModel | None = None,
) -> Plan:
    """Plan the move of an array typed ``src`` to ``dst``: correct and within ``max(src, dst)``
    local bytes. By default the fastest such plan under the running backend's measured profile
    (``redist.profile.default_cost_model``), fewest bytes among equally fast ones;
    ``cost_model=CostModel(objective="bytes")`` gives the least traffic (the transfer bound) first.
    Deterministic and cached. Where an autotuning cache is in force (``REDIST_AUTOTUNE_CACHE``,
    ``redist.use_tune_cache``) and holds this move, its timed winner among the planner's candidates.

    ``mesh`` (needed for type text) may be ours, a ``jax.sharding.Mesh`` or an ``AbstractMesh``."""
    s, d = checked_pair(src, dst, mesh)
    cm = cost_model or default_cost_model(s.mesh)
    # autotuning cache hook (redist.tune_cache): a tuned winner where a cache file is in force
    return cached_plan(s, d, cm) or cached_synthesize(s, d, cm)


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
    return s, d
