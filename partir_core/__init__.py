"""partir_core: a tactic-driven partitioner of JAX programs (PartIR, arXiv 2401.11202).

``partition(fn, mesh, schedule)`` traces ``fn``, applies tactics (``Shard``, ``ShardParams``,
``Pin``, ``ShardExperts``) with sharding propagation after each, lowers to one ``shard_map``
program whose layout changes are planned by ``redist``, and can ``explain()`` and ``simulate()``
the result.
"""

from partir_core.api import Analysis, Partitioned, analyze, partition
from partir_core.auto import AutoResult, auto
from partir_core.errors import (
    AxisUsedTwiceError,
    IndivisibleDimError,
    PartitionError,
    TacticError,
    UnevenPrimitiveError,
    UnknownInputError,
    UnknownPrimitiveError,
)
from partir_core.simulate import Simulation, hlo_collectives, simulate
from partir_core.tactics import Pin, Shard, ShardExperts, ShardParams

__all__ = [
    "Analysis", "AutoResult", "AxisUsedTwiceError", "IndivisibleDimError", "PartitionError", "Partitioned", "Pin",
    "Shard", "ShardExperts", "ShardParams", "Simulation", "TacticError", "UnevenPrimitiveError", "UnknownInputError", "UnknownPrimitiveError",
    "analyze", "auto", "hlo_collectives", "partition", "simulate",
]
