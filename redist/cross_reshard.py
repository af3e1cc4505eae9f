"""``redist.reshard`` between meshes over other devices: the eager hook into ``jax_reshard``.

``redist.reshard(x, NamedSharding(other_mesh, spec))`` where ``other_mesh`` lists other devices
than ``x``'s mesh (a subset, a disjoint set, a superset, or the same devices in another order)
plans the move with ``cross_mesh_plan`` (cached per pair of placements) and runs it by the
default transport of ``run_cross_mesh``: copies in one process, the union program across
processes (docs/design.md section 8.4). Under ``jax.jit`` the device lists are unknown while
tracing, so only placed arrays take this path (docs/howto/cross-mesh.md says what JAX does there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from redist.cross_exec import runner_for
from redist.cross_mesh import CrossMeshPlan, cross_mesh_plan
from spmd_types.jax_placement import placement_of_sharding
from spmd_types.memo import Scope, memo
from spmd_types.placement import Placement


def _ids(mesh: Any) -> tuple[int, ...]:
    return tuple(int(d.id) for d in np.asarray(mesh.devices).reshape(-1))


def on_other_devices(x: Any, dst: Any) -> bool:
    """Whether ``x`` is a placed array and ``dst`` a ``NamedSharding`` on a concrete mesh over
    another device list than ``x``'s (other devices, or the same in another order)."""
    if isinstance(x, jax.core.Tracer) or not isinstance(dst, NamedSharding):
        return False
    have = getattr(x, "sharding", None)
    if not isinstance(have, NamedSharding):
        return False
    if not (isinstance(have.mesh, jax.sharding.Mesh) and isinstance(dst.mesh, jax.sharding.Mesh)):
        return False
    return have.mesh is not dst.mesh and _ids(have.mesh) != _ids(dst.mesh)


@memo(Scope.TYPE, maxsize=1024)
def plan_between(src: Placement, dst: Placement) -> CrossMeshPlan:
    """``cross_mesh_plan``, cached per pair of placements."""
    return cross_mesh_plan(src, dst)


def cross_mesh_reshard(x: jax.Array, dst: Any, note: Callable[[CrossMeshPlan], None] | None = None) -> jax.Array:
    """``x`` moved onto ``dst``'s mesh and laid out as ``dst`` (a ``NamedSharding`` for which
    ``on_other_devices(x, dst)`` holds) by a cross-mesh plan, which ``note`` is given first
    (``redist.record()``'s log); the plan and its runner are cached per (sharding, shape, dtype,
    destination), so a repeated call reads no placement."""
    plan, run = _entry(x.sharding, x.shape, x.dtype, dst)
    if note is not None:
        note(plan)
    return run(x, dst)


@memo(Scope.TYPE, maxsize=1024)
def _entry(sharding: NamedSharding, shape: tuple[int, ...], dtype: Any,
           dst: NamedSharding) -> tuple[CrossMeshPlan, Callable[[jax.Array, NamedSharding], jax.Array]]:
    plan = plan_between(placement_of_sharding(sharding, shape, dtype), placement_of_sharding(dst, shape, dtype))
    return plan, runner_for(plan)


__all__ = ["cross_mesh_reshard", "on_other_devices", "plan_between"]
