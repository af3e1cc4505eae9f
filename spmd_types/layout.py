"""Vectorised index math: every device's block of a type, and per-dimension overlaps.

The planner, simulator and bounds all need "which global box does each device hold"; computing
it once as an array ``[devices, rank, 2]`` keeps that O(devices x rank) NumPy work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from spmd_types.memo import Scope, memo
from spmd_types.mesh import Axis, Mesh, subaxis_digit

if TYPE_CHECKING:  # annotations only: types.py imports this module
    from spmd_types.types import ShardingType


@memo(Scope.MESH, maxsize=256)
def coord_table(mesh: Mesh) -> np.ndarray:
    """Cached, read-only ``mesh.coord_table()``: ``[devices, axes]`` coordinates, row-major ids."""
    table = mesh.coord_table()
    table.setflags(write=False)
    return table


@memo(Scope.MESH)
def axis_coords(mesh: Mesh, a: Axis) -> np.ndarray:
    """Coordinate along (sub-)axis ``a`` of every device, as an int64 vector."""
    name, pre, size = mesh.span(a)
    n = mesh.axis_size(name)
    full = coord_table(mesh)[:, mesh.position(name)]
    out = subaxis_digit(full, n, pre, size)
    out.setflags(write=False)  # cached: shared by every caller
    return out


def block_indices(t: ShardingType) -> np.ndarray:
    """int64 ``[devices, rank]``: the block number each device holds along each dimension."""
    out = np.zeros((t.mesh.size, t.rank), dtype=np.int64)
    for d, axes in enumerate(t.dims):
        for a in axes:
            out[:, d] = out[:, d] * t.mesh.axis_size(a) + axis_coords(t.mesh, a)
    return out


@memo(Scope.TYPE, maxsize=8192)
def block_bounds(t: ShardingType) -> np.ndarray:
    """int64 ``[devices, rank, 2]``: global ``[start, stop)`` of each device's block."""
    local = np.array(t.local_shape, dtype=np.int64)
    start = block_indices(t) * local
    out = np.stack([start, start + local], axis=-1)
    out.setflags(write=False)  # cached: shared by every caller
    return out


def overlap_elements(a: ShardingType, b: ShardingType) -> np.ndarray:
    """Per device: number of elements in both its block of ``a`` and its block of ``b``."""
    ba, bb = block_bounds(a), block_bounds(b)
    width = np.minimum(ba[..., 1], bb[..., 1]) - np.maximum(ba[..., 0], bb[..., 0])
    np.maximum(width, 0, out=width)
    return width.prod(axis=-1)


def reduction_group_coords(t: ShardingType) -> np.ndarray:
    """Per device, a mixed-radix id of its coordinates along the unreduced axes (0 if none)."""
    out = np.zeros(t.mesh.size, dtype=np.int64)
    for a in t.sorted_unreduced():
        out = out * t.mesh.axis_size(a) + axis_coords(t.mesh, a)
    return out
