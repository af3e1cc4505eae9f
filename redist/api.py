"""``redistribute``: the entry point users call (DESIGN.md section 5)."""

from __future__ import annotations

from redist.cost import CostModel
from redist.errors import IncompatibleTypesError
from redist.plan import Plan
from redist.profile import default_cost_model
from redist.synth import cached_synthesize
from spmd_types import Mesh, ShardingType, parse


def as_type(t: ShardingType | str, mesh: Mesh | None, what: str) -> ShardingType:
    if isinstance(t, ShardingType):
        if mesh is not None and t.mesh != mesh:
            raise IncompatibleTypesError(f"{what} type {t} is on mesh {t.mesh}, not on {mesh}")
        return t
    if isinstance(t, str):
        if mesh is None:
            raise IncompatibleTypesError(f"{what} type {t!r} is text: pass the mesh to parse it on")
        return parse(t, mesh)
    raise IncompatibleTypesError(f"{what} must be a ShardingType or type text, got {type(t).__name__}")


def redistribute(
    src: ShardingType | str,
    dst: ShardingType | str,
    mesh: Mesh | None = None,
    *,
    cost_model: CostModel | None = None,
) -> Plan:
    """Plan the move of an array typed ``src`` to ``dst``: correct and within ``max(src, dst)``
    local bytes. By default the fastest such plan under the running backend's measured profile
    (``redist.profile.default_cost_model``), fewest bytes among equally fast ones;
    ``cost_model=CostModel(objective="bytes")`` gives the least traffic (the transfer bound) first.
    Deterministic and cached."""
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
    return cached_synthesize(s, d, cost_model or default_cost_model())
