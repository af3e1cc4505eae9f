"""Logical device meshes and (sub-)axes.

A mesh is an ordered set of named axes; device positions are numbered row-major over them (the
first axis is the most significant). A ``SubAxis`` is a factor of one axis, written like Shardy's
``"y":(pre)size``: with an axis of size ``N``, the sub-axis ``(pre, size)`` is the digit
``(c // (N // (pre*size))) % size`` of the axis coordinate ``c``. Planners need sub-axes to express
intermediate layouts (e.g. moving half of ``y`` before the other half).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Union

from spmd_types.errors import MeshError, UnknownAxisError

if TYPE_CHECKING:  # pragma: no cover
    import jax


@dataclass(frozen=True, order=True)
class SubAxis:
    """The factor of mesh axis ``name`` of size ``size`` whose more-major factors multiply to ``pre``."""

    name: str
    pre: int
    size: int

    def __str__(self) -> str:
        return f"{self.name}:({self.pre}){self.size}"


Axis = Union[str, SubAxis]
"""An axis reference in a type: a whole mesh axis (its name) or a sub-axis."""


def axis_name(a: Axis) -> str:
    """The mesh axis that ``a`` belongs to."""
    return a if isinstance(a, str) else a.name


def format_axis(a: Axis) -> str:
    return a if isinstance(a, str) else str(a)


@dataclass(frozen=True)
class Mesh:
    """An ordered set of named axes with sizes, e.g. ``Mesh({"x": 2, "y": 4})``."""

    axes: tuple[tuple[str, int], ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __init__(self, axes: Mapping[str, int] | Iterable[tuple[str, int]]) -> None:
        items = tuple(axes.items()) if isinstance(axes, Mapping) else tuple(axes)
        if not items:
            raise MeshError("a mesh needs at least one axis")
        seen: dict[str, int] = {}
        for pos, item in enumerate(items):
            if not (isinstance(item, tuple) and len(item) == 2):
                raise MeshError(f"mesh axis #{pos} must be a (name, size) pair, got {item!r}")
            name, size = item
            if not isinstance(name, str) or not name.isidentifier():
                raise MeshError(f"mesh axis #{pos} has invalid name {name!r} (must be an identifier)")
            if name in seen:
                raise MeshError(f"mesh axis {name!r} appears twice")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise MeshError(f"mesh axis {name!r} has size {size!r}; sizes must be integers >= 1")
            seen[name] = pos
        object.__setattr__(self, "axes", tuple((n, int(s)) for n, s in items))
        object.__setattr__(self, "_index", seen)

    # -- basic queries -------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def size(self) -> int:
        return math.prod(s for _, s in self.axes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def position(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise UnknownAxisError(
                f"unknown mesh axis {name!r}; the mesh has axes {list(self.names)}"
            ) from None

    def axis_size(self, a: Axis) -> int:
        """Size of a whole axis or a sub-axis (validated against this mesh)."""
        if isinstance(a, str):
            return self.axes[self.position(a)][1]
        self.check_subaxis(a)
        return a.size

    def check_subaxis(self, a: SubAxis) -> None:
        n = self.axes[self.position(a.name)][1]
        if a.pre < 1 or a.size < 1 or n % (a.pre * a.size) != 0:
            raise UnknownAxisError(
                f"sub-axis {a} does not fit mesh axis {a.name!r} of size {n}: "
                f"pre*size = {a.pre * a.size} must divide {n}"
            )

    def span(self, a: Axis) -> tuple[str, int, int]:
        """(axis name, pre, size) of ``a`` as a factor of its mesh axis; a whole axis is (name, 1, N)."""
        if isinstance(a, str):
            return (a, 1, self.axis_size(a))
        self.check_subaxis(a)
        return (a.name, a.pre, a.size)

    # -- device ids <-> coordinates (row-major) -----------------------------------------------------
    def coords(self, device: int) -> dict[str, int]:
        if not 0 <= device < self.size:
            raise MeshError(f"device id {device} out of range for a mesh of {self.size} devices")
        out: dict[str, int] = {}
        for name, s in reversed(self.axes):
            out[name] = device % s
            device //= s
        return {n: out[n] for n in self.names}

    def device_id(self, coords: Mapping[str, int]) -> int:
        dev = 0
        for name, s in self.axes:
            if name not in coords:
                raise MeshError(f"coordinates {dict(coords)} lack mesh axis {name!r}")
            c = coords[name]
            if not 0 <= c < s:
                raise MeshError(f"coordinate {name}={c} out of range for axis size {s}")
            dev = dev * s + c
        extra = set(coords) - set(self.names)
        if extra:
            raise UnknownAxisError(f"coordinates name unknown mesh axes {sorted(extra)}")
        return dev

    def axis_coord(self, a: Axis, coords: Mapping[str, int]) -> int:
        """The coordinate along (sub-)axis ``a`` of the device at ``coords``."""
        name, pre, size = self.span(a)
        n = self.axes[self.position(name)][1]
        return (coords[name] // (n // (pre * size))) % size

    def coord_table(self) -> "Any":
        """int array [devices, axes] of every device's coordinates (row-major ids)."""
        import numpy as np

        sizes = [s for _, s in self.axes]
        return np.array(list(np.ndindex(*sizes)), dtype=np.int64).reshape(self.size, len(sizes))

    def __str__(self) -> str:
        return "{" + ",".join(f"{n}={s}" for n, s in self.axes) + "}"

    @staticmethod
    def parse(text: str) -> "Mesh":
        """Parse ``x=2,y=4`` (braces optional), as the CLI takes it."""
        body = text.strip().removeprefix("{").removesuffix("}")
        items: list[tuple[str, int]] = []
        for part in filter(None, (p.strip() for p in body.split(","))):
            name, eq, size = part.partition("=")
            if not eq or not size.strip().lstrip("-").isdigit():
                raise MeshError(f"mesh axis {part!r} must be written name=size, e.g. x=2")
            items.append((name.strip(), int(size)))
        return Mesh(items)

    # -- JAX interop ----------------------------------------------------------------------------
    def to_jax(self, devices: "Any" = None) -> "jax.sharding.Mesh":
        """A ``jax.sharding.Mesh`` with the same axes; devices default to the first ``size`` ones."""
        from spmd_types.jax_interop import mesh_to_jax

        return mesh_to_jax(self, devices)

    @staticmethod
    def from_jax(mesh: "jax.sharding.Mesh") -> "Mesh":
        return Mesh(tuple((str(n), int(s)) for n, s in mesh.shape.items()))
