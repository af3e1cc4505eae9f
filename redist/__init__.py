"""Type-directed array redistribution: the synthesizer, its cost model and executors.

Importing ``redist`` imports ``redist.jax_reshard``, which registers itself as the runner of
``plan(x)``, ``redist.render``, which registers ``str(plan)``, and ``redist.exchange_facets``, which
registers the point-to-point steps' measures, busiest-device bytes and admission (they read the
exchange's schedule, which the plan vocabulary does not import); ``import proofs`` registers
``plan.verify()`` the same way (docs/design.md section 1).
"""

from redist import exchange_facets as _exchange_facets  # noqa: F401  (registers the p2p steps' measures)
from redist import render as _render  # noqa: F401  (registers ``str(plan)``)
from redist.api import redistribute
from redist.caches import clear_caches
from redist.cost import CostModel
from redist.cross_exec import run_cross_mesh
from redist.cross_mesh import CrossMeshPlan, cross_mesh_plan
from redist.cross_order import best_device_order
from redist.errors import (
    CalibrationError,
    CostModelError,
    ExecutionError,
    IncompatibleTypesError,
    RedistError,
    StepError,
    UnsummableDtypeError,
)
from redist.jax_reshard import Recorded, Recording, record, reshard, reshard_local
from redist.objective import Objective
from redist.plan import Plan
from redist.profile import cost_model_for
from redist.steps import (
    ALL_STEPS,
    KINDS,
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Comm,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from redist.tune_cache import use_tune_cache
from redist.tuning import Tuned, autotune

__all__ = [
    "Tuned", "autotune", "use_tune_cache",
    "ALL_STEPS", "KINDS", "AllGather", "AllReduce", "AllReduceSlice", "AllToAll", "CalibrationError", "Comm", "CostModel", "CostModelError",
    "Discard", "DynSlice", "Exchange", "ExchangeAllToAll", "ExecutionError", "IncompatibleTypesError", "MultiAllToAll", "PadUnreduced",
    "Objective", "Permute", "Plan", "RedistError", "ReduceScatter", "Step", "StepError", "UnsummableDtypeError",
    "CrossMeshPlan", "best_device_order", "cross_mesh_plan", "run_cross_mesh",
    "Recorded", "Recording", "clear_caches", "cost_model_for", "record", "redistribute", "reshard", "reshard_local",
]
