"""Type-directed array redistribution: the synthesizer, its cost model and executors."""

from redist.api import redistribute
from redist.cost import CostModel
from redist.errors import ExecutionError, IncompatibleTypesError, RedistError, StepError
from redist.plan import Plan
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
    "ReduceScatter", "Step", "StepError", "redistribute",
]
