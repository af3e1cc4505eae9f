"""Compile a schedule on the running backend and time schedules against each other on the clock.

Why here: ``auto`` lets the clock choose among the few schedules its cost profile cannot separate
(the GPT's found schedule predicted 1.6% faster than Megatron with sequence parallelism ran 13%
slower), and ``benchmarks.auto`` times schedules the same way; one compile path serves both.
Schedules are timed interleaved (``redist.timing.interleaved_runs``: every schedule once per
round, the starting one rotating) so a slow phase of a shared machine hits them alike; a
schedule's time is its median over the rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from partir_core.analysis import Analysis
from partir_core.api import Partitioned, fn_mesh, partition
from partir_core.tactics import Tactic
from redist.timing import interleaved_runs
from spmd_types import Mesh


class Compiled(NamedTuple):
    """One schedule's step, compiled for the inputs' shapes, and the inputs placed as it wants them."""

    step: Partitioned
    analysis: Analysis
    run: Callable[..., Any]
    args: list[Any]

    def __call__(self) -> Any:
        """One call on the placed inputs, waited for."""
        import jax

        return jax.block_until_ready(self.run(*self.args))


def compile_schedule(fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic], *args: Any) -> Compiled:
    """``partition(fn, mesh, schedule)`` compiled ahead of time for ``args`` (concrete arrays), with
    the inputs already placed (and padded where the schedule pads): calling it times the step alone."""
    import jax

    from partir_core.pad import pad_inputs
    from spmd_types.jax_interop import to_named_sharding

    step = partition(fn, mesh, list(schedule))
    a, jitted = step._compiled(*args)
    leaves = jax.tree_util.tree_leaves(args)
    if step.padding is not None:
        leaves = pad_inputs(leaves, step.padding)
    jm = fn_mesh(mesh)
    placed = [jax.device_put(x, to_named_sharding(t, jm)) for x, t in zip(leaves, a.lowered.in_types)]
    run = jitted.lower(*placed).compile()
    done = Compiled(step, a, run, placed)
    done()  # the first call allocates; timing starts after it
    return done


class Timer(Protocol):
    """Measures schedules (each a tuple of tactics) against each other and returns their times in
    seconds, in order, for as many of the first schedules as it had time to compile before
    ``deadline`` (a ``time.perf_counter()`` value; at least the first two whatever the time)."""

    def __call__(self, schedules: Sequence[tuple[Tactic, ...]], deadline: float) -> Sequence[float]: ...


@dataclass(frozen=True)
class ClockTimer:
    """The running backend's clock: each schedule compiled (``compile_schedule``), ``warmup`` calls
    of each, then interleaved rounds until ``deadline``, at least ``min_rounds`` and at most
    ``max_rounds``; a schedule's time is its median."""

    fn: Callable[..., Any]
    mesh: Mesh
    args: tuple[Any, ...]
    min_rounds: int = 5
    max_rounds: int = 25
    warmup: int = 2

    def __call__(self, schedules: Sequence[tuple[Tactic, ...]], deadline: float) -> list[float]:
        built: list[Compiled] = []
        for sch in schedules:
            if len(built) >= 2 and time.perf_counter() >= deadline:
                break
            built.append(compile_schedule(self.fn, self.mesh, sch, *self.args))
        times = interleaved_runs([(_first_leaf, c) for c in built], reps=self.min_rounds, warmup=self.warmup,
                                 budget_s=max(0.0, deadline - time.perf_counter()), max_reps=self.max_rounds)
        return [statistics.median(ts) for ts in times]


def _first_leaf(c: Compiled) -> Any:
    """``interleaved_runs`` waits on what its program returns: one output array, after all are ready."""
    import jax

    return jax.tree_util.tree_leaves(c())[0]


def can_measure(mesh: Mesh, args: Sequence[Any]) -> bool:
    """Whether ``args`` are concrete arrays (not ``jax.ShapeDtypeStruct``s or tracers) and the
    running backend has the mesh's devices: what timing a schedule needs."""
    import jax

    if len(jax.devices()) < mesh.size:
        return False
    return all(hasattr(x, "shape") and not isinstance(x, (jax.ShapeDtypeStruct, jax.core.Tracer))
               for x in jax.tree_util.tree_leaves(args))
