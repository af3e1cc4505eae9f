"""Typed errors of the type layer.

Every error names the offending part (axis, dimension, sizes, column) so a user can fix the input
without reading a traceback. All derive from ``ShardingTypeError`` (a ``ValueError``), so callers can
catch one class.
"""

from __future__ import annotations


class ShardingTypeError(ValueError):
    """Base class: an invalid mesh, sharding type, or type text.

    Every error of the project derives from it (``redist.RedistError`` and
    ``proofs.VerificationError`` too), so one ``except`` catches them all.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, ShardingTypeError, parse
    >>> try:
    ...     parse("f32[8@z]", Mesh({"x": 2}))
    ... except ShardingTypeError as e:
    ...     print(type(e).__name__)
    UnknownAxisError

    ```
    """


class MeshError(ShardingTypeError):
    """A mesh is malformed: empty/duplicate axis name, size < 1, device id out of range.

    Example:

    ```pycon
    >>> from spmd_types import Mesh
    >>> Mesh({"x": 0})
    Traceback (most recent call last):
    spmd_types.errors.MeshError: mesh axis 'x' has size 0; sizes must be integers >= 1

    ```
    """


class UnknownAxisError(ShardingTypeError):
    """A type names an axis the mesh does not have.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> parse("f32[8@z]", Mesh({"x": 2, "y": 4}))
    Traceback (most recent call last):
    spmd_types.errors.UnknownAxisError: unknown mesh axis 'z'...

    ```
    """


class DuplicateAxisError(ShardingTypeError):
    """An axis (or overlapping sub-axes of one axis) appears twice in one type.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> parse("f32[8@x,8@x]", Mesh({"x": 2}))
    Traceback (most recent call last):
    spmd_types.errors.DuplicateAxisError: axis 'x' (dimension 1) overlaps 'x' (dimension 0)...

    ```
    """


class IndivisibleDimensionError(ShardingTypeError):
    """A dimension's size is not divisible by the product of the axes sharding it.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> parse("f32[6@y]", Mesh({"y": 4}))
    Traceback (most recent call last):
    spmd_types.errors.IndivisibleDimensionError: dimension 0 of size 6 is not divisible by 4...

    ```
    """


class RankMismatchError(ShardingTypeError):
    """The per-dimension axes do not match the rank of the global shape.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, ShardingType
    >>> ShardingType((8, 8), "f32", [("x",)], Mesh({"x": 2}))
    Traceback (most recent call last):
    spmd_types.errors.RankMismatchError: ...

    ```
    """


class InvalidSizeError(ShardingTypeError):
    """A dimension or axis size is negative or zero, or a dtype is unknown.

    Example:

    ```pycon
    >>> from spmd_types import canonical_dtype
    >>> canonical_dtype("float33")
    Traceback (most recent call last):
    spmd_types.errors.InvalidSizeError: unknown dtype 'float33'; known: [...]

    ```
    """


class TypeSyntaxError(ShardingTypeError):
    """Type text that does not parse; carries the 1-based column of the problem.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, TypeSyntaxError, parse
    >>> try:
    ...     parse("f32[8@x", Mesh({"x": 2}))
    ... except TypeSyntaxError as e:
    ...     print(e.column)
    8

    ```
    """

    def __init__(self, message: str, text: str, column: int) -> None:
        pointer = " " * (column - 1) + "^"
        super().__init__(f"{message} at column {column}\n  {text}\n  {pointer}")
        self.text = text
        self.column = column


class MeshMismatchError(ShardingTypeError):
    """Two types that must share a mesh do not (or a type and the JAX mesh it is placed on).

    Example:

    ```pycon
    >>> import jax
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.jax_interop import to_named_sharding
    >>> t = parse("f32[8@x]", Mesh({"x": 2, "y": 4}))
    >>> to_named_sharding(t, jax.sharding.AbstractMesh((4, 2), ("x", "y")))
    Traceback (most recent call last):
    spmd_types.errors.MeshMismatchError: type is on mesh {x=2,y=4} but the JAX mesh is {x=4,y=2}

    ```
    """


class UnknownLayoutError(ShardingTypeError):
    """A value whose layout the types cannot know: traced on Auto mesh axes (XLA decides it), or
    placed without a ``NamedSharding``.

    Example:

    ```pycon
    >>> import jax.numpy as jnp
    >>> from spmd_types.jax_interop import type_of
    >>> type_of(jnp.zeros(4))
    Traceback (most recent call last):
    spmd_types.errors.UnknownLayoutError: array has sharding SingleDeviceSharding(...); a NamedSharding is required...

    ```
    """


class MissingExtraError(RuntimeError):
    """An optional dependency (e.g. matplotlib for pictures) is not installed: the message names the
    extra to install. Defined in the bottom layer so the CLI can catch it without importing JAX."""


class SizeLimitError(ShardingTypeError):
    """A dimension or local size exceeds what the vectorised (int64) index math holds.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from spmd_types.layout import check_index_range
    >>> check_index_range(parse("f32[18446744073709551616@x]", Mesh({"x": 2})))
    Traceback (most recent call last):
    spmd_types.errors.SizeLimitError: dimension 0 of f32[18446744073709551616@x] has size ... > 2**63-1...

    ```
    """


class MeshTooLargeError(MeshError):
    """A mesh has too many devices to enumerate where a per-device table is still needed.

    Example:

    ```pycon
    >>> from spmd_types import Mesh
    >>> Mesh({f"a{i}": 2 for i in range(30)}).coord_table()
    Traceback (most recent call last):
    spmd_types.errors.MeshTooLargeError: mesh {...} has 1,073,741,824 devices; a per-device table is limited to 4,194,304 devices...

    ```
    """
