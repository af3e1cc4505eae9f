"""Wall-clock comparison of compiled programs, interleaved in a balanced order.

Why interleaved: on a shared machine other jobs come and go, so any slow phase hits every
program about equally; timing all of A and then all of B would charge a noisy phase to one side.
Why balanced (``balanced_order``, a Williams design) rather than a plain rotation: a rotation
keeps the cyclic order, so a program always runs right after the same neighbour and inherits its
cache footprint (docs/design.md 8.3). The ratio of medians is robust to the occasional
descheduled run. This module is the one interleaving timer: ``redist compare``, the benchmark
harness (``benchmarks.harness.round_robin_times``) and ``benchmarks.per_call`` run
``schedule``'s rounds, and ``redist calibrate`` and autotuning (``calibrate.samples``) call their
plans in ``balanced_order``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


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


def balanced_order(names: Sequence[T], rep: int) -> list[T]:
    """The order in which repetition ``rep`` runs ``names``: row ``rep`` of a Williams design (a
    Latin square balanced for the previous call), cycling. Over ``period(len(names))`` repetitions
    each side runs in each position equally often and right after each other side equally often,
    so neither the first call's cold start nor a neighbour's cache footprint favours one side. A
    plain rotation keeps the cyclic order, so a side always runs after the same neighbour: in the
    named speed run the bytes objective's program, always timed right after the same program under
    the default objective, read a geometric mean of 0.96x its time on the 29 cases where both
    objectives plan the same steps (up to 0.83x).

        >>> [balanced_order("ABC", r) for r in range(period(3))]  # doctest: +NORMALIZE_WHITESPACE
        [['A', 'B', 'C'], ['B', 'C', 'A'], ['C', 'A', 'B'],
         ['C', 'B', 'A'], ['A', 'C', 'B'], ['B', 'A', 'C']]
    """
    n = len(names)
    if n == 0:
        return []
    k = rep % period(n)
    row = [(x + k) % n for x in _williams_row(n)]
    return [names[i] for i in (row[::-1] if k >= n else row)]


def period(n: int) -> int:
    """Repetitions after which ``balanced_order`` has balanced ``n`` sides: ``n`` rows of the
    Williams square, and their reverses too where ``n`` is odd (1 for no sides: nothing to balance)."""
    return max(1, n if n % 2 == 0 else 2 * n)


def _williams_row(n: int) -> list[int]:
    """``0, 1, n-1, 2, n-2, ...``: its cyclic shifts differ pairwise in every adjacent difference,
    so over them each ordered pair of sides is adjacent once (``n`` even; with the reversed shifts,
    twice, ``n`` odd)."""
    row, lo, hi = [0], 1, n - 1
    while len(row) < n:
        row.append(lo)
        lo += 1
        if len(row) < n:
            row.append(hi)
            hi -= 1
    return row


def schedule(n: int, reps: int, budget_s: float = 0.0, max_reps: int | None = None,
             whole_periods: bool = False) -> Iterator[list[int]]:
    """Rounds of ``balanced_order(range(n), i)``: at least ``reps`` of them; with ``budget_s`` > 0
    more while that many seconds (from the first round) last, up to ``max_reps`` (no cap for
    ``None``). Budgeted rounds, and every round with ``whole_periods``, stop only at the end of a
    period (``max_reps`` rounded up to one), so every side followed every other equally often. The clock is read lazily, between
    rounds, so the caller's timed calls are what the budget counts."""
    start, i, p = time.perf_counter(), 0, period(n)
    while i < reps or ((whole_periods or i > reps) and i % p) or (
            time.perf_counter() - start < budget_s and (max_reps is None or i < max_reps)):
        yield balanced_order(range(n), i)
        i += 1


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
    """Seconds of each ``fn(x)`` in ``programs``, one call each a round (``schedule``'s balanced
    rounds): exactly ``reps`` rounds, or with ``budget_s`` > 0 more until that many seconds have
    passed (up to ``max_reps``, ending on a whole period): cheap programs get many more samples,
    which is what makes a median stable on a loaded machine."""
    for _ in range(warmup):
        for fn, x in programs:
            _run_once(fn, x)
    times: list[list[float]] = [[] for _ in programs]
    for order in schedule(len(programs), reps, budget_s, max_reps):
        for j in order:
            fn, x = programs[j]
            times[j].append(_run_once(fn, x))
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
