"""Paired timing statistics: the ratio of two programs as the median of per-repetition ratios.

Why pairs: on a shared 2-core machine the time of one call drifts with load (other jobs, Gloo's
socket threads, the 4-8 simulated devices of each process). Timing one side in a block and the
other in the next charges a slow phase to one of them; a ratio of two medians taken over the
same rounds still mixes their spreads. Running both sides in every repetition, in a balanced
order (A B, B A, ...: ``balanced_order``), and taking the median of the per-repetition ratios
cancels what a repetition's phase adds to both. ``median_ci`` gives the distribution-free
confidence interval of that median (order statistics), so a report can say whether a ratio is
distinguishable from 1.0x at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from redist.coordination import spans

T = TypeVar("T")

Z95 = 1.959963984540054
"""The two-sided 95% normal quantile: the interval's ranks lie ``Z95 * sqrt(n) / 2`` around ``n / 2``."""


class MedianCI(NamedTuple):
    """A sample median with its ~95% distribution-free confidence interval ``[lo, hi]``."""

    median: float
    lo: float
    hi: float
    n: int

    def excludes(self, value: float) -> bool:
        """Whether ``value`` lies outside the interval: the median differs from it at ~95%."""
        return value < self.lo or value > self.hi


def balanced_order(names: Sequence[T], rep: int) -> list[T]:
    """The order in which repetition ``rep`` runs ``names``: row ``rep`` of a Williams design (a
    Latin square balanced for the previous call), cycling. Over ``period(len(names))`` repetitions
    each side runs in each position equally often and right after each other side equally often,
    so neither the first call's cold start nor a neighbour's cache footprint favours one side. A
    plain rotation keeps the cyclic order, so a side always runs after the same neighbour: in the
    named speed run the bytes objective's program, always timed right after the same program under
    the default objective, read a geometric mean of 0.96x its time on the 29 cases where both
    objectives plan the same steps (up to 0.83x)."""
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


def median_ci(xs: Sequence[float], z: float = Z95) -> MedianCI:
    """Median of ``xs`` and the order statistics bounding it at ~95% (rank ``n/2 -+ z sqrt(n)/2``,
    the normal approximation of the binomial(n, 1/2) rank of the true median; the whole range
    for fewer than 6 samples)."""
    if not xs:
        raise ValueError("median_ci needs at least one sample")
    s = sorted(xs)
    n = len(s)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return MedianCI(statistics.median(s), s[lo], s[hi], n)


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> MedianCI:
    """``a[i] / b[i]`` per repetition (``a``, ``b`` timed in the same repetition), its median and
    interval: > 1 means ``b`` is faster."""
    if len(a) != len(b):
        raise ValueError(f"paired_ratio needs as many times on both sides, got {len(a)} and {len(b)}")
    return median_ci([x / y for x, y in zip(a, b) if y > 0])


def spread(ratios: Sequence[float]) -> tuple[float, float]:
    """(min, max) of a set of ratios, e.g. the A/A control's over the cases."""
    return (min(ratios), max(ratios)) if ratios else (math.nan, math.nan)


__all__ = ["MedianCI", "balanced_order", "median_ci", "paired_ratio", "period", "spans", "spread"]
