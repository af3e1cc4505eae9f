"""The schedules the executors, simulator and proofs run: ``schedule`` (routed, then packed into
rounds) and ``class_schedule`` (one class's schedule, lifted to every device).
"""

from __future__ import annotations

from typing import NamedTuple

from redist.exchange.figures import merges
from redist.exchange.guards import check_schedule
from redist.exchange.packing import Round, Schedule, pack_schedule
from redist.exchange.routes import route
from redist.exchange_classes import Classes, classes, lift_pairs, lift_rows
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo


@memo(Scope.TYPE)
def schedule(old: ShardingType, new: ShardingType) -> Schedule:
    """Cells each device adds into its new block, locally or from a peer.

    Unreduced axes of ``old`` that ``new`` keeps move partial by partial, all partials of a cell
    from one replica (replicas may hold different decompositions of the same value). Those ``new`` drops are
    summed at one *root* per element (a target that holds a partial, if any): it receives one cell
    per partial it lacks, then forwards the sum to the element's other targets, which is the
    ``(k-1) + (|T|-1)`` message bound of ``redist.bounds``. Axes ``new`` adds are provided by one
    member of each group (the first holding a partial), the others keeping zeros.
    The devices run in classes that exchange only among themselves (``redist.exchange_classes``):
    one class's schedule is built and repeated for every class.
    """
    check_schedule(old, new)
    return mode_schedule(old, new, merges(old, new))


@memo(Scope.TYPE)
def mode_schedule(old: ShardingType, new: ShardingType, merged: bool) -> Schedule:
    c = classes(old, new, merged)
    if c is not None:
        return _lift(c, mode_schedule(c.quotient_old, c.quotient_new, merged))
    grid, n_dev, routed = route(old, new, True, merged)
    return pack_schedule(grid, n_dev, routed, tuple(n for _, n in old.mesh.axes))


def _lift(c: Classes, sch: Schedule) -> Schedule:
    """One class's schedule run by every class at once."""
    def lift(r: Round) -> Round:
        return Round(lift_pairs(c, r.pairs), lift_rows(c, r.send_offset), lift_rows(c, r.recv_offset),
                     lift_rows(c, r.recv_valid), r.from_output)
    return Schedule(sch.cell, tuple(map(lift, sch.local_copies)), tuple(map(lift, sch.rounds)),
                    lift_rows(c, sch.recv_cells))


class ClassSchedule(NamedTuple):
    """One class's schedule of an exchange (``redist.exchange_classes``) and how many classes run it."""

    schedule: Schedule
    """The quotient's schedule: its device ids number the quotient mesh (the whole mesh where nothing factors)."""
    n_classes: int
    classes: Classes | None
    """The factoring (``None``: one class, the whole mesh)."""

    def device(self, q: int) -> int:
        """The device of the whole mesh that quotient device ``q`` is in the class of device 0,
        by arithmetic on the device numbering (no table of the mesh)."""
        c = self.classes
        if c is None:
            return q
        qmesh = c.quotient_old.mesh
        coord: dict[str, int] = {}
        for name, size in reversed(qmesh.axes):
            q, coord[name] = divmod(q, size)
        device = 0
        for name, n in c.mesh.axes:
            digits, full = coord[name], 0
            for a in sorted((a for a in c.rest if a.name == name), key=lambda a: -a.pre):  # minor first
                digits, d = divmod(digits, a.size)
                full += d * (n // (a.pre * a.size))
            device = device * n + full
        return device


def class_schedule(old: ShardingType, new: ShardingType) -> ClassSchedule:
    """``schedule(old, new)`` before it is lifted to every class: what each device of a class
    receives, and from how many peers, is what every device receives (each class runs the same
    exchange), known without a table of the whole mesh (printing a plan on 65,536 devices or a
    mesh too large to enumerate)."""
    check_schedule(old, new)
    merged = merges(old, new)
    c = classes(old, new, merged)
    if c is None:
        return ClassSchedule(mode_schedule(old, new, merged), 1, None)
    return ClassSchedule(mode_schedule(c.quotient_old, c.quotient_new, merged), c.n_classes, c)

