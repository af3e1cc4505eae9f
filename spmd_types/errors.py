"""Typed errors of the type layer.

Every error names the offending part (axis, dimension, sizes, column) so a user can fix the input
without reading a traceback. All derive from ``ShardingTypeError`` (a ``ValueError``), so callers can
catch one class.
"""

from __future__ import annotations


class ShardingTypeError(ValueError):
    """Base class: an invalid mesh, sharding type, or type text."""


class MeshError(ShardingTypeError):
    """A mesh is malformed: empty/duplicate axis name, size < 1, device id out of range."""


class UnknownAxisError(ShardingTypeError):
    """A type names an axis the mesh does not have."""


class DuplicateAxisError(ShardingTypeError):
    """An axis (or overlapping sub-axes of one axis) appears twice in one type."""


class IndivisibleDimensionError(ShardingTypeError):
    """A dimension's size is not divisible by the product of the axes sharding it."""


class RankMismatchError(ShardingTypeError):
    """The per-dimension axes do not match the rank of the global shape."""


class InvalidSizeError(ShardingTypeError):
    """A dimension or axis size is negative or zero, or a dtype is unknown."""


class TypeSyntaxError(ShardingTypeError):
    """Type text that does not parse; carries the 1-based column of the problem."""

    def __init__(self, message: str, text: str, column: int) -> None:
        pointer = " " * (column - 1) + "^"
        super().__init__(f"{message} at column {column}\n  {text}\n  {pointer}")
        self.text = text
        self.column = column


class MeshMismatchError(ShardingTypeError):
    """Two types that must share a mesh do not."""


class UnknownLayoutError(ShardingTypeError):
    """A value whose layout the types cannot know: traced on Auto mesh axes (XLA decides it), or
    placed without a ``NamedSharding``."""


class MissingExtraError(RuntimeError):
    """An optional dependency (e.g. matplotlib for pictures) is not installed: the message names the
    extra to install. Defined in the bottom layer so the CLI can catch it without importing JAX."""


class SizeLimitError(ShardingTypeError):
    """A dimension or local size exceeds what the vectorised (int64) index math holds."""


class MeshTooLargeError(MeshError):
    """A mesh has too many devices to enumerate where a per-device table is still needed."""
