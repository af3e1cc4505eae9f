"""Element types: canonical short names (as ``jax.typeof`` prints them) and their sizes."""

from __future__ import annotations

from spmd_types.errors import InvalidSizeError

# canonical name -> (numpy name, itemsize)
DTYPES: dict[str, tuple[str, int]] = {
    "pred": ("bool", 1),
    "s8": ("int8", 1), "s16": ("int16", 2), "s32": ("int32", 4), "s64": ("int64", 8),
    "u8": ("uint8", 1), "u16": ("uint16", 2), "u32": ("uint32", 4), "u64": ("uint64", 8),
    "f16": ("float16", 2), "bf16": ("bfloat16", 2), "f32": ("float32", 4), "f64": ("float64", 8),
    "c64": ("complex64", 8), "c128": ("complex128", 16),
    "f8_e4m3fn": ("float8_e4m3fn", 1), "f8_e5m2": ("float8_e5m2", 1),
}
_ALIASES: dict[str, str] = {np_name: short for short, (np_name, _) in DTYPES.items()}
_ALIASES.update({"i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64", "bool": "pred"})


def canonical_dtype(name: object) -> str:
    """``float32`` / ``f32`` / ``numpy.float32`` / ``jnp.bfloat16`` -> ``f32`` ...; unknown names raise.

    Example:

    ```pycon
    >>> import numpy as np
    >>> from spmd_types import canonical_dtype
    >>> canonical_dtype("float32"), canonical_dtype(np.int32), canonical_dtype("bool")
    ('f32', 's32', 'pred')

    ```

    :raises InvalidSizeError: for a name or object that is not one of ``DTYPES`` or their aliases.
    """
    key = name if isinstance(name, str) else _dtype_name(name)
    if key in DTYPES:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    raise InvalidSizeError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}")


def _dtype_name(obj: object) -> str | None:
    """The NumPy name of a dtype-like object (np.dtype, a scalar type such as np.float32)."""
    if obj is None:
        return None
    try:
        import numpy as np

        return str(np.dtype(obj))  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - any non-dtype object is simply unknown
        return None


WIDENED_FLOATS = ("bf16", "f16")
"""The 16-bit floats XLA:CPU widens to f32 in collectives, copies and adds (so moves of them run
as bit patterns and sums accumulate in f32)."""


def is_16bit_float(dtype: object) -> bool:
    """Whether ``dtype`` (a short name, a NumPy name, a NumPy or JAX dtype) is one of
    ``WIDENED_FLOATS``; unknown dtypes are not (no error: callers ask of arrays they move)."""
    key = dtype if isinstance(dtype, str) else _dtype_name(dtype)
    return _ALIASES.get(key, key) in WIDENED_FLOATS if key is not None else False


def itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype`` (any spelling ``canonical_dtype`` accepts).

    Example:

    ```pycon
    >>> from spmd_types import itemsize
    >>> itemsize("bf16"), itemsize("float32")
    (2, 4)

    ```

    :raises InvalidSizeError: for an unknown dtype.
    """
    return DTYPES[canonical_dtype(dtype)][1]


def numpy_dtype(dtype: str) -> object:
    """The NumPy dtype (bfloat16 and float8 come from ml_dtypes, which JAX installs)."""
    import numpy as np

    name = DTYPES[canonical_dtype(dtype)][0]
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)
