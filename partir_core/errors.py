"""Typed errors of the partitioner; each names the bad input so a schedule can be fixed directly.

They derive from the type layer's errors where the meaning is the same (an axis used twice, an
indivisible dimension), so ``except ShardingTypeError`` catches every user-input problem.
"""

from __future__ import annotations

from spmd_types import DuplicateAxisError, IndivisibleDimensionError, ShardingTypeError


class PartitionError(ShardingTypeError):
    """Base class of partitioner errors."""


class UnknownInputError(PartitionError, KeyError):
    """A tactic names a pytree path that is not an input (or output) of the function."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class AxisUsedTwiceError(PartitionError, DuplicateAxisError):
    """A tactic shards one value over a mesh axis that value already uses."""


class IndivisibleDimError(PartitionError, IndivisibleDimensionError):
    """A tactic shards a dimension whose size its axes do not divide."""


class TacticError(PartitionError):
    """A malformed tactic (bad dimension index, unknown policy, pinned value...)."""


class UnknownPrimitiveError(PartitionError):
    """The program uses a primitive with no sharding rule (and the policy is ``"error"``)."""
