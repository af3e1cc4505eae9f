"""The facets of the point-to-point steps that read the exchange's cells, routing or schedule:
the measure of ``Permute``, ``Exchange`` and ``ExchangeAllToAll``, the busiest device's bytes of
``Permute`` and ``Exchange``, and ``ExchangeAllToAll``'s admission.

They register here, from above, into tables owned below (``redist.measure.MEASURE``,
``redist.device_recv.RECV_MAX``, ``redist.steps.ADMIT``), so the vocabulary (steps, plans and their
measures) imports no scheduler. ``redist/__init__.py`` imports this module: the one place the
registration happens, so any ``import redist...`` has it (docs/design.md section 1).
"""

from __future__ import annotations

import math

from redist.cost import CostModel
from redist.device_recv import RECV_MAX, most_lacking
from redist.exchange import check_schedule, class_schedule, closed_form, crossed_axes, routing, schedule
from redist.exchange_a2a import padded_recv_cells, slots
from redist.groups import coords as mesh_coords
from redist.measure import MEASURE, StepMeasure, p2p_axes, profile_kind, written
from redist.steps import ADMIT, Exchange, ExchangeAllToAll, Permute, Step
from spmd_types import ShardingType
from spmd_types.layout import check_index_range
from spmd_types.mesh import Axis


@MEASURE.register(Permute, Exchange)
def _p2p(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """The traffic of ``_p2p_traffic``; a move without rounds (every device holds its new block's
    data) still writes the new block in one local pass (``redist.executor._point_to_point``: a
    zero-filled block and a copy into it) unless nothing changes, priced as ``DynSlice`` is, so a
    local slice is no cheaper spelled as an exchange than as a slice."""
    m = _p2p_traffic(step, before, after, cm)
    if m.rounds == 0 and not _in_place(before, after):
        return m._replace(time_s=m.time_s + cm.copy_time(after.local_bytes))
    return m


def _in_place(before: ShardingType, after: ShardingType) -> bool:
    """A move without rounds that lowers to nothing: same block shape and pending sums, so each
    device already holds exactly its new block (overlap is whole, and a box of the same shape)."""
    return before.local_shape == after.local_shape and before.unreduced == after.unreduced


def _p2p_traffic(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """Without unreduced axes the closed form (``redist.exchange.closed_form``), over the axes
    either layout uses; with unreduced axes, read off the routing (tests check it against the
    schedule). An exchange whose schedule would be refused (``ExchangeTooFineError``: ``MAX_CELLS``,
    ``MAX_PACKED``) is refused here too, though its figures are known, so the synthesizer never
    returns a plan it cannot lower, simulate or prove (docs/design.md 13.3). Sizes past int64 are
    ``SizeLimitError`` before any table is built (``check_index_range``)."""
    check_index_range(before)
    check_index_range(after)
    check_schedule(before, after)
    if before.unreduced or after.unreduced:
        return routed_measure(before, after, cm, profile_kind(step, before))
    cf = closed_form(before, after)
    names = p2p_axes(before, after)
    rounds = cf.rounds
    time = cm.kind_time(profile_kind(step, before), names, rounds, rounds * cf.cell * before.itemsize,
                        written=written(step, before, after)) if rounds else 0.0
    return StepMeasure(cf.mean_missing * before.itemsize, time, rounds, rounds)


@ADMIT.register(ExchangeAllToAll)
def _fits_one_all_to_all(step: Step, before: ShardingType, after: ShardingType) -> None:
    """An ``ExchangeAllToAll`` is admitted where its exchange has all-to-all slots (``slots``
    raises ``StepError`` naming why not); registered here, beside the measure that reads them."""
    slots(before, after)


@MEASURE.register(ExchangeAllToAll)
def _exchange_all_to_all(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """One all-to-all over the crossed axes receiving ``(g - 1) * k`` cells, padding included (what
    the wire carries), priced as ``all_to_all``; unless every device cuts its blocks alike, plus
    a pass writing the new block (its slots are added into zeros at per-device offsets)."""
    sl = slots(before, after)
    recv = padded_recv_cells(sl) * sl.cell_bytes(before.itemsize)
    time = cm.collective_time(sl.names, sl.g, recv, 1, kind=profile_kind(step, before),
                              written=written(step, before, after))
    if not sl.static:
        time += cm.copy_time(after.local_bytes)
    return StepMeasure(float(recv), time, math.ceil(math.log2(sl.g)), 1)


@RECV_MAX.register(Permute, Exchange)
def _busiest_cells(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> float:
    """The most cells any device lacks (without pending sums) or receives in the schedule (one
    class of it: every class receives alike, so no table of the whole mesh)."""
    if not (before.unreduced or after.unreduced):
        return float(most_lacking(before, after) * before.itemsize)
    cs = class_schedule(before, after)
    return float(int(cs.schedule.recv_cells.max()) * math.prod(cs.schedule.cell) * before.itemsize)


def routed_measure(before: ShardingType, after: ShardingType, cm: CostModel, kind: str = "exchange") -> StepMeasure:
    """Measures of a pending-sum point-to-point step: cells received, and rounds as each phase's
    max degree (Konig's theorem; the colouring of ``redist.colouring`` attains it), from
    ``redist.exchange.routing``, every round priced over ``p2p_axes`` as the closed form prices a
    plain exchange. Under a ``uniform_links`` model that is ``scheduled_measure`` exactly (tests
    check it); elsewhere pricing each round's own axes needs the rounds coloured, too slow to plan
    with (docs/design.md 13.3)."""
    r = routing(before, after)
    cell_bytes = math.prod(r.cell) * before.itemsize
    time = _rounds_time(cm, kind, r.rounds, cell_bytes, p2p_axes(before, after))
    return StepMeasure(r.cells * cell_bytes / before.mesh.size, time, r.rounds, r.rounds)


def scheduled_measure(before: ShardingType, after: ShardingType, cm: CostModel, kind: str = "exchange") -> StepMeasure:
    """Measures read off the built schedule, each round priced over the mesh axes its messages
    cross: what the executor runs, for tests and studies (planning uses ``routed_measure``)."""
    sch = schedule(before, after)
    mesh = before.mesh
    cell_bytes = math.prod(sch.cell) * before.itemsize
    coords = mesh_coords(mesh)
    time = 0.0
    for row in crossed_axes(sch, coords):
        names = {n for n, c in zip(mesh.names, row.tolist()) if c}
        time += cm.kind_time(kind, names, 1, cell_bytes, overhead=time == 0.0)
    rounds = len(sch.rounds)
    return StepMeasure(sch.n_transfers * cell_bytes / mesh.size, time, rounds, rounds)


def _rounds_time(cm: CostModel, kind: str, rounds: int, cell_bytes: int, names: set[Axis]) -> float:
    """``rounds`` rounds of one cell each over axes ``names``, summed in the order (and with the
    overhead rule) of ``scheduled_measure``, so both give the same float where they agree."""
    first = cm.kind_time(kind, names, 1, cell_bytes, overhead=True)
    rest = cm.kind_time(kind, names, 1, cell_bytes, overhead=False)
    time = 0.0
    for _ in range(rounds):
        time += first if time == 0.0 else rest
    return time


__all__ = ["routed_measure", "scheduled_measure"]
