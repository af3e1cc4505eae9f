"""Per-device NumPy tables for the concrete parts of the proofs.

The index math is re-derived here, as in ``proofs.model`` (not taken from ``spmd_types.layout`` or
``redist``): device ids are row-major over the mesh axes, a (sub-)axis ``(name, pre, size)`` of an
axis of size ``N`` reads the digit ``(c // (N // (pre*size))) % size``, several (sub-)axes read a
mixed-radix number, major first. Every function is one vectorised pass over the devices, so the
counting that ``proofs.measures`` and ``proofs.link`` still do per device costs NumPy work, not
Python work, per device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from proofs.model import Span, spans_of
from spmd_types import Mesh, ShardingType


def coord_table(mesh: Mesh) -> np.ndarray:
    """``[devices, axes]`` coordinates of every device (row-major ids); a typed error
    (``MeshTooLargeError``) for a mesh too large to enumerate."""
    mesh.check_enumerable("a proof's per-device table")
    sizes = [n for _, n in mesh.axes]
    if not sizes:
        return np.zeros((1, 0), dtype=np.int64)
    return np.stack(np.unravel_index(np.arange(mesh.size, dtype=np.int64), sizes), axis=1).astype(np.int64)


def digit_of(mesh: Mesh, coords: np.ndarray, sp: Span) -> np.ndarray:
    """``[devices]`` digit of each device along the (sub-)axis ``sp``."""
    name, pre, size = sp
    return (coords[:, mesh.position(name)] // (mesh.axis_size(name) // (pre * size))) % size


def mixed_of(mesh: Mesh, coords: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """``[devices]`` mixed-radix number of each device's digits along ``spans`` (first major)."""
    out = np.zeros(len(coords), dtype=np.int64)
    for sp in spans:
        out = out * sp[2] + digit_of(mesh, coords, sp)
    return out


def with_mixed(mesh: Mesh, coords: np.ndarray, spans: Sequence[Span], value: np.ndarray | int) -> np.ndarray:
    """``coords`` with their digits along ``spans`` set to the mixed-radix digits of ``value``."""
    out = coords.copy()
    v = np.broadcast_to(np.asarray(value, dtype=np.int64), (len(coords),)).copy()
    for name, pre, size in reversed(spans):
        pos, stride = mesh.position(name), mesh.axis_size(name) // (pre * size)
        out[:, pos] += (v % size - (out[:, pos] // stride) % size) * stride
        v //= size
    return out


def device_ids(mesh: Mesh, coords: np.ndarray) -> np.ndarray:
    """``[devices]`` row-major id of each coordinate row (the inverse of ``coord_table``)."""
    out = np.zeros(len(coords), dtype=np.int64)
    for k, (_, n) in enumerate(mesh.axes):
        out = out * n + coords[:, k]
    return out


def blocks(t: ShardingType, coords: np.ndarray) -> np.ndarray:
    """``[devices, rank]`` block grid index of each device in ``t`` (its mixed number along the
    axes sharding each dimension)."""
    mesh = t.mesh
    cols = [mixed_of(mesh, coords, spans_of(mesh, t.dims[d])) for d in range(t.rank)]
    return np.stack(cols, axis=1) if cols else np.zeros((len(coords), 0), dtype=np.int64)


__all__ = ["blocks", "coord_table", "device_ids", "digit_of", "mixed_of", "with_mixed"]
