"""The device order for a destination mesh that minimises a cross-mesh move's traffic.

For callers who build the destination mesh themselves: given where the array lives (``src``),
the destination type and the devices the destination may use, which device should sit at which
position? A device keeps, without receiving it, the part of its destination block that its own
source block holds, so the order that minimises received bytes maximises the sum over positions
of that overlap: an assignment problem over (position, device), solved exactly by
``scipy.optimize.linear_sum_assignment``, as COSTA does for ScaLAPACK layouts
(docs/design.md section 8.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import linear_sum_assignment

from redist.cross_mesh import CrossMeshPlan, cell_blocks, cell_counts, cross_mesh_plan
from spmd_types import ShardingType
from spmd_types.placement import Placement


class Ordered(NamedTuple):
    """The chosen destination placement, its plan, and the received bytes it saves against
    ``devices`` in the order given."""

    placement: Placement
    plan: CrossMeshPlan
    saved_bytes: int


def best_device_order(src: Placement, dst_type: ShardingType, devices: Sequence[int]) -> Ordered:
    """The placement of ``dst_type`` over ``devices`` (one per position, in any order) whose
    move from ``src`` receives the fewest bytes, with its plan and the bytes saved against the
    order given.

    Example:
        Columns over devices 0-3 to columns over the same devices, given in reverse order: the
        best order keeps every block where it is.

        >>> import redist
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.placement import Placement
        >>> src = Placement(parse("f32[8,4@x]", Mesh({"x": 4})), (0, 1, 2, 3))
        >>> best = redist.best_device_order(src, parse("f32[8,4@y]", Mesh({"y": 4})), (3, 2, 1, 0))
        >>> best.placement.devices, best.saved_bytes, len(best.plan.messages)
        ((0, 1, 2, 3), 128, 0)

    Raises:
        PlacementError: ``devices`` is not one id per position of ``dst_type``'s mesh.
        IncompatibleTypesError: the move is not one (``cross_mesh_plan``).
    """
    given = Placement(dst_type, tuple(devices))
    cells = cell_counts(src.type, dst_type)
    sb, db = cell_blocks(src.type, cells), cell_blocks(dst_type, cells)
    keep = np.zeros((len(db), len(given.devices)), dtype=np.int64)
    for j, g in enumerate(given.devices):
        p = src.position_of(g)
        if p is None:
            continue
        for q in range(len(db)):
            keep[q, j] = math.prod(max(min(a[1], b[1]) - max(a[0], b[0]), 0) for a, b in zip(db[q], sb[p]))
    rows, cols = linear_sum_assignment(keep, maximize=True)
    order = [0] * len(rows)
    for q, j in zip(rows, cols):
        order[q] = given.devices[j]
    best = Placement(dst_type, tuple(order))
    plan, base = cross_mesh_plan(src, best), cross_mesh_plan(src, given)
    saved = sum(base.recv_bytes().values()) - sum(plan.recv_bytes().values())
    if saved <= 0:  # the order given is already optimal: keep it
        return Ordered(given, base, 0)
    return Ordered(best, plan, saved)


__all__ = ["Ordered", "best_device_order"]
