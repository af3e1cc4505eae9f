"""Where an array lives: a sharding type on a logical mesh plus the physical devices of the mesh.

A ``ShardingType`` says which block each *position* of its mesh holds; a ``Placement`` adds the
ordered tuple of global device ids the positions map to (row-major, as ``jax.sharding.Mesh``'s
``devices`` array lists them). Two placements may use other axis names and sizes, a subset, a
disjoint set or a superset of each other's devices, in any order: that is what a move between
meshes needs to know (docs/design.md section 2.7). Plain data: no JAX here (``jax_placement``).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from spmd_types.errors import MeshError
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


@dataclass(frozen=True)
class Placement:
    """A layout ``type`` whose mesh position ``p`` is the physical device ``devices[p]``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.placement import Placement
    >>> p = Placement(parse("f32[8@x,4]", Mesh({"x": 2})), (6, 4))
    >>> print(p)
    f32[8@x,4] on {x=2} at devices (6, 4)
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
        return f"{self.type} on {self.mesh} at devices {self.devices}"

    @staticmethod
    def parse(text: str, mesh: Mesh | str, devices: Sequence[int]) -> Placement:
        """The placement of type text on ``mesh`` over ``devices``."""
        m = Mesh.coerce(mesh)
        return Placement(parse_type(text, m), tuple(devices))


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


__all__ = ["DuplicateDeviceError", "Placement", "PlacementError", "UnknownDeviceError"]
