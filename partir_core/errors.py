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
    """A tactic shards a dimension whose size its axes do not divide. On an input, ``leaf``,
    ``dim`` and ``multiple`` say which flattened input leaf and dimension, and the axes' product
    (what ``partition(..., uneven="pad")`` pads it to a multiple of)."""

    leaf: int | None = None
    dim: int | None = None
    multiple: int | None = None


class TacticError(PartitionError):
    """A malformed tactic (bad dimension index, unknown policy, pinned value...)."""


class UnknownPrimitiveError(PartitionError):
    """The program uses a primitive with no sharding rule (and the policy is ``"error"``)."""


class UnevenPrimitiveError(IndivisibleDimError):
    """Padding a dimension to a multiple of its axes would change what a primitive computes on it
    (and no mask makes it exact): partition with ``uneven="refuse"`` or shard another dimension."""
