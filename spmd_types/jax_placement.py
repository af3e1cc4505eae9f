"""``Placement`` to and from JAX: a ``NamedSharding`` on a concrete mesh names its devices.

Beside ``jax_interop`` (the other module of the type layer that imports JAX): a placement is the
type ``from_named_sharding`` reads plus the ids of the mesh's ``devices`` array, row-major.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from spmd_types.errors import MeshMismatchError, UnknownLayoutError
from spmd_types.jax_interop import from_named_sharding, to_partition_spec
from spmd_types.mesh import Mesh
from spmd_types.placement import Placement, UnknownDeviceError


def placement_of_sharding(ns: NamedSharding, shape: Sequence[int], dtype: Any) -> Placement:
    """The placement an array of ``shape`` and ``dtype`` laid out as ``ns`` has.

    :raises UnknownLayoutError: ``ns`` is on an abstract mesh (no devices to name).
    :raises IndivisibleDimensionError: the mesh cannot hold ``shape`` in equal blocks.
    """
    if not isinstance(ns, NamedSharding) or not isinstance(ns.mesh, jax.sharding.Mesh):
        raise UnknownLayoutError(f"{ns!r} names no devices: a placement needs a NamedSharding on a concrete "
                                 f"jax.sharding.Mesh")
    ids = tuple(int(d.id) for d in np.asarray(ns.mesh.devices).reshape(-1))
    return Placement(from_named_sharding(ns, shape, dtype), ids)


def placement_of(x: jax.Array) -> Placement:
    """The placement of a placed JAX array (``x.sharding`` a ``NamedSharding``)."""
    ns = getattr(x, "sharding", None)
    if isinstance(x, jax.core.Tracer) or not isinstance(ns, NamedSharding):
        raise UnknownLayoutError(f"x ({type(x).__name__}) is not a placed array with a NamedSharding; place it "
                                 f"with jax.device_put(x, NamedSharding(mesh, spec))")
    return placement_of_sharding(ns, x.shape, x.dtype)


def devices_by_id() -> dict[int, Any]:
    """Every device of this process's backend, by id."""
    return {int(d.id): d for d in jax.devices()}


def to_jax_mesh(p: Placement) -> jax.sharding.Mesh:
    """The JAX mesh of ``p`` (Explicit axes, as ``Mesh.to_jax``), over its devices in order.

    :raises UnknownDeviceError: an id no device of this backend has.
    """
    have = devices_by_id()
    p.check_devices(have)
    return p.mesh.to_jax([have[d] for d in p.devices])


def to_named_sharding(p: Placement, mesh: jax.sharding.Mesh | None = None) -> NamedSharding:
    """The ``NamedSharding`` of ``p``: on ``mesh`` where given (its axes and devices must be
    ``p``'s), else on ``to_jax_mesh(p)``."""
    if mesh is None:
        mesh = to_jax_mesh(p)
    ids = tuple(int(d.id) for d in np.asarray(mesh.devices).reshape(-1))
    if Mesh.from_jax(mesh) != p.mesh:
        raise MeshMismatchError(f"placement is on mesh {p.mesh} but the JAX mesh is {Mesh.from_jax(mesh)}")
    if ids != p.devices:
        raise UnknownDeviceError(f"placement is on devices {p.devices} but the JAX mesh is on {ids}")
    return NamedSharding(mesh, to_partition_spec(p.type))


__all__ = ["devices_by_id", "placement_of", "placement_of_sharding", "to_jax_mesh", "to_named_sharding"]
