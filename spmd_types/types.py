"""``ShardingType``: the type of a distributed array (global shape, dtype, sharding, unreduced axes).

Conventions (DESIGN.md section 2): dimension ``d`` sharded over axes ``(a1..ak)`` (major to minor)
is cut into ``|a1|*...*|ak|`` equal blocks and the device with coordinates ``c`` holds block
``mixed_radix(c[a1], ..., c[ak])``. ``unreduced`` axes mean the value is the sum over their
coordinates of the local values. Types are validated at construction and canonical (adjacent
consecutive sub-axes of one axis are merged), so ``==`` is layout equality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from spmd_types.dtypes import canonical_dtype, itemsize
from spmd_types.errors import (
    DuplicateAxisError,
    IndivisibleDimensionError,
    InvalidSizeError,
    RankMismatchError,
)
from spmd_types.mesh import Axis, Mesh, SubAxis, axis_name, format_axis


def canonical_axes(mesh: Mesh, axes: Sequence[Axis]) -> tuple[Axis, ...]:
    """Merge adjacent sub-axes of one axis that are consecutive (major then minor); a sub-axis
    covering its whole axis becomes the axis name."""
    out: list[tuple[str, int, int]] = []
    for a in axes:
        name, pre, size = mesh.span(a)
        if out and out[-1][0] == name and out[-1][1] * out[-1][2] == pre:
            prev = out.pop()
            out.append((name, prev[1], prev[2] * size))
        else:
            out.append((name, pre, size))
    return tuple(_ref(mesh, n, p, s) for n, p, s in out)


def _ref(mesh: Mesh, name: str, pre: int, size: int) -> Axis:
    return name if pre == 1 and size == mesh.axis_size(name) else SubAxis(name, pre, size)


def _sort_key(mesh: Mesh, a: Axis) -> tuple[int, int]:
    name, pre, _ = mesh.span(a)
    return (mesh.position(name), pre)


def _check_disjoint(mesh: Mesh, used: Iterable[tuple[Axis, str]]) -> None:
    """An axis (or overlapping factors of one axis) may appear once in the whole type."""
    spans: dict[str, list[tuple[int, int, Axis, str]]] = {}
    for a, where in used:
        name, pre, size = mesh.span(a)
        for p2, s2, a2, where2 in spans.get(name, []):
            if not (p2 % (pre * size) == 0 or pre % (p2 * s2) == 0):
                raise DuplicateAxisError(
                    f"axis {format_axis(a)!r} ({where}) overlaps {format_axis(a2)!r} ({where2}); "
                    f"each mesh axis may appear at most once in a type"
                )
        spans.setdefault(name, []).append((pre, size, a, where))


@dataclass(frozen=True)
class ShardingType:
    """Global shape, dtype, per-dimension mesh axes (major to minor), unreduced axes, and mesh."""

    shape: tuple[int, ...]
    dtype: str
    dims: tuple[tuple[Axis, ...], ...]
    unreduced: frozenset[Axis]
    mesh: Mesh

    def __init__(
        self,
        shape: Sequence[int],
        dtype: str,
        dims: Sequence[Sequence[Axis] | Axis | None],
        mesh: Mesh,
        unreduced: Iterable[Axis] = (),
    ) -> None:
        shape = tuple(shape)
        for d, n in enumerate(shape):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidSizeError(f"dimension {d} has size {n!r}; sizes must be integers >= 1")
        if len(dims) != len(shape):
            raise RankMismatchError(
                f"shape {list(shape)} has rank {len(shape)} but {len(dims)} dimension shardings were given"
            )
        norm: list[tuple[Axis, ...]] = []
        used: list[tuple[Axis, str]] = []
        for d, spec in enumerate(dims):
            axes: tuple[Axis, ...]
            if spec is None:
                axes = ()
            elif isinstance(spec, (str, SubAxis)):
                axes = (spec,)
            else:
                axes = tuple(spec)
            for a in axes:
                mesh.axis_size(a)  # raises UnknownAxisError
                used.append((a, f"dimension {d}"))
            norm.append(canonical_axes(mesh, axes))
        unred = tuple(unreduced)
        for a in unred:
            mesh.axis_size(a)
            used.append((a, "unreduced"))
        _check_disjoint(mesh, used)
        for d, (n, axes) in enumerate(zip(shape, norm)):
            k = math.prod(mesh.axis_size(a) for a in axes)
            if n % k:
                raise IndivisibleDimensionError(
                    f"dimension {d} of size {n} is not divisible by {k}, the product of its axes "
                    f"({', '.join(f'{format_axis(a)}={mesh.axis_size(a)}' for a in axes)})"
                )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", canonical_dtype(dtype))
        object.__setattr__(self, "dims", tuple(norm))
        object.__setattr__(self, "unreduced", frozenset(canonical_unreduced(mesh, unred)))
        object.__setattr__(self, "mesh", mesh)

    # -- construction helpers -----------------------------------------------------------------------
    @staticmethod
    def parse(text: str, mesh: Mesh) -> "ShardingType":
        from spmd_types.text import parse_type

        return parse_type(text, mesh)

    def replace(
        self,
        dims: Sequence[Sequence[Axis]] | None = None,
        unreduced: Iterable[Axis] | None = None,
    ) -> "ShardingType":
        """A validated copy with new dims and/or unreduced axes (shape, dtype, mesh kept)."""
        return ShardingType(
            self.shape,
            self.dtype,
            self.dims if dims is None else dims,
            self.mesh,
            self.unreduced if unreduced is None else unreduced,
        )

    # -- queries ------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    def sorted_unreduced(self) -> tuple[Axis, ...]:
        return tuple(sorted(self.unreduced, key=lambda a: _sort_key(self.mesh, a)))

    def dim_shards(self, d: int) -> int:
        return math.prod(self.mesh.axis_size(a) for a in self.dims[d])

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(n // self.dim_shards(d) for d, n in enumerate(self.shape))

    @property
    def local_size(self) -> int:
        return math.prod(self.local_shape)

    @property
    def local_bytes(self) -> int:
        return self.local_size * self.itemsize

    @property
    def global_bytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def used_axes(self) -> tuple[Axis, ...]:
        return tuple(a for axes in self.dims for a in axes) + self.sorted_unreduced()

    @property
    def sharded_ways(self) -> int:
        return math.prod(self.dim_shards(d) for d in range(self.rank))

    @property
    def replication(self) -> int:
        """How many devices hold each element (unreduced partials counted as copies)."""
        return self.mesh.size // self.sharded_ways

    def block_index(self, coords: dict[str, int]) -> tuple[int, ...]:
        """Per-dimension block number of the device at ``coords`` (mixed radix, major first)."""
        out = []
        for axes in self.dims:
            b = 0
            for a in axes:
                b = b * self.mesh.axis_size(a) + self.mesh.axis_coord(a, coords)
            out.append(b)
        return tuple(out)

    def block(self, device: int) -> tuple[tuple[int, int], ...]:
        """Global ``[start, stop)`` per dimension of the block that ``device`` holds."""
        idx = self.block_index(self.mesh.coords(device))
        return tuple((i * n, (i + 1) * n) for i, n in zip(idx, self.local_shape))

    def blocks(self) -> "object":
        """int64 array ``[devices, rank, 2]`` of every device's block bounds (vectorised)."""
        from spmd_types.layout import block_bounds

        return block_bounds(self)

    def __str__(self) -> str:
        from spmd_types.text import format_type

        return format_type(self)

    def __repr__(self) -> str:
        return f"ShardingType({str(self)!r}, mesh={self.mesh})"


def canonical_unreduced(mesh: Mesh, axes: Iterable[Axis]) -> list[Axis]:
    """Unreduced sub-axes of one axis that together form consecutive factors merge, like dims."""
    by_name: dict[str, list[tuple[int, int]]] = {}
    for a in axes:
        name, pre, size = mesh.span(a)
        by_name.setdefault(name, []).append((pre, size))
    out: list[Axis] = []
    for name, spans in by_name.items():
        spans.sort()
        merged: list[list[int]] = []
        for pre, size in spans:
            if merged and merged[-1][0] * merged[-1][1] == pre:
                merged[-1][1] *= size
            else:
                merged.append([pre, size])
        out.extend(_ref(mesh, name, p, s) for p, s in merged)
    return out


__all__ = ["ShardingType", "canonical_axes", "axis_name"]
