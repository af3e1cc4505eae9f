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
from redist.groups import coords as mesh_coords
from redist.steps import AllGather, AllReduce, AllToAll, Exchange, Permute, ReduceScatter, Step
from spmd_types import ShardingType, axis_name
from spmd_types.layout import overlap_elements


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
    """Without unreduced axes, closed form: each device receives exactly the elements of its new
    block it lacks, in cells of ``gcd`` of the local shapes, one cell per round on the busiest
    device (sends are balanced over the replicas), over the axes either layout uses. With
    unreduced axes, from the schedule itself (tests check the two agree where both apply)."""
    if not before.unreduced and not after.unreduced:
        missing = after.local_size - overlap_elements(before, after)
        cell = math.prod(math.gcd(a, b) for a, b in zip(before.local_shape, after.local_shape)) if before.rank else 1
        rounds = int(missing.max()) // cell
        names = {axis_name(a) for t in (before, after) for axes in t.dims for a in axes}
        per_round = cm.latency(names) + cell * before.itemsize * cm.inv_bandwidth(names)
        return StepMeasure(float(missing.mean()) * before.itemsize, rounds * per_round, rounds)
    return schedule_measure(before, after, cm)


def schedule_measure(before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """Measures read off the concrete point-to-point schedule (pairs actually used per round)."""
    sch = schedule(before, after)
    mesh = before.mesh
    cell_bytes = math.prod(sch.cell) * before.itemsize
    coords = mesh_coords(mesh)
    time = 0.0
    for r in sch.rounds:
        names: set[str] = set()
        for s, d in r.pairs:
            names.update(n for i, n in enumerate(mesh.names) if coords[s, i] != coords[d, i])
        time += cm.latency(names) + cell_bytes * cm.inv_bandwidth(names)
    return StepMeasure(sch.n_transfers * cell_bytes / mesh.size, time, len(sch.rounds))
