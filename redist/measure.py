"""Per-step measures: bytes received per device (averaged, DESIGN.md section 4) and estimated time.

Ring traffic for the collectives over a group of ``p``: all-gather receives ``(p-1)/p`` of its
output, reduce-scatter and all-to-all ``(p-1)/p`` of their input, all-reduce ``2(p-1)/p``.
Permutes and exchanges count the real (source, destination) cells of their schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from redist.cost import CostModel
from redist.exchange import schedule
from redist.steps import AllGather, AllReduce, AllToAll, Exchange, Permute, ReduceScatter, Step
from spmd_types import ShardingType


@dataclass(frozen=True)
class StepMeasure:
    recv_bytes: float
    time_s: float
    rounds: int


def group_size(step: Step, t: ShardingType) -> int:
    return math.prod(t.mesh.axis_size(a) for a in step.group_axes())


def measure(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    if isinstance(step, (Permute, Exchange)):
        return _p2p(before, after, cm)
    if not step.is_collective:
        return StepMeasure(0.0, 0.0, 0)
    p = group_size(step, before)
    if p <= 1:
        return StepMeasure(0.0, 0.0, 0)
    frac = (p - 1) / p
    if isinstance(step, AllGather):
        recv, phases = frac * after.local_bytes, 1
    elif isinstance(step, (ReduceScatter, AllToAll)):
        recv, phases = frac * before.local_bytes, 1
    elif isinstance(step, AllReduce):
        recv, phases = 2 * frac * before.local_bytes, 2
    else:  # pragma: no cover - every collective kind is listed above
        raise TypeError(f"no measure for {step!r}")
    axes = step.group_axes()
    return StepMeasure(recv, cm.collective_time(axes, p, recv, phases), phases * math.ceil(math.log2(p)))


def _p2p(before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    sch = schedule(before, after)
    mesh = before.mesh
    cell_bytes = math.prod(sch.cell) * before.itemsize
    coords = mesh.coord_table()
    time = 0.0
    for r in sch.rounds:
        names: set[str] = set()
        for s, d in r.pairs:
            names.update(n for i, n in enumerate(mesh.names) if coords[s, i] != coords[d, i])
        time += cm.latency(names) + cell_bytes * cm.inv_bandwidth(names)
    return StepMeasure(sch.n_transfers * cell_bytes / mesh.size, time, len(sch.rounds))
