"""Where an array lives: a sharding type on a logical mesh plus the physical devices of the mesh.

A ``ShardingType`` says which block each *position* of its mesh holds; a ``Placement`` adds the
ordered tuple of global device ids the positions map to (row-major, as ``jax.sharding.Mesh``'s
``devices`` array lists them). Two placements may use other axis names and sizes, a subset, a
disjoint set or a superset of each other's devices, in any order: that is what a move between
meshes needs to know (docs/design.md section 2.7). Plain data: no JAX here (``jax_placement``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from spmd_types.errors import MeshError, TypeSyntaxError
from spmd_types.mesh import Mesh
from spmd_types.types import ShardingType, parse_type


class PlacementError(MeshError):
    """A device list that does not fit its mesh: wrong length, an id that is not an integer >= 0.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.placement import Placement
    >>> Placement(parse("f32[8@x]", Mesh({"x": 2})), (0, 1, 2))
    Traceback (most recent call last):
    spmd_types.placement.PlacementError: mesh {x=2} has 2 positions but 3 device ids were given...

    ```
    """


class DuplicateDeviceError(PlacementError):
    """One device id at two positions of a mesh (JAX's ``Mesh`` refuses it too).

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.placement import Placement
    >>> Placement(parse("f32[8@x]", Mesh({"x": 2})), (3, 3))
    Traceback (most recent call last):
    spmd_types.placement.DuplicateDeviceError: device 3 is at positions 0 and 1 of mesh {x=2}...

    ```
    """


class UnknownDeviceError(PlacementError):
    """A device id that no available device has.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.placement import Placement
    >>> Placement(parse("f32[8@x]", Mesh({"x": 2})), (0, 9)).check_devices(range(8))
    Traceback (most recent call last):
    spmd_types.placement.UnknownDeviceError: device 9 (position 1 of mesh {x=2}) does not exist...

    ```
    """


class PlacementSyntaxError(TypeSyntaxError, PlacementError):
    """Placement text that does not parse; carries the 1-based column of the problem.

    Example:

    ```pycon
    >>> from spmd_types.placement import Placement, PlacementSyntaxError
    >>> try:
    ...     Placement.parse("f32[8@x] on {x=2} at [0,1]")
    ... except PlacementSyntaxError as e:
    ...     print(str(e).splitlines()[0])
    expected 'at devices [ids]' after the mesh, e.g. 'at devices [0,1]' at column 18

    ```
    """


_TEXT = re.compile(r"(?P<type>\S.*?)\s+on\s+(?P<mesh>\{[^}]*\})(?P<rest>.*)", re.S)
_DEVICES = re.compile(r"\s+at\s+devices\s+(?P<open>[\[(])(?P<ids>[^\])]*)(?P<close>[\])])\s*", re.S)
_ID = re.compile(r"\s*([0-9]+)\s*")


@dataclass(frozen=True)
class Placement:
    """A layout ``type`` whose mesh position ``p`` is the physical device ``devices[p]``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.placement import Placement
    >>> p = Placement(parse("f32[8@x,4]", Mesh({"x": 2})), (6, 4))
    >>> print(p)
    f32[8@x,4] on {x=2} at devices [6,4]
    >>> p.holder_of_position(1), p.position_of(6)
    (4, 0)

    ```

    :raises PlacementError: ``devices`` is not one integer id >= 0 per mesh position.
    :raises DuplicateDeviceError: an id at two positions.
    """

    type: ShardingType
    devices: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.type, ShardingType):
            raise PlacementError(f"a placement's type must be a ShardingType, got {type(self.type).__name__}")
        ids = _ids(self.devices)
        mesh = self.type.mesh
        if len(ids) != mesh.size:
            raise PlacementError(f"mesh {mesh} has {mesh.size} positions but {len(ids)} device ids were "
                                 f"given; give one device id per position, row-major")
        seen: dict[int, int] = {}
        for p, d in enumerate(ids):
            if d in seen:
                raise DuplicateDeviceError(f"device {d} is at positions {seen[d]} and {p} of mesh {mesh}; "
                                           f"a device holds at most one position of a mesh")
            seen[d] = p
        object.__setattr__(self, "devices", ids)

    @property
    def mesh(self) -> Mesh:
        return self.type.mesh

    def position_of(self, device: int) -> int | None:
        """The mesh position of physical ``device``, or ``None`` where it is not in the mesh."""
        return self._positions.get(device)

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {d: p for p, d in enumerate(self.devices)}

    def holder_of_position(self, position: int) -> int:
        return self.devices[position]

    def check_devices(self, available: Collection[int]) -> None:
        """Raise ``UnknownDeviceError`` for an id not in ``available``."""
        have = set(available)
        for p, d in enumerate(self.devices):
            if d not in have:
                raise UnknownDeviceError(f"device {d} (position {p} of mesh {self.mesh}) does not exist; "
                                         f"the available device ids are {sorted(have)}")

    def device_table(self) -> np.ndarray:
        """int64 ``[positions]``: the physical id at each mesh position."""
        return np.array(self.devices, dtype=np.int64)

    def __str__(self) -> str:
        """``TYPE on MESH at devices [IDS]``, which ``Placement.parse`` reads back."""
        return f"{self.type} on {self.mesh} at devices [{','.join(map(str, self.devices))}]"

    @staticmethod
    def parse(text: str, mesh: Mesh | str | None = None, devices: Sequence[int] | None = None) -> Placement:
        """The placement ``str(p)`` writes, ``f32[8@x,4] on {x=2} at devices [6,4]`` (spaces
        free, ``(6, 4)`` also read); or, given ``mesh`` and ``devices``, type text alone on them.

        Example:

        ```pycon
        >>> from spmd_types.placement import Placement
        >>> p = Placement.parse("f32[8@x,16@y] on {x=2,y=2} at devices [4,5,6,7]")
        >>> Placement.parse(str(p)) == p, p.holder_of_position(3)
        (True, 7)

        ```

        :raises PlacementSyntaxError: text not of the form ``TYPE on {MESH} at devices [IDS]``,
            with the column of the offending part.
        :raises ShardingTypeError: a subclass for a type that does not parse or fit the mesh
            (``TypeSyntaxError`` with its column), or a mesh that does not parse (``MeshError``).
        :raises PlacementError: device ids that do not fit the mesh.
        """
        if mesh is not None or devices is not None:
            if mesh is None or devices is None:
                raise PlacementError("give both mesh and devices with type text, or neither with placement text")
            return Placement(parse_type(text, Mesh.coerce(mesh)), tuple(devices))
        return _parse_text(text)


def _parse_text(text: object) -> Placement:
    """``TYPE on {MESH} at devices [IDS]`` -> a placement (docstring of ``Placement.parse``)."""
    if not isinstance(text, str):
        raise PlacementError(f"placement text must be a string, got {type(text).__name__}")
    m = _TEXT.fullmatch(text.strip())
    lead = len(text) - len(text.lstrip())
    if m is None:
        col = lead + 1 + len(text.strip())
        raise PlacementSyntaxError("expected ' on {mesh}' after the type, e.g. 'f32[8@x] on {x=2} at devices [0,1]'",
                                   text, col)
    mesh = Mesh.parse(m["mesh"])
    t = parse_type(m["type"], mesh)
    rest_col = lead + m.start("rest") + 1
    d = _DEVICES.fullmatch(m["rest"])
    if d is None or "([".index(d["open"]) != ")]".index(d["close"]):
        raise PlacementSyntaxError("expected 'at devices [ids]' after the mesh, e.g. 'at devices [0,1]'", text, rest_col)
    ids: list[int] = []
    body = d["ids"].strip().rstrip(",") if d["open"] == "(" else d["ids"]
    col = rest_col + d.start("ids")
    for item in body.split(",") if body.strip() else []:
        n = _ID.fullmatch(item)
        if n is None:
            raise PlacementSyntaxError(f"device id {item.strip()!r} is not an integer >= 0", text, col)
        ids.append(int(n[1]))
        col += len(item) + 1
    return Placement(t, tuple(ids))


def _ids(devices: object) -> tuple[int, ...]:
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence | np.ndarray | range):
        raise PlacementError(f"devices must be a sequence of integer device ids, got {devices!r}")
    out: list[int] = []
    for p, d in enumerate(np.asarray(devices, dtype=object).reshape(-1).tolist()):
        try:
            i = operator.index(d) if not isinstance(d, bool) else None
        except TypeError:
            i = None
        if i is None or i < 0:
            raise PlacementError(f"device id at position {p} is {d!r}; ids are integers >= 0")
        out.append(int(i))
    return tuple(out)


__all__ = ["DuplicateDeviceError", "Placement", "PlacementError", "PlacementSyntaxError", "UnknownDeviceError"]
