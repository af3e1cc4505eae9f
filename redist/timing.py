"""Wall-clock comparison of two compiled programs, interleaved.

Why interleaved (A B A B ...): the machine is shared (2 cores, other jobs come and go), so any
slow phase hits both programs about equally; timing all of A and then all of B would charge a
noisy phase to one side. The ratio of medians is robust to the occasional descheduled run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
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


def time_interleaved(
    xla: Callable[[Any], Any], xla_input: Any, ours: Callable[[Any], Any], our_input: Any,
    reps: int = 20, warmup: int = 2, budget_s: float = 0.0, max_reps: int = 400,
) -> Timing:
    """Run ``xla(xla_input)`` and ``ours(our_input)`` alternately, at least ``reps`` times each.

    The order within each pair alternates too (A B, B A, ...) so neither side always runs
    right after the other's cache-warming. With ``budget_s`` > 0, pairs continue until that many
    seconds have passed (at most ``max_reps``): cheap programs get many more samples, which is
    what makes a median stable on a loaded machine.
    """
    for _ in range(warmup):
        _run_once(xla, xla_input)
        _run_once(ours, our_input)
    ta: list[float] = []
    tb: list[float] = []
    start = time.perf_counter()
    i = 0
    while i < reps or (time.perf_counter() - start < budget_s and i < max_reps):
        if i % 2 == 0:
            ta.append(_run_once(xla, xla_input))
            tb.append(_run_once(ours, our_input))
        else:
            tb.append(_run_once(ours, our_input))
            ta.append(_run_once(xla, xla_input))
        i += 1
    ratios = [a / b for a, b in zip(ta, tb) if b > 0]
    return Timing(
        len(ta), statistics.median(ta), statistics.median(tb), min(ta), min(tb),
        statistics.median(ratios) if ratios else float("nan"),
    )
