"""Type-directed array redistribution: the synthesizer, its cost model and executors."""

from redist.api import redistribute
from redist.cost import CostModel
from redist.errors import (
    ExecutionError,
    IncompatibleTypesError,
    RedistError,
    StepError,
    UnsummableDtypeError,
)
from redist.plan import Plan
from redist.reshard import reshard, reshard_local
from redist.steps import (
    AllGather,
    AllReduce,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CostModel", "Discard", "DynSlice", "Exchange",
    "ExecutionError", "IncompatibleTypesError", "PadUnreduced", "Permute", "Plan", "RedistError",
    "ReduceScatter", "Step", "StepError", "UnsummableDtypeError", "redistribute", "reshard",
    "reshard_local",
]
