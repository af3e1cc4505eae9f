"""Typed errors of the redistribution layer (all ``ShardingTypeError`` subclasses, so one catch works)."""

from __future__ import annotations

from spmd_types.errors import ShardingTypeError


class RedistError(ShardingTypeError):
    """Base class for planning and execution errors."""


class StepError(RedistError):
    """A step applied to a type it does not fit (wrong axis, axis not minor-most, axis in use...)."""


class IncompatibleTypesError(RedistError):
    """Source and destination differ in global shape, dtype or mesh: redistribution is not a reshape."""


class ExecutionError(RedistError):
    """An array handed to an executor does not match the plan's source type."""


class UnsummableDtypeError(RedistError):
    """A plan needs a sum (a pending-sum source or destination) of a dtype JAX cannot add (bool)."""


class CalibrationError(RedistError):
    """Calibration asked of what cannot give it: an unknown clock, fewer than 2 devices, profiles
    of different backends to refit together."""


class CostModelError(RedistError):
    """A cost model or objective argument that is not one: an unknown objective name, a cost
    model given as a string, a class or a dict, or a model whose objective contradicts the one asked."""
