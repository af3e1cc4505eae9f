"""``ShardingType``: the type of a distributed array (global shape, dtype, sharding, unreduced and
reduced axes).

Conventions (docs/design.md section 2): dimension ``d`` sharded over axes ``(a1..ak)`` (major to minor)
is cut into ``|a1|*...*|ak|`` equal blocks and the device with coordinates ``c`` holds block
``mixed_radix(c[a1], ..., c[ak])``. ``unreduced`` axes mean the value is the sum over their
coordinates of the local values. ``reduced`` axes hold the value replicated, like an unnamed axis;
they differ only in the cotangent's type (a pending sum over them, JAX's ``reduced``), so plans move
data as for ``without_reduced()``. Types are validated at construction and canonical (adjacent
consecutive sub-axes of one axis are merged, a sub-axis covering its axis becomes the axis name,
size-1 sub-axes of larger axes are dropped), so ``==`` is layout equality. Two factors of one axis
may share a type only when both are pieces of one factorisation of the axis (``spans_overlap``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spmd_types.dtypes import canonical_dtype, itemsize
from spmd_types.errors import (
    DuplicateAxisError,
    IndivisibleDimensionError,
    InvalidSizeError,
    RankMismatchError,
    UnknownAxisError,
)
from spmd_types.layout import block_bounds
from spmd_types.memo import HASH_KEY, cached_property, state_without_hash, store_hash
from spmd_types.mesh import Axis, Mesh, SubAxis, axis_name, format_axis, spans_overlap
from spmd_types.text import format_parts, parse_parts


def _is_trivial(mesh: Mesh, a: Axis) -> bool:
    """A size-1 sub-axis of a larger axis shards nothing and uses nothing: types drop it."""
    name, _, size = mesh.span(a)
    return isinstance(a, SubAxis) and size == 1 and mesh.axis_size(name) > 1


def _axis_refs(mesh: Mesh, spec: object, where: str) -> tuple[Axis, ...]:
    """One dimension's (or the unreduced) axes: ``None``, one axis, or an iterable of axes."""
    if spec is None:
        return ()
    if isinstance(spec, (str, SubAxis)):
        return (spec,)
    if not isinstance(spec, Iterable):
        raise UnknownAxisError(
            f"{where}: {spec!r} is not a mesh axis, a tuple of mesh axes or None; "
            f"the mesh has axes {list(mesh.names)}"
        )
    axes = tuple(spec)
    for a in axes:
        if not isinstance(a, (str, SubAxis)):
            raise UnknownAxisError(
                f"{where}: {a!r} is not a mesh axis reference (an axis name or a SubAxis); "
                f"the mesh has axes {list(mesh.names)}"
            )
    return axes


def canonical_axes(mesh: Mesh, axes: Sequence[Axis]) -> tuple[Axis, ...]:
    """Merge adjacent sub-axes of one axis that are consecutive (major then minor); a sub-axis
    covering its whole axis becomes the axis name; size-1 sub-axes of larger axes are dropped."""
    if all(isinstance(a, str) for a in axes):
        return tuple(axes)  # whole axes: nothing to merge (duplicates are rejected elsewhere)
    out: list[tuple[str, int, int]] = []
    for a in axes:
        if _is_trivial(mesh, a):
            continue
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
            if spans_overlap(pre, size, p2, s2):
                raise DuplicateAxisError(
                    f"axis {format_axis(a)!r} ({where}) overlaps {format_axis(a2)!r} ({where2}); "
                    f"each mesh axis may appear at most once in a type"
                )
        spans.setdefault(name, []).append((pre, size, a, where))


@dataclass(frozen=True)
class ShardingType:
    """Global shape, dtype, per-dimension mesh axes (major to minor), unreduced axes, mesh, and
    reduced axes (replicated data whose cotangent is a pending sum over them).

    Examples:
        >>> from spmd_types import Mesh, ShardingType, parse
        >>> mesh = Mesh({"x": 2, "y": 4})
        >>> t = ShardingType((512, 128), "float32", (("x", "y"), ()), mesh)
        >>> str(t), t == parse("f32[512@(x,y),128]", mesh), t.local_shape
        ('f32[512@(x,y),128]', True, (64, 128))
        >>> ShardingType((6,), "f32", (("y",),), mesh)
        Traceback (most recent call last):
        spmd_types.errors.IndivisibleDimensionError: ...

    Raises:
        ShardingTypeError: a subclass naming the offending axis or dimension: an unknown axis, an
            axis used twice, a dimension its axes do not divide, a rank mismatch, an unknown dtype.
    """

    shape: tuple[int, ...]
    dtype: str
    dims: tuple[tuple[Axis, ...], ...]
    unreduced: frozenset[Axis]
    mesh: Mesh
    reduced: frozenset[Axis] = frozenset()  # a class default: the planner's types skip the store

    def __init__(
        self,
        shape: Sequence[int],
        dtype: str,
        dims: Sequence[Sequence[Axis] | Axis | None],
        mesh: Mesh,
        unreduced: Iterable[Axis] = (),
        reduced: Iterable[Axis] = (),
    ) -> None:
        mesh = Mesh.coerce(mesh, "the mesh of a sharding type")
        shape = _checked_shape(shape)
        dim_specs = _dim_specs(dims, shape)
        norm: list[tuple[Axis, ...]] = []
        used: list[tuple[Axis, str]] = []
        for d, spec in enumerate(dim_specs):
            axes = _axis_refs(mesh, spec, f"dimension {d}")
            for a in axes:
                mesh.axis_size(a)  # raises UnknownAxisError
                if not _is_trivial(mesh, a):
                    used.append((a, f"dimension {d}"))
            norm.append(canonical_axes(mesh, axes))
        unred = _axis_refs(mesh, unreduced, "unreduced")
        for a in unred:
            mesh.axis_size(a)
            if not _is_trivial(mesh, a):
                used.append((a, "unreduced"))
        red = _axis_refs(mesh, reduced, "reduced")
        for a in red:
            mesh.axis_size(a)
            if not _is_trivial(mesh, a):
                used.append((a, "reduced"))
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
        object.__setattr__(self, "reduced", frozenset(canonical_unreduced(mesh, red)))

    @classmethod
    def trusted(
        cls, shape: tuple[int, ...], dtype: str, dims: tuple[tuple[Axis, ...], ...], mesh: Mesh,
        unreduced: frozenset[Axis], local_shape: tuple[int, ...] | None = None,
        reduced: frozenset[Axis] = frozenset(),
    ) -> ShardingType:
        """Build without validation, for callers (the planner's step rules) that construct only
        canonical, disjoint axes and check divisibility themselves; planning builds thousands.
        ``local_shape``, where the caller has divided the shape already, is kept as is. Step rules
        pass no ``reduced``: plans move the data, and a reduced axis holds it replicated."""
        t = object.__new__(cls)
        if local_shape is not None:
            t.__dict__["local_shape"] = local_shape
        object.__setattr__(t, "shape", shape)
        object.__setattr__(t, "dtype", dtype)
        object.__setattr__(t, "dims", dims)
        object.__setattr__(t, "unreduced", unreduced)
        object.__setattr__(t, "mesh", mesh)
        if reduced:
            object.__setattr__(t, "reduced", reduced)
        return t

    def __hash__(self) -> int:
        h = self.__dict__.get(HASH_KEY)
        if h is not None:
            return h
        parts = (self.shape, self.dtype, self.dims, self.unreduced, self.mesh)
        return store_hash(self, parts + (self.reduced,) if self.reduced else parts)

    __getstate__ = state_without_hash

    # -- construction helpers -----------------------------------------------------------------------
    @staticmethod
    def parse(text: str, mesh: Mesh) -> ShardingType:
        return parse_type(text, mesh)

    def replace(
        self,
        dims: Sequence[Sequence[Axis]] | None = None,
        unreduced: Iterable[Axis] | None = None,
        reduced: Iterable[Axis] | None = None,
    ) -> ShardingType:
        """A validated copy with new dims, unreduced and/or reduced axes (shape, dtype, mesh kept)."""
        return ShardingType(
            self.shape,
            self.dtype,
            self.dims if dims is None else dims,
            self.mesh,
            self.unreduced if unreduced is None else unreduced,
            self.reduced if reduced is None else reduced,
        )

    def without_reduced(self) -> ShardingType:
        """The data layout: this type with its reduced axes read as plain replication. Plans are
        planned and proved between these (docs/design.md section 2.6)."""
        if not self.reduced:
            return self
        return ShardingType.trusted(self.shape, self.dtype, self.dims, self.mesh, self.unreduced, self.local_shape)

    def cotangent(self) -> ShardingType:
        """The type of this value's cotangent, as JAX types it (``to_ct_aval``): unreduced and
        reduced axes swap roles, a pending sum's cotangent is replicated and the other way round."""
        if not (self.reduced or self.unreduced):
            return self
        return ShardingType.trusted(self.shape, self.dtype, self.dims, self.mesh, self.reduced,
                                    self.local_shape, self.unreduced)

    # -- queries ------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @cached_property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    def sorted_unreduced(self) -> tuple[Axis, ...]:
        return tuple(sorted(self.unreduced, key=lambda a: _sort_key(self.mesh, a)))

    def sorted_reduced(self) -> tuple[Axis, ...]:
        return tuple(sorted(self.reduced, key=lambda a: _sort_key(self.mesh, a)))

    def dim_shards(self, d: int) -> int:
        return math.prod(self.mesh.axis_size(a) for a in self.dims[d])

    @cached_property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(n // self.dim_shards(d) for d, n in enumerate(self.shape))

    @cached_property
    def local_size(self) -> int:
        return math.prod(self.local_shape)

    @cached_property
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
        """How many devices hold each element (unreduced partials counted as copies, reduced axes
        replicate)."""
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

    def blocks(self) -> object:
        """int64 array ``[devices, rank, 2]`` of every device's block bounds (vectorised)."""
        return block_bounds(self)

    def __str__(self) -> str:
        return format_type(self)

    def __repr__(self) -> str:
        return f"ShardingType({str(self)!r}, mesh={self.mesh})"


def _checked_shape(shape: Sequence[int]) -> tuple[int, ...]:
    try:
        items = tuple(shape)
    except TypeError:
        raise InvalidSizeError(f"shape must be a sequence of integers, got {shape!r}") from None
    sizes: list[int] = []
    for d, n in enumerate(items):
        size = None if isinstance(n, bool) else _index(n)
        if size is None or size < 1:
            raise InvalidSizeError(f"dimension {d} has size {n!r}; sizes must be integers >= 1")
        sizes.append(size)
    return tuple(sizes)


def _dim_specs(dims: object, shape: tuple[int, ...]) -> list[object]:
    """One entry (axes or None) per dimension, or a ``RankMismatchError`` naming the mismatch."""
    if isinstance(dims, (str, SubAxis)) or dims is None:
        raise RankMismatchError(
            f"dims must be a sequence with one entry (axes or None) per dimension of shape "
            f"{list(shape)}, got {dims!r}"
        )
    try:
        dim_specs = list(dims)  # type: ignore[call-overload]
    except TypeError:
        raise RankMismatchError(f"dims must be a sequence with one entry per dimension, got {dims!r}") from None
    if len(dim_specs) != len(shape):
        raise RankMismatchError(
            f"shape {list(shape)} has rank {len(shape)} but {len(dim_specs)} dimension shardings were given"
        )
    return dim_specs


def _index(n: object) -> int | None:
    try:
        return operator.index(n)  # type: ignore[arg-type]
    except TypeError:
        return None


def canonical_unreduced(mesh: Mesh, axes: Iterable[Axis]) -> list[Axis]:
    """Unreduced sub-axes of one axis that together form consecutive factors merge, like dims."""
    by_name: dict[str, list[tuple[int, int]]] = {}
    for a in axes:
        if _is_trivial(mesh, a):
            continue
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


def parse_type(text: str, mesh: Mesh) -> ShardingType:
    """Parse type text against ``mesh``; ``parse_type(format_type(t), t.mesh) == t``.

    The text is what ``jax.typeof`` prints (``float32[8@x,4]{U:y}`` as well as ``f32[...]``), so
    JAX's own output can be pasted (``spmd_types.parse`` is this function).

    Examples:
        >>> from spmd_types import Mesh, parse_type
        >>> t = parse_type("float32[8@x,16@y]{R:z}", Mesh({"x": 2, "y": 4, "z": 2}))
        >>> str(t), t.local_shape, sorted(t.reduced)
        ('f32[8@x,16@y]{R:z}', (4, 4), ['z'])
        >>> parse_type("f32[8@w]", Mesh({"x": 2}))
        Traceback (most recent call last):
        spmd_types.errors.UnknownAxisError: ...

    Raises:
        ShardingTypeError: a subclass naming the column, axis or dimension that does not parse or
            does not fit ``mesh``.
    """
    mesh = Mesh.coerce(mesh, "the mesh to parse a type on")
    parts = parse_parts(text)
    return ShardingType(parts.shape, parts.dtype, parts.dims, mesh, parts.unreduced, parts.reduced)


def format_type(t: ShardingType) -> str:
    """Canonical text, as ``jax.typeof`` prints it (``{U:x, R:y}``, with short dtype names).

    Example:
        >>> from spmd_types import Mesh, format_type, parse
        >>> format_type(parse("float32[8@x,4]{U:y}", Mesh({"x": 2, "y": 2})))
        'f32[8@x,4]{U:y}'
    """
    return format_parts(t.dtype, t.shape, t.dims, t.sorted_unreduced(), t.sorted_reduced())


__all__ = ["ShardingType", "format_type", "parse_type", "axis_name", "canonical_axes", "canonical_unreduced", "spans_overlap"]
