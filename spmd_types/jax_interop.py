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
    UnknownLayoutError,
)
from spmd_types.mesh import Mesh, SubAxis
from spmd_types.types import ShardingType


def mesh_to_jax(mesh: Mesh, devices: Any = None, explicit: bool = True) -> jax.sharding.Mesh:
    """``mesh.to_jax(devices, explicit)``: a JAX mesh with our axes (Explicit unless ``explicit=False``),
    over the first ``mesh.size`` devices unless ``devices`` are given.

    Examples:
        >>> from spmd_types import Mesh
        >>> from spmd_types.jax_interop import mesh_to_jax
        >>> jm = mesh_to_jax(Mesh({"x": 2, "y": 4}))
        >>> dict(jm.shape), [t.name for t in jm.axis_types]
        ({'x': 2, 'y': 4}, ['Explicit', 'Explicit'])
    """
    return mesh.to_jax(devices, explicit)


def to_partition_spec(t: ShardingType) -> PartitionSpec:
    """The ``PartitionSpec`` of ``t`` (unreduced and reduced axes included), as ``jax.typeof`` shows it.

    Examples:
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.jax_interop import to_partition_spec
        >>> to_partition_spec(parse("f32[8@(x,y),4]{U:z}", Mesh({"x": 2, "y": 2, "z": 2})))
        P(('x', 'y'), None, unreduced={'z'})

    Raises:
        ShardingTypeError: ``t`` uses a sub-axis (``y:(1)2``), which a ``PartitionSpec`` cannot express.
    """
    entries: list[Any] = []
    for d, axes in enumerate(t.dims):
        for a in axes:
            if isinstance(a, SubAxis):
                raise ShardingTypeError(
                    f"dimension {d} uses sub-axis {a}, which a PartitionSpec cannot express"
                )
        entries.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    return PartitionSpec(*entries, unreduced=_names(t.unreduced, "unreduced"), reduced=_names(t.reduced, "reduced"))


def _names(axes: frozenset[Any], kind: str) -> frozenset[str]:
    for a in axes:
        if isinstance(a, SubAxis):
            raise ShardingTypeError(f"{kind} sub-axis {a} cannot be expressed in a PartitionSpec")
    return frozenset(axes)


def to_named_sharding(t: ShardingType, mesh: jax.sharding.Mesh) -> NamedSharding:
    """``NamedSharding(mesh, to_partition_spec(t))``, for a JAX mesh with ``t``'s axes.

    Examples:
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.jax_interop import to_named_sharding
        >>> mesh = Mesh({"x": 2})
        >>> to_named_sharding(parse("f32[8@x]", mesh), mesh.to_jax()).spec
        P('x',)

    Raises:
        MeshMismatchError: ``mesh`` has other axis names or sizes than ``t``'s mesh.
        ShardingTypeError: ``t`` uses a sub-axis.
    """
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
    """The sharding type of a ``shape``/``dtype`` array laid out by ``spec`` on ``mesh`` (entries
    missing at the end are unsharded dimensions, as in JAX).

    Examples:
        >>> from jax.sharding import PartitionSpec as P
        >>> from spmd_types import Mesh
        >>> from spmd_types.jax_interop import from_partition_spec
        >>> print(from_partition_spec(P("y", reduced={"x"}), (8, 4), "float32", Mesh({"x": 2, "y": 4})))
        f32[8@y,4]{R:x}
        >>> from_partition_spec(P("x", None, None), (8, 4), "float32", Mesh({"x": 2}))
        Traceback (most recent call last):
        spmd_types.errors.RankMismatchError: PartitionSpec P('x', None, None) has 3 entries but the shape [8, 4] has rank 2

    Raises:
        RankMismatchError: more entries than ``shape`` has dimensions.
        UnknownAxisError: an axis not on ``mesh``, or an entry that is no axis name.
        ShardingTypeError: any other reason the spec is no type (its subclass names it).
    """
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
    unreduced = _spec_set(spec, "unreduced")
    reduced = _spec_set(spec, "reduced")
    return ShardingType(shape, canonical_dtype(dtype), dims, mesh, unreduced, reduced)


def _spec_set(spec: PartitionSpec, kind: str) -> list[str]:
    """A spec's ``unreduced`` or ``reduced`` axis names, sorted (they are sets in JAX)."""
    axes = getattr(spec, kind, None) or ()
    if any(not isinstance(a, str) for a in axes):
        raise UnknownAxisError(f"PartitionSpec {spec} has a non-name {kind} axis")
    return sorted(axes)


def from_named_sharding(ns: NamedSharding, shape: Sequence[int], dtype: Any) -> ShardingType:
    """``from_partition_spec`` on the sharding's own mesh (all its axes).

    Examples:
        >>> import jax
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> from spmd_types import Mesh
        >>> from spmd_types.jax_interop import from_named_sharding
        >>> ns = NamedSharding(Mesh({"x": 2, "y": 4}).to_jax(), P(None, ("y", "x")))
        >>> print(from_named_sharding(ns, (4, 16), "bfloat16"))
        bf16[4,16@(y,x)]

    Raises:
        ShardingTypeError: ``ns`` is no ``NamedSharding``, or its spec is no type (as ``from_partition_spec``).
    """
    if not isinstance(ns, NamedSharding):
        raise ShardingTypeError(f"expected a jax.sharding.NamedSharding, got {ns!r}")
    return from_partition_spec(ns.spec, shape, dtype, Mesh.from_jax(ns.mesh))


def mesh_axis_kinds(mesh: Any) -> dict[str, str]:
    """Axis name -> ``"Explicit"`` / ``"Auto"`` / ``"Manual"`` of a JAX (abstract) mesh."""
    return {str(n): str(getattr(k, "name", k)) for n, k in zip(mesh.axis_names, mesh.axis_types)}


def typed_mesh(mesh: Any, skip_auto: bool = False) -> Mesh:
    """Our mesh of a JAX (abstract) mesh's non-Manual axes: the axes a type inside ``shard_map``
    ranges over (the manual ones index the block the value is). With ``skip_auto`` the Auto axes
    are left out too: while tracing, their layout is XLA's choice, not part of the value's type."""
    kinds = mesh_axis_kinds(mesh)
    skip = {"Manual", "Auto"} if skip_auto else {"Manual"}
    return Mesh([(n, int(s)) for n, s in mesh.shape.items() if kinds[str(n)] not in skip])


def type_of_aval(aval: Any, skip_auto: bool = False) -> ShardingType:
    """The type of an abstract value (``jax.typeof(x)``, what a tracer knows about its layout).

    Its mesh is the JAX mesh's non-Manual axes: inside a ``shard_map`` the value is the block of
    the manual axes, typed over the axes left. Auto axes have no layout while tracing (XLA picks
    it later), so a mesh with any is refused with a message saying what to use instead; with
    ``skip_auto`` the type ranges over the Explicit axes only (``redist.reshard`` leaves the Auto
    ones to JAX), and only a mesh with no Explicit axis is refused.
    """
    sharding = getattr(aval, "sharding", None)
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        raise UnknownLayoutError(
            f"the traced value {aval} is not laid out on a mesh; give it a layout first (an input "
            f"placed with jax.device_put(x, NamedSharding(mesh, spec)), or a jax.set_mesh context)"
        )
    kinds = mesh_axis_kinds(sharding.mesh)
    auto = [n for n, k in kinds.items() if k == "Auto"]
    if auto and not (skip_auto and "Explicit" in kinds.values()):
        raise UnknownLayoutError(
            f"mesh axes {auto} of {aval} are Auto: while tracing their layout is XLA's choice, not "
            f"a type; make them Explicit (jax.make_mesh(..., axis_types=(AxisType.Explicit,) * n)), "
            f"or reshard outside jax.jit"
        )
    if all(k == "Manual" for k in kinds.values()):
        raise UnknownLayoutError(
            f"every mesh axis of {aval} is Manual (inside shard_map): the value is a local block "
            f"whose global type JAX does not track; call redist.reshard_local(x, src, dst)"
        )
    return from_partition_spec(sharding.spec, aval.shape, aval.dtype, typed_mesh(sharding.mesh, skip_auto))


def type_of(x: jax.Array) -> ShardingType:
    """The sharding type of a JAX array laid out with a ``NamedSharding``, or of a tracer (from its
    abstract value, see ``type_of_aval``).

    Examples:
        >>> import jax, numpy as np
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> from spmd_types import Mesh
        >>> from spmd_types.jax_interop import type_of
        >>> jm = Mesh({"x": 2, "y": 4}).to_jax()
        >>> print(type_of(jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(jm, P("x", "y")))))
        f32[8@x,8@y]
        >>> type_of(np.zeros(3))
        Traceback (most recent call last):
        spmd_types.errors.ShardingTypeError: expected a jax.Array, got ndarray

    Raises:
        UnknownLayoutError: an array without a ``NamedSharding``, or a tracer whose mesh has Auto or only Manual axes.
        ShardingTypeError: ``x`` is no array.
    """
    if isinstance(x, jax.core.Tracer):
        return type_of_aval(jax.typeof(x))
    if not hasattr(x, "sharding") or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ShardingTypeError(f"expected a jax.Array, got {type(x).__name__}")
    if not isinstance(x.sharding, NamedSharding):
        raise UnknownLayoutError(
            f"array has sharding {x.sharding!r}; a NamedSharding is required: place it with "
            f"jax.device_put(x, NamedSharding(mesh, spec))"
        )
    return from_named_sharding(x.sharding, x.shape, x.dtype)
