"""Paired timing statistics: the ratio of two programs as the median of per-repetition ratios.

Why pairs: on a shared 2-core machine the time of one call drifts with load (other jobs, Gloo's
socket threads, the 4-8 simulated devices of each process). Timing one side in a block and the
other in the next charges a slow phase to one of them; a ratio of two medians taken over the
same rounds still mixes their spreads. Running both sides in every repetition, in a balanced
order (A B, B A, ...: ``redist.timing.balanced_order``, re-exported here), and taking the median
of the per-repetition ratios cancels what a repetition's phase adds to both. ``median_ci`` gives the distribution-free
confidence interval of that median (order statistics), so a report can say whether a ratio is
distinguishable from 1.0x at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple

from redist.coordination import spans
from redist.timing import balanced_order, period

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
