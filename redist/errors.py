"""Typed errors of the redistribution layer (all ``ShardingTypeError`` subclasses, so one catch works)."""

from __future__ import annotations

from spmd_types.errors import ShardingTypeError


class RedistError(ShardingTypeError):
    """Base class for planning and execution errors.

    Example:

    ```pycon
    >>> from redist import RedistError, clear_caches
    >>> clear_caches("some")
    Traceback (most recent call last):
    redist.errors.RedistError: level must be one of ['all', 'plans'], got 'some'

    ```
    """


class StepError(RedistError):
    """A step applied to a type it does not fit (wrong axis, axis not minor-most, axis in use...).

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> from redist import AllGather
    >>> AllGather(0, ("y",)).apply(parse("f32[8@(y,x),8]", Mesh({"x": 2, "y": 4})))
    Traceback (most recent call last):
    redist.errors.StepError: all_gather(dim=0, axes=(y)): axes (y) are not the minor-most axes of dimension 0 of f32[8@(y,x),8]

    ```
    """


class IncompatibleTypesError(RedistError):
    """Source and destination differ in global shape, dtype or mesh: redistribution is not a reshape.

    Example:

    ```pycon
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> redistribute("f32[8@x]", "f32[16@x]", Mesh({"x": 2}))
    Traceback (most recent call last):
    redist.errors.IncompatibleTypesError: global shapes differ: source [8], destination [16]...

    ```
    """


class ExecutionError(RedistError):
    """An array handed to an executor does not match the plan's source type.

    Example:

    ```pycon
    >>> import numpy as np
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> plan = redistribute("f32[8@x]", "f32[8]", Mesh({"x": 2}))
    >>> plan(np.zeros(8, np.float32))
    Traceback (most recent call last):
    redist.errors.ExecutionError: expected a jax.Array laid out as f32[8@x], got ndarray...

    ```
    """


class UnsummableDtypeError(RedistError):
    """A plan needs a sum (a pending-sum source or destination) of a dtype JAX cannot add (bool).

    Example:

    ```pycon
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> redistribute("pred[8]{U:x}", "pred[8]", Mesh({"x": 2}))
    Traceback (most recent call last):
    redist.errors.UnsummableDtypeError: the source type pred[8]{U:x} has a pending sum (unreduced axes) of dtype pred, which cannot be summed...

    ```
    """


class CalibrationError(RedistError):
    """Calibration asked of what cannot give it: an unknown clock, fewer than 2 devices, profiles
    of different backends to refit together (``redist calibrate``, ``redist.calibrate``).

    Example:

    ```pycon
    >>> from redist.calibrate import refit
    >>> refit([])
    Traceback (most recent call last):
    redist.errors.CalibrationError: refit needs profiles of one backend, got []; refit each backend's profiles apart

    ```
    """


class CostModelError(RedistError):
    """A cost model or objective argument that is not one: an unknown objective name, a cost
    model given as a string, a class or a dict, or a model whose objective contradicts the one asked.

    Example:

    ```pycon
    >>> from redist import redistribute
    >>> redistribute("f32[8@x]", "f32[8]", "x=2", cost_model="bytes")
    Traceback (most recent call last):
    redist.errors.CostModelError: cost_model='bytes' is a string, not a CostModel: to choose an objective pass objective='bytes' instead...

    ```
    """
