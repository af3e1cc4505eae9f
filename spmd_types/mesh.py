"""Logical device meshes and (sub-)axes.

A mesh is an ordered set of named axes; device positions are numbered row-major over them (the
first axis is the most significant). A ``SubAxis`` is a factor of one axis, written like Shardy's
``"y":(pre)size``: with an axis of size ``N``, the sub-axis ``(pre, size)`` is the digit
``(c // (N // (pre*size))) % size`` of the axis coordinate ``c``. Planners need sub-axes to express
intermediate layouts (e.g. moving half of ``y`` before the other half).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spmd_types.errors import MeshError, MeshTooLargeError, UnknownAxisError
from spmd_types.memo import HASH_KEY, cached_property, state_without_hash, store_hash

if TYPE_CHECKING:  # pragma: no cover
    import jax


@dataclass(frozen=True, order=True)
class SubAxis:
    """The factor of mesh axis ``name`` of size ``size`` whose more-major factors multiply to ``pre``.

    Written ``name:(pre)size`` as Shardy writes it: ``y:(1)2`` is the major half of an axis ``y`` of
    size 4, ``y:(2)2`` its minor half (docs/design.md section 2.3).

    Example:

    ```pycon
    >>> from spmd_types import Mesh, SubAxis, parse
    >>> str(SubAxis("y", 1, 2))
    'y:(1)2'
    >>> parse("f32[8@(y:(1)2)]", Mesh({"x": 2, "y": 4})).dims
    ((SubAxis(name='y', pre=1, size=2),),)

    ```
    """

    name: str
    pre: int
    size: int

    def __str__(self) -> str:
        return f"{self.name}:({self.pre}){self.size}"


Axis = str | SubAxis
"""An axis reference in a type: a whole mesh axis (its name) or a sub-axis."""


MAX_ENUMERATED_DEVICES = 1 << 22
"""The most devices a per-device table (``Mesh.coord_table`` and the NumPy tables built on it) is
made for: 4M rows. Larger meshes raise ``MeshTooLargeError`` where enumeration is needed, instead of
NumPy asking for terabytes."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Axis names are ASCII identifiers: exactly what the type text grammar can spell."""

_MESH_ITEM = re.compile(r"\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<size>-?[0-9]+)\s*")


def _as_int(value: object) -> int | None:
    """``value`` as a Python int if it is an integer (NumPy ints included, bools excluded)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def axis_name(a: Axis) -> str:
    """The mesh axis that ``a`` belongs to.

    Example:

    ```pycon
    >>> from spmd_types import SubAxis, axis_name
    >>> axis_name("x"), axis_name(SubAxis("y", 1, 2))
    ('x', 'y')

    ```
    """
    return a if isinstance(a, str) else a.name


def format_axis(a: Axis) -> str:
    return a if isinstance(a, str) else str(a)


def spans_overlap(pre1: int, size1: int, pre2: int, size2: int) -> bool:
    """Whether factors ``(pre1)size1`` and ``(pre2)size2`` of one mesh axis share a digit: they are
    disjoint only when one lies wholly minor to the other in a common factorisation of the axis.
    Equal spans always overlap (this also catches a size-1 axis named twice). The one definition:
    types, steps and the cost model all ask it."""
    if (pre1, size1) == (pre2, size2):
        return True
    return not (pre2 % (pre1 * size1) == 0 or pre1 % (pre2 * size2) == 0)


def subaxis_stride(axis_size: int, pre: int, size: int) -> int:
    """How many coordinates of the whole axis one step of the sub-axis ``(pre)size`` spans."""
    return axis_size // (pre * size)


def subaxis_digit(coord: Any, axis_size: int, pre: int, size: int) -> Any:
    """The coordinate along sub-axis ``(pre)size`` of a coordinate ``coord`` of an axis of size
    ``axis_size``: the one formula of sub-axes, for Python ints, NumPy arrays and JAX values alike
    (``proofs.model.digit`` re-derives it for z3 on purpose: the proofs are an independent reference)."""
    return (coord // subaxis_stride(axis_size, pre, size)) % size


@dataclass(frozen=True)
class Mesh:
    """An ordered set of named axes with sizes, e.g. ``Mesh({"x": 2, "y": 4})``.

    Devices are numbered row-major over the axes (the last axis fastest), as ``jax.make_mesh``
    lays them out. A mesh is plain data: planning needs no devices; ``to_jax`` makes the JAX mesh.

    Example:

    ```pycon
    >>> from spmd_types import Mesh
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(mesh, mesh.size, mesh.names)
    {x=2,y=4} 8 ('x', 'y')
    >>> mesh.coords(5)
    {'x': 1, 'y': 1}
    >>> Mesh.parse("x=2,y=4") == mesh
    True

    ```

    :raises MeshError: for no axes, a name that is not an ASCII identifier, a name given twice, or
        a size that is not an integer >= 1.
    """

    axes: tuple[tuple[str, int], ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)
    _spans_ok: set[SubAxis] = field(init=False, repr=False, compare=False, hash=False)

    def __init__(self, axes: Mapping[str, int] | Iterable[tuple[str, int]]) -> None:
        if isinstance(axes, Mapping):
            items = tuple(axes.items())
        elif isinstance(axes, (str, bytes)) or not isinstance(axes, Iterable):
            raise MeshError(
                f"a mesh is given as a mapping or (name, size) pairs, e.g. {{'x': 2}}; got {axes!r}"
            )
        else:
            items = tuple(axes)
        if not items:
            raise MeshError("a mesh needs at least one axis")
        seen: dict[str, int] = {}
        sizes: list[int] = []
        for pos, item in enumerate(items):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise MeshError(f"mesh axis #{pos} must be a (name, size) pair, got {item!r}")
            name, size = item
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise MeshError(
                    f"mesh axis #{pos} has invalid name {name!r} (must be an ASCII identifier)"
                )
            if name in seen:
                raise MeshError(f"mesh axis {name!r} appears twice")
            n = _as_int(size)
            if n is None or n < 1:
                raise MeshError(f"mesh axis {name!r} has size {size!r}; sizes must be integers >= 1")
            seen[name] = pos
            sizes.append(n)
        object.__setattr__(self, "axes", tuple((str(n), s) for (n, _), s in zip(items, sizes)))
        object.__setattr__(self, "_index", seen)
        object.__setattr__(self, "_spans_ok", set())  # validated sub-axes (memo; not part of equality)

    def __hash__(self) -> int:
        """Cached: the mesh is part of every memo key of the planner (thousands a plan)."""
        h = self.__dict__.get(HASH_KEY)
        return store_hash(self, self.axes) if h is None else h

    __getstate__ = state_without_hash

    # -- basic queries -------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.axes)

    @cached_property
    def size(self) -> int:
        return math.prod(s for _, s in self.axes)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def position(self, name: str) -> int:
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise UnknownAxisError(
                f"unknown mesh axis {name!r}; the mesh has axes {list(self.names)}"
            ) from None

    def axis_size(self, a: Axis) -> int:
        """Size of a whole axis or a sub-axis (validated against this mesh)."""
        if isinstance(a, str) and a in self._index:
            return self.axes[self._index[a]][1]  # hot path: planners ask this constantly
        if isinstance(a, str):
            return self.axes[self.position(a)][1]
        self.check_subaxis(a)
        return int(a.size)

    def check_subaxis(self, a: SubAxis) -> None:
        if not isinstance(a, SubAxis):
            raise UnknownAxisError(
                f"{a!r} is not a mesh axis reference (an axis name or a SubAxis); "
                f"the mesh has axes {list(self.names)}"
            )
        n = self.axes[self.position(a.name)][1]
        pre, size = _as_int(a.pre), _as_int(a.size)
        if pre is None or size is None or pre < 1 or size < 1 or n % (pre * size) != 0:
            raise UnknownAxisError(
                f"sub-axis {a} does not fit mesh axis {a.name!r} of size {n}: pre and size must be "
                f"integers >= 1 and pre*size = {a.pre}*{a.size} must divide {n}"
            )

    def span(self, a: Axis) -> tuple[str, int, int]:
        """(axis name, pre, size) of ``a`` as a factor of its mesh axis; a whole axis is (name, 1, N)."""
        if isinstance(a, str):
            return (a, 1, self.axis_size(a))
        try:
            if a in self._spans_ok:
                return (a.name, a.pre, a.size)
        except TypeError:  # an unhashable field: let check_subaxis name the problem
            pass
        self.check_subaxis(a)
        if isinstance(a.pre, int) and isinstance(a.size, int):
            self._spans_ok.add(a)
        return (a.name, int(a.pre), int(a.size))

    # -- device ids <-> coordinates (row-major) -----------------------------------------------------
    def coords(self, device: int) -> dict[str, int]:
        dev = _as_int(device)
        if dev is None or not 0 <= dev < self.size:
            raise MeshError(f"device id {device} out of range for a mesh of {self.size} devices")
        out: dict[str, int] = {}
        for name, s in reversed(self.axes):
            out[name] = dev % s
            dev //= s
        return {n: out[n] for n in self.names}

    def device_id(self, coords: Mapping[str, int]) -> int:
        if not isinstance(coords, Mapping):
            raise MeshError(f"coordinates must be a mapping axis name -> int, got {coords!r}")
        dev = 0
        for name, s in self.axes:
            if name not in coords:
                raise MeshError(f"coordinates {dict(coords)} lack mesh axis {name!r}")
            c = _as_int(coords[name])
            if c is None or not 0 <= c < s:
                raise MeshError(f"coordinate {name}={coords[name]!r} out of range for axis size {s}")
            dev = dev * s + c
        extra = set(coords) - set(self.names)
        if extra:
            raise UnknownAxisError(f"coordinates name unknown mesh axes {sorted(extra)}")
        return dev

    def axis_coord(self, a: Axis, coords: Mapping[str, int]) -> int:
        """The coordinate along (sub-)axis ``a`` of the device at ``coords``."""
        name, pre, size = self.span(a)
        n = self.axes[self.position(name)][1]
        c = _as_int(coords[name]) if name in coords else None
        if c is None or not 0 <= c < n:
            raise MeshError(
                f"coordinates {dict(coords)} give no valid coordinate for mesh axis {name!r} of size {n}"
            )
        return int(subaxis_digit(c, n, pre, size))

    def coord_table(self) -> Any:
        """int array [devices, axes] of every device's coordinates (row-major ids)."""
        import numpy as np

        self.check_enumerable()
        sizes = [s for _, s in self.axes]
        idx = np.unravel_index(np.arange(self.size, dtype=np.int64), sizes)
        return np.stack(idx, axis=1).astype(np.int64).reshape(self.size, len(sizes))

    def check_enumerable(self, what: str = "a per-device table") -> None:
        """Raise ``MeshTooLargeError`` when the mesh has more than ``MAX_ENUMERATED_DEVICES``."""
        if self.size > MAX_ENUMERATED_DEVICES:
            raise MeshTooLargeError(
                f"mesh {self} has {self.size:,} devices; {what} is limited to {MAX_ENUMERATED_DEVICES:,} "
                f"devices (spmd_types.mesh.MAX_ENUMERATED_DEVICES): plan on a mesh of the axes the move uses"
            )

    def __str__(self) -> str:
        return "{" + ",".join(f"{n}={s}" for n, s in self.axes) + "}"

    @staticmethod
    def parse(text: str) -> Mesh:
        """Parse ``x=2,y=4`` (braces optional), as the CLI takes it.

        :raises MeshError: for text not of the form ``name=size,...`` or an invalid axis.
        """
        if not isinstance(text, str):
            raise MeshError(f"mesh text must be a string such as 'x=2,y=4', got {text!r}")
        body = text.strip()
        if body.startswith("{") and body.endswith("}"):
            body = body[1:-1]
        items: list[tuple[str, int]] = []
        for part in body.split(","):
            m = _MESH_ITEM.fullmatch(part)
            if not m:
                raise MeshError(
                    f"mesh axis {part.strip()!r} in {text!r} must be written name=size, e.g. x=2"
                )
            items.append((m["name"], int(m["size"])))
        return Mesh(items)

    # -- JAX interop ----------------------------------------------------------------------------
    def to_jax(self, devices: Any = None, explicit: bool = True) -> jax.sharding.Mesh:
        """A ``jax.sharding.Mesh`` with the same axes, row-major over ``devices`` (default: the first
        ``size`` devices), with Explicit axes unless ``explicit=False`` (Auto).

        :raises MeshError: when fewer than ``size`` devices are available (the message says how to
            simulate CPU devices).
        """
        import jax
        import numpy as np

        devs = list(jax.devices() if devices is None else np.asarray(devices).reshape(-1))
        if len(devs) < self.size:
            raise MeshError(
                f"mesh {self} needs {self.size} devices but only {len(devs)} are available; for CPU "
                f"set XLA_FLAGS=--xla_force_host_platform_device_count={self.size} before importing jax"
            )
        arr = np.array(devs[: self.size], dtype=object).reshape([s for _, s in self.axes])
        kind = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
        return jax.sharding.Mesh(arr, self.names, axis_types=(kind,) * len(self.axes))

    @staticmethod
    def from_jax(mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh) -> Mesh:
        return Mesh(tuple((str(n), int(s)) for n, s in mesh.shape.items()))

    @staticmethod
    def coerce(mesh: object, what: str = "mesh") -> Mesh:
        """Ours, a ``jax.sharding.Mesh`` or an ``AbstractMesh`` (only names and sizes are read, so
        planning needs no devices), or text such as ``x=2,y=4``.

        :raises MeshError: for anything else, naming the argument ``what``.
        """
        if isinstance(mesh, Mesh):
            return mesh
        if isinstance(mesh, str):
            return Mesh.parse(mesh)
        shape = getattr(mesh, "shape", None)
        if hasattr(mesh, "axis_names") and isinstance(shape, Mapping):
            return Mesh.from_jax(mesh)  # type: ignore[arg-type]
        raise MeshError(
            f"{what} must be a spmd_types.Mesh, a jax.sharding.Mesh or AbstractMesh, or text such as "
            f"'x=2,y=4'; got {type(mesh).__name__}"
        )
