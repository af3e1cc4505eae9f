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

import math

from redist.bounds import lower_bound_bytes, overlap_figures
from redist.exchange import class_schedule
from redist.measure import StepMeasure
from redist.steps import Comm, Exchange, Permute, Step
from spmd_types import ShardingType


def step_recv_max(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> float:
    """The bytes the busiest device receives in ``step`` (``m`` its measure: the mean)."""
    if m.recv_bytes == 0 or step.comm is Comm.LOCAL:
        return 0.0
    if type(step) not in (Permute, Exchange):  # exactly: an exchange run as one all-to-all is a collective
        return float(m.recv_bytes)  # every device of every (equal) group receives alike
    if not (before.unreduced or after.unreduced):
        return float(most_lacking(before, after) * before.itemsize)
    cs = class_schedule(before, after)
    return float(int(cs.schedule.recv_cells.max()) * math.prod(cs.schedule.cell) * before.itemsize)


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
