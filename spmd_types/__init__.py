"""Meshes and sharding types: the bottom layer of redist (no JAX import at module import time)."""

from spmd_types.dtypes import DTYPES, canonical_dtype, itemsize
from spmd_types.errors import (
    DuplicateAxisError,
    IndivisibleDimensionError,
    InvalidSizeError,
    MeshError,
    MeshMismatchError,
    MeshTooLargeError,
    RankMismatchError,
    ShardingTypeError,
    SizeLimitError,
    TypeSyntaxError,
    UnknownAxisError,
    UnknownLayoutError,
)
from spmd_types.mesh import Axis, Mesh, SubAxis, axis_name
from spmd_types.types import ShardingType, format_type, parse_type

parse = parse_type

__all__ = [
    "Axis", "DTYPES", "DuplicateAxisError", "IndivisibleDimensionError", "InvalidSizeError",
    "Mesh", "MeshError", "MeshMismatchError", "MeshTooLargeError", "RankMismatchError", "ShardingType",
    "ShardingTypeError", "SizeLimitError", "SubAxis", "TypeSyntaxError", "UnknownAxisError", "UnknownLayoutError",
    "axis_name",
    "canonical_dtype", "format_type", "itemsize", "parse", "parse_type",
]
