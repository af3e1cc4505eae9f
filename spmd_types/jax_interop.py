"""Conversion between our types and JAX's ``Mesh`` / ``NamedSharding`` / ``PartitionSpec``.

The only module of the type layer that imports JAX, so the rest stays importable without it.
Sub-axes exist only inside plans; ``PartitionSpec`` cannot express them, so converting a type that
uses one is an error that names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from spmd_types.dtypes import canonical_dtype
from spmd_types.errors import (
    MeshMismatchError,
    RankMismatchError,
    ShardingTypeError,
    UnknownAxisError,
)
from spmd_types.mesh import Mesh, SubAxis
from spmd_types.types import ShardingType


def mesh_to_jax(mesh: Mesh, devices: Any = None, explicit: bool = True) -> jax.sharding.Mesh:
    """``mesh.to_jax(devices, explicit)``: a JAX mesh with our axes."""
    return mesh.to_jax(devices, explicit)


def to_partition_spec(t: ShardingType) -> PartitionSpec:
    entries: list[Any] = []
    for d, axes in enumerate(t.dims):
        for a in axes:
            if isinstance(a, SubAxis):
                raise ShardingTypeError(
                    f"dimension {d} uses sub-axis {a}, which a PartitionSpec cannot express"
                )
        entries.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    unreduced = set()
    for a in t.unreduced:
        if isinstance(a, SubAxis):
            raise ShardingTypeError(f"unreduced sub-axis {a} cannot be expressed in a PartitionSpec")
        unreduced.add(a)
    return PartitionSpec(*entries, unreduced=frozenset(unreduced))


def to_named_sharding(t: ShardingType, mesh: jax.sharding.Mesh) -> NamedSharding:
    if Mesh.from_jax(mesh) != t.mesh:
        raise MeshMismatchError(f"type is on mesh {t.mesh} but the JAX mesh is {Mesh.from_jax(mesh)}")
    return NamedSharding(mesh, to_partition_spec(t))


def _spec_entry(spec: PartitionSpec, d: int, e: Any) -> tuple[Any, ...]:
    if e is None:
        return ()
    if isinstance(e, str):
        return (e,)
    if isinstance(e, (tuple, list)) and all(isinstance(a, str) for a in e):
        return tuple(e)
    raise UnknownAxisError(
        f"PartitionSpec {spec} entry {d} ({e!r}) is not None, an axis name or a tuple of axis names; "
        f"a sharding type cannot express it"
    )


def from_partition_spec(
    spec: PartitionSpec, shape: Sequence[int], dtype: Any, mesh: Mesh
) -> ShardingType:
    if not isinstance(spec, PartitionSpec):
        raise ShardingTypeError(f"expected a jax.sharding.PartitionSpec, got {spec!r}")
    shape = tuple(shape)
    # ``list(spec)`` raises in JAX when the spec has unreduced/reduced axes: use ``partitions``.
    parts = list(getattr(spec, "partitions", spec))
    if len(parts) > len(shape):
        raise RankMismatchError(
            f"PartitionSpec {spec} has {len(parts)} entries but the shape {list(shape)} has rank {len(shape)}"
        )
    entries = parts + [None] * (len(shape) - len(parts))
    dims = [_spec_entry(spec, d, e) for d, e in enumerate(entries)]
    reduced = getattr(spec, "reduced", None)
    if reduced:
        raise ShardingTypeError(
            f"PartitionSpec {spec} has reduced axes {sorted(map(str, reduced))}, which a sharding "
            f"type cannot express (only unreduced axes)"
        )
    unreduced = getattr(spec, "unreduced", None) or ()
    if any(not isinstance(a, str) for a in unreduced):
        raise UnknownAxisError(f"PartitionSpec {spec} has a non-name unreduced axis")
    return ShardingType(shape, canonical_dtype(dtype), dims, mesh, sorted(unreduced))


def from_named_sharding(ns: NamedSharding, shape: Sequence[int], dtype: Any) -> ShardingType:
    if not isinstance(ns, NamedSharding):
        raise ShardingTypeError(f"expected a jax.sharding.NamedSharding, got {ns!r}")
    return from_partition_spec(ns.spec, shape, dtype, Mesh.from_jax(ns.mesh))


def type_of(x: jax.Array) -> ShardingType:
    """The sharding type of a JAX array laid out with a ``NamedSharding``."""
    if not hasattr(x, "sharding") or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ShardingTypeError(f"expected a jax.Array, got {type(x).__name__}")
    if not isinstance(x.sharding, NamedSharding):
        raise ShardingTypeError(f"array has sharding {x.sharding!r}; a NamedSharding is required")
    return from_named_sharding(x.sharding, x.shape, x.dtype)
