"""Vectorised index math: every device's block of a type, and per-dimension overlaps.

The planner, simulator and bounds all need "which global box does each device hold"; computing
it once as an array ``[devices, rank, 2]`` keeps that O(devices x rank) NumPy work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from spmd_types.errors import SizeLimitError
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


INDEX_LIMIT = (1 << 63) - 1
"""The largest index, size or element count the int64 tables hold; past it ``SizeLimitError``."""


def check_index_range(t: ShardingType) -> None:
    """Raise ``SizeLimitError`` naming the dimension when ``t``'s sizes do not fit int64 index math
    (block bounds, overlaps and per-device element counts), instead of letting them wrap."""
    for d, n in enumerate(t.shape):
        if n > INDEX_LIMIT:
            raise SizeLimitError(
                f"dimension {d} of {t} has size {n} > 2**63-1, past the int64 index math of the planner; "
                f"split the dimension or plan a smaller shape of the same layout (bytes scale linearly)"
            )
    if t.local_size > INDEX_LIMIT:
        raise SizeLimitError(
            f"the local block {list(t.local_shape)} of {t} has {t.local_size} elements > 2**63-1, past "
            f"the int64 element counts of the planner; plan a smaller shape of the same layout"
        )


def block_indices(t: ShardingType) -> np.ndarray:
    """int64 ``[devices, rank]``: the block number each device holds along each dimension."""
    t.mesh.check_enumerable()
    out = np.zeros((t.mesh.size, t.rank), dtype=np.int64)
    for d, axes in enumerate(t.dims):
        for a in axes:
            out[:, d] = out[:, d] * t.mesh.axis_size(a) + axis_coords(t.mesh, a)
    return out


@memo(Scope.TYPE, maxsize=8192)
def block_bounds(t: ShardingType) -> np.ndarray:
    """int64 ``[devices, rank, 2]``: global ``[start, stop)`` of each device's block."""
    check_index_range(t)
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
    t.mesh.check_enumerable()
    out = np.zeros(t.mesh.size, dtype=np.int64)
    for a in t.sorted_unreduced():
        out = out * t.mesh.axis_size(a) + axis_coords(t.mesh, a)
    return out
