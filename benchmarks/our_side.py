"""Our side: the synthesized plan, its own measures, and its compiled executor.

The plan's ``recv_bytes`` / ``peak_bytes`` / ``lower_bound_bytes`` are the synthesizer's claims;
the compiled executor is read with the same HLO parser as XLA's program, so the report can show
what actually runs next to what the plan says (a disagreement is flagged, not hidden).

``redist`` is imported lazily: until the synthesizer exists the suite still runs the XLA side
and reports ours as unavailable.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import jax

from redist.hlo import HloCollectives, parse_collectives
from redist.xla_side import MemoryStats, compile_with_log
from spmd_types import ShardingType


@dataclass(frozen=True)
class OurResult:
    """What our plan claims and what its compiled program does."""

    plan_text: str
    steps: tuple[str, ...]
    recv_bytes: float
    peak_bytes: int
    lower_bound_bytes: float
    model_time_s: float
    planning_s: float  # median of repeated calls to ``redistribute``
    # the compiled executor (None while ``redist.executor`` does not exist yet)
    collectives: HloCollectives | None  # read from our compiled executor's HLO
    hlo_recv_bytes: float | None  # what that HLO moves, counted in the array's dtype
    memory: MemoryStats | None
    compile_s: float | None


def available() -> bool:
    """Whether ``redist.redistribute`` exists (plans can be measured)."""
    try:
        from redist import redistribute  # noqa: F401
    except ImportError:
        return False
    return True


def executor_available() -> bool:
    """Whether ``redist.executor.compile_plan`` exists (plans can be compiled, checked, timed)."""
    try:
        from redist.executor import compile_plan  # noqa: F401
    except ImportError:
        return False
    return True


def _clear_plan_cache() -> None:
    """Forget the planner's per-type memo tables (``redist.caches``), so planning time is the
    synthesizer's, not a dictionary lookup; per-mesh tables stay warm, as in a compiler."""
    from redist.caches import clear_caches

    clear_caches("plans")


def plan_case(src: ShardingType, dst: ShardingType, repeats: int = 3) -> tuple[Any, float]:
    """The plan and the median over ``repeats`` cold calls of ``redistribute`` (cache cleared)."""
    from redist import redistribute

    times = []
    plan = None
    for _ in range(max(1, repeats)):
        _clear_plan_cache()
        start = time.perf_counter()
        plan = redistribute(src, dst, src.mesh)
        times.append(time.perf_counter() - start)
    return plan, statistics.median(times)


def measure_ours(
    src: ShardingType, dst: ShardingType, x: jax.Array, plan_repeats: int = 3
) -> tuple[OurResult, Any]:
    """Plan, compile the executor for ``x``; the record and the compiled program (for timing).

    Without an executor the compiled program is ``None`` and only the plan's claims are recorded.
    """
    plan, planning_s = plan_case(src, dst, plan_repeats)
    compiled: Any = None
    collectives: HloCollectives | None = None
    memory: MemoryStats | None = None
    secs: float | None = None
    if executor_available():
        from redist.executor import compile_plan

        compiled, _log, secs = compile_with_log(compile_plan(plan), x)
        collectives = parse_collectives(compiled.as_text())
        memory = MemoryStats.of(compiled)
    result = OurResult(
        plan_text=str(plan),
        steps=tuple(type(s).__name__ for s in plan.steps),
        recv_bytes=float(plan.recv_bytes),
        peak_bytes=int(plan.peak_bytes),
        lower_bound_bytes=float(plan.lower_bound_bytes),
        model_time_s=float(plan.time_s),
        planning_s=planning_s,
        collectives=collectives,
        hlo_recv_bytes=collectives.recv_bytes_as(src.itemsize) if collectives is not None else None,
        memory=memory,
        compile_s=secs,
    )
    return result, compiled
