"""Wall-clock comparison of compiled programs, interleaved.

Why interleaved (A B A B ...): on a shared machine other jobs come and go, so any
slow phase hits both programs about equally; timing all of A and then all of B would charge a
noisy phase to one side. The ratio of medians is robust to the occasional descheduled run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """Medians (seconds) of the interleaved runs; ``speedup`` > 1 means ours is faster."""

    reps: int
    xla_median_s: float
    ours_median_s: float
    xla_min_s: float
    ours_min_s: float
    pair_ratio_median: float  # median over adjacent (XLA, ours) pairs of XLA time / ours time

    @property
    def speedup(self) -> float:
        return self.xla_median_s / self.ours_median_s if self.ours_median_s > 0 else float("nan")

    @property
    def ours_faster(self) -> bool:
        return self.speedup > 1.0


def _run_once(fn: Callable[[Any], Any], x: Any) -> float:
    start = time.perf_counter()
    out = fn(x)
    out.block_until_ready()
    elapsed = time.perf_counter() - start
    del out
    return elapsed


def interleaved_runs(
    programs: Sequence[tuple[Callable[[Any], Any], Any]], reps: int = 20, warmup: int = 2,
    budget_s: float = 0.0, max_reps: int = 400,
) -> list[list[float]]:
    """Seconds of each ``fn(x)`` in ``programs``, run in rounds, at least ``reps`` rounds.

    Each round runs every program once, starting one further along each time (A B C, B C A, ...;
    for two: A B, B A) so no program always runs right after another's cache-warming. With
    ``budget_s`` > 0, rounds continue until that many seconds have passed (at most ``max_reps``):
    cheap programs get many more samples, which is what makes a median stable on a loaded machine.
    """
    n = len(programs)
    for _ in range(warmup):
        for fn, x in programs:
            _run_once(fn, x)
    times: list[list[float]] = [[] for _ in programs]
    start = time.perf_counter()
    i = 0
    while i < reps or (time.perf_counter() - start < budget_s and i < max_reps):
        for k in range(n):
            j = (i + k) % n
            fn, x = programs[j]
            times[j].append(_run_once(fn, x))
        i += 1
    return times


def time_interleaved(
    xla: Callable[[Any], Any], xla_input: Any, ours: Callable[[Any], Any], our_input: Any,
    reps: int = 20, warmup: int = 2, budget_s: float = 0.0, max_reps: int = 400,
) -> Timing:
    """Run ``xla(xla_input)`` and ``ours(our_input)`` alternately (``interleaved_runs``)."""
    ta, tb = interleaved_runs(((xla, xla_input), (ours, our_input)), reps, warmup, budget_s, max_reps)
    ratios = [a / b for a, b in zip(ta, tb) if b > 0]
    return Timing(
        len(ta), statistics.median(ta), statistics.median(tb), min(ta), min(tb),
        statistics.median(ratios) if ratios else float("nan"),
    )
