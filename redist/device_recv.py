"""Bytes received by the busiest device of each step: the per-device figure beside the mean.

``redist.measure`` counts bytes received averaged over devices (docs/design.md section 4); users
compare with per-rank counters and wait for the slowest device, so plans also report, per step,
the most any one device receives. Typed collectives run in groups of equal size, every device
receiving alike (the mean is the max); a permute or exchange receives per device what its new
block lacks (``most_lacking``), or with pending sums what one
class of its schedule receives (``class_schedule``: every class receives alike), so no figure
needs a table of the whole mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redist.bounds import lower_bound_bytes, overlap_figures
from redist.facets import FacetTable
from redist.measure import StepMeasure
from redist.steps import ALL_STEPS, Comm, Exchange, Permute, Step
from spmd_types import ShardingType

RecvMax = Callable[[Any, ShardingType, ShardingType, StepMeasure], float]
RECV_MAX: FacetTable[RecvMax] = FacetTable("busiest device's bytes", "redist.device_recv.RECV_MAX")
"""The bytes the busiest device receives in a step that receives any: the mean for typed
collectives (an exchange run as one all-to-all included), read off the cells for ``Permute`` and
``Exchange`` (registered by ``redist.exchange_facets``: they read the schedule)."""


def step_recv_max(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> float:
    """The bytes the busiest device receives in ``step`` (``m`` its measure: the mean)."""
    if m.recv_bytes == 0 or step.comm is Comm.LOCAL:
        return 0.0
    return RECV_MAX[type(step)](step, before, after, m)


@RECV_MAX.register(*(c for c in ALL_STEPS if c is not Permute and c is not Exchange))
def _alike(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> float:
    """Every device of every (equal) group receives alike."""
    return float(m.recv_bytes)


def lower_bound_bytes_max(src: ShardingType, dst: ShardingType) -> float:
    """What the busiest device must receive at least: without pending sums the most any device's
    new block lacks of its old one; with them the mean bound (``redist.bounds``), since the
    busiest device receives at least the mean."""
    if src.unreduced or dst.unreduced:
        return lower_bound_bytes(src, dst)
    return float(most_lacking(src, dst) * src.itemsize)


def most_lacking(before: ShardingType, after: ShardingType) -> int:
    """The most elements of its new block any device lacks of its old one (``closed_form``'s
    ``max_missing``), from the least overlap alone (``overlap_figures``: no per-device table,
    so on meshes too large to enumerate too)."""
    return after.local_size - overlap_figures(before, after)[1]


__all__ = ["lower_bound_bytes_max", "most_lacking", "step_recv_max"]
