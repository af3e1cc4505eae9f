"""Vectorised index math: every device's block of a type, and per-dimension overlaps.

The planner, simulator and bounds all need "which global box does each device hold"; computing
it once as an array ``[devices, rank, 2]`` keeps that O(devices x rank) NumPy work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from spmd_types.errors import SizeLimitError
from spmd_types.memo import Scope, memo
from spmd_types.mesh import Axis, Mesh, axis_name, subaxis_digit


class Blocked(Protocol):
    """What the block math reads of a type: ``spmd_types.types.ShardingType`` satisfies it. A
    protocol, not an import, because ``types`` builds on this module (no import circle)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dims(self) -> tuple[tuple[Axis, ...], ...]: ...
    @property
    def mesh(self) -> Mesh: ...
    @property
    def rank(self) -> int: ...
    @property
    def local_shape(self) -> tuple[int, ...]: ...
    @property
    def local_size(self) -> int: ...
    def sorted_unreduced(self) -> tuple[Axis, ...]: ...


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


def check_index_range(t: Blocked) -> None:
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


CACHED_DEVICES = 1 << 17
"""Per-dimension tables (``dim_block_index``, ``overlap_widths``) are memoised on meshes of at most
this many devices (1 MiB an entry, 128 entries a table); larger meshes recompute them, so a run
over many huge meshes cannot fill memory with them."""


def dim_block_index(mesh: Mesh, axes: tuple[Axis, ...]) -> np.ndarray:
    """Per device, its block number along a dimension sharded over ``axes`` (major first). Shared
    by every type with that dimension: the types a planner compares differ in a dimension or two."""
    return (_dim_block_index_memo if mesh.size <= CACHED_DEVICES else _dim_block_index)(mesh, axes)


def _dim_block_index(mesh: Mesh, axes: tuple[Axis, ...]) -> np.ndarray:
    out = np.zeros(mesh.size, dtype=np.int64)
    for a in axes:
        out = out * mesh.axis_size(a) + axis_coords(mesh, a)
    out.setflags(write=False)  # cached: shared by every caller
    return out


_dim_block_index_memo = memo(Scope.MESH, maxsize=128)(_dim_block_index)


def block_indices(t: Blocked) -> np.ndarray:
    """int64 ``[devices, rank]``: the block number each device holds along each dimension."""
    t.mesh.check_enumerable()
    if not t.rank:
        return np.zeros((t.mesh.size, 0), dtype=np.int64)
    return np.stack([dim_block_index(t.mesh, axes) for axes in t.dims], axis=1)


@memo(Scope.TYPE, maxsize=8192)
def block_bounds(t: Blocked) -> np.ndarray:
    """int64 ``[devices, rank, 2]``: global ``[start, stop)`` of each device's block."""
    check_index_range(t)
    local = np.array(t.local_shape, dtype=np.int64)
    start = block_indices(t) * local
    out = np.stack([start, start + local], axis=-1)
    out.setflags(write=False)  # cached: shared by every caller
    return out


def _dim_overlap(mesh: Mesh, axes_a: tuple[Axis, ...], local_a: int, axes_b: tuple[Axis, ...], local_b: int) -> np.ndarray:
    """Per device, the length shared by its blocks along one dimension of two types (their axes
    and local sizes there); a dimension both types cut alike overlaps fully."""
    if (axes_a, local_a) == (axes_b, local_b):
        out = np.full(mesh.size, local_a, dtype=np.int64)
    else:
        sa, sb = dim_block_index(mesh, axes_a) * local_a, dim_block_index(mesh, axes_b) * local_b
        out = np.maximum(np.minimum(sa + local_a, sb + local_b) - np.maximum(sa, sb), 0)
    out.setflags(write=False)
    return out


_dim_overlap_memo = memo(Scope.TYPE, maxsize=128)(_dim_overlap)


def cell_shape(old: Blocked, new: Blocked) -> tuple[int, ...]:
    """A cell: per dimension ``gcd(old local, new local)``, so every cell lies wholly inside or
    wholly outside any device's old and new block (the unit of exchanges, their measures and floors)."""
    return tuple(math.gcd(a, b) for a, b in zip(old.local_shape, new.local_shape))


def overlap_widths(a: Blocked, b: Blocked) -> list[np.ndarray]:
    """Per dimension, per device: the length its blocks of ``a`` and ``b`` share along it (cached
    per pair of dimension cuts, read-only)."""
    check_index_range(a)
    check_index_range(b)
    a.mesh.check_enumerable()
    overlap = _dim_overlap_memo if a.mesh.size <= CACHED_DEVICES else _dim_overlap
    return [overlap(a.mesh, axes_a, la, axes_b, lb)
            for axes_a, la, axes_b, lb in zip(a.dims, a.local_shape, b.dims, b.local_shape)]


def overlap_elements(a: Blocked, b: Blocked) -> np.ndarray:
    """Per device: number of elements in both its block of ``a`` and its block of ``b``: the product
    over dimensions of per-dimension overlaps, each shared by every pair of types that cut that
    dimension alike (the prefixes a planner compares differ from their target in a dimension or two)."""
    widths = overlap_widths(a, b)  # checks the sizes and the mesh before anything is allocated
    out = np.ones(a.mesh.size, dtype=np.int64)
    for width in widths:
        out = out * width
    return out


def overlap_summary(a: Blocked, b: Blocked, dims: tuple[int, ...]) -> tuple[int, int]:
    """The sum over devices and the least of the product, over ``dims``, of the per-dimension
    overlaps of ``overlap_widths`` (``overlap_elements`` restricted to ``dims``), exact integers,
    without a table over every device. A dimension's overlap depends only on the device's
    coordinates along the mesh axes its two cuts use, so the dimensions split into *components*
    that share no axis, each a function on the grid of its own axes (``sub_mesh``): devices
    differing only along axes no component uses behave alike, and the coordinates of disjoint
    axes range independently over the mesh. So the sum is the product of the components' sums
    times the devices per point of their joint grid, and the least is the product of their least
    (overlaps are never negative). On 13 axes of 2 the grids hold a quarter of the devices a
    planner's floors and bounds would otherwise multiply and sum. With no dimension whose overlap
    varies there is no table, so no limit on the mesh (``MeshTooLargeError`` otherwise)."""
    check_index_range(a)
    check_index_range(b)
    mesh = a.mesh
    if dims:  # the callers' per-device routing and schedules follow: refuse the mesh here, typed
        mesh.check_enumerable()
    comps: list[tuple[set[str], list[int]]] = []
    for d in dims:
        names = {axis_name(x) for x in a.dims[d] + b.dims[d]}
        ds = [d]
        for c in [c for c in comps if c[0] & names]:
            comps.remove(c)
            names |= c[0]
            ds = c[1] + ds
        comps.append((names, sorted(ds)))
    total, least, points = 1, 1, 1
    for names, ds in comps:
        sub = sub_mesh(mesh, tuple(n for n in mesh.names if n in names))
        cuts = tuple((a.dims[d], a.local_shape[d], b.dims[d], b.local_shape[d]) for d in ds)
        s, low = _component_figures(sub, cuts)
        total *= s
        least *= low
        points *= sub.size
    return total * (mesh.size // points), least


@memo(Scope.TYPE, maxsize=8192)
def _component_figures(sub: Mesh, cuts: tuple[tuple[tuple[Axis, ...], int, tuple[Axis, ...], int], ...]) -> tuple[int, int]:
    """The sum and least over ``sub``'s devices of the product of the overlaps of ``cuts`` (per
    dimension: axes and local size of both types). Memoised: the prefixes a planner compares
    with one destination differ in a dimension or two, so most components recur."""
    prod = np.ones(sub.size, dtype=np.int64)
    for axes_a, local_a, axes_b, local_b in cuts:
        prod = prod * _overlap_on(sub, axes_a, local_a, axes_b, local_b)
    return _exact_sum(prod), int(prod.min())


def _overlap_on(mesh: Mesh, axes_a: tuple[Axis, ...], local_a: int, axes_b: tuple[Axis, ...], local_b: int) -> np.ndarray:
    return (_dim_overlap_memo if mesh.size <= CACHED_DEVICES else _dim_overlap)(mesh, axes_a, local_a, axes_b, local_b)


def _exact_sum(values: np.ndarray) -> int:
    """``values.sum()`` as an exact Python integer: in int64 where it cannot overflow."""
    if not len(values) or int(values.max()) <= (1 << 62) // len(values):
        return int(values.sum())
    return sum(int(x) for x in values.tolist())


@memo(Scope.MESH)
def sub_mesh(mesh: Mesh, names: tuple[str, ...]) -> Mesh:
    """The mesh of ``names`` only (``mesh``'s order and sizes): a (sub-)axis of those axes numbers
    its blocks alike on both, so per-axis tables over it are the full mesh's, per class of devices
    that differ only along the other axes."""
    return Mesh([(n, mesh.axis_size(n)) for n in names]) if names else Mesh([("_", 1)])


def flat_index(columns: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """Row-major ids of per-axis index columns: ``np.ravel_multi_index`` without its limit of 63
    dimensions (a mesh may have 64 axes), int64 (ids of an enumerable mesh fit)."""
    out = np.zeros(np.shape(columns[0]) if len(columns) else (), dtype=np.int64)
    for c, n in zip(columns, shape):
        out = out * int(n) + np.asarray(c, dtype=np.int64)
    return out


def reduction_group_coords(t: Blocked) -> np.ndarray:
    """Per device, a mixed-radix id of its coordinates along the unreduced axes (0 if none)."""
    t.mesh.check_enumerable()
    out = np.zeros(t.mesh.size, dtype=np.int64)
    for a in t.sorted_unreduced():
        out = out * t.mesh.axis_size(a) + axis_coords(t.mesh, a)
    return out
