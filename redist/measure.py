"""The measure facet: bytes received per device (averaged, docs/design.md section 4), estimated time,
``ppermute`` rounds and collective ops of each step.

Ring traffic for the collectives over a group of ``p``: all-gather receives ``(p-1)/p`` of its
output, reduce-scatter and all-to-all ``(p-1)/p`` of their input, all-reduce ``2(p-1)/p``.
Permutes and exchanges count the real (source, destination) cells of their schedule, one
collective op per round; a typed collective is one op. ``proofs.measures`` re-derives the bytes
independently (on purpose) and the certificates cross-check the two. The point-to-point steps'
entries read the exchange's cells and schedule, so they register from above
(``redist.exchange_facets``, imported by ``redist/__init__.py``): this module imports no scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from redist.cost import NOTHING_WRITTEN, CostModel, Written, sized_kind
from redist.facets import FacetTable
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import ShardingType
from spmd_types.layout import cell_shape
from spmd_types.mesh import Axis


class StepMeasure(NamedTuple):
    recv_bytes: float
    time_s: float
    rounds: int
    """Communication rounds (latency terms of the estimate; ``ppermute`` rounds for p2p steps)."""
    collectives: int
    """Collective ops the step runs: 1 for a typed collective, one per round for p2p steps."""


FREE = StepMeasure(0.0, 0.0, 0, 0)

Measure = Callable[[Any, ShardingType, ShardingType, CostModel], StepMeasure]
MEASURE: FacetTable[Measure] = FacetTable("measure", "redist.measure.MEASURE")


def measure(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    return MEASURE[type(step)](step, before, after, cm)


def group_size(step: Step, t: ShardingType) -> int:
    return math.prod(t.mesh.axis_size(a) for a in step.group_axes())


@MEASURE.register(DynSlice, Discard, PadUnreduced)
def _local(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """No traffic; one local pass writing the new block (free unless the model measured copies)."""
    return StepMeasure(0.0, cm.copy_time(after.local_bytes), 0, 0)


ProfileKind = Callable[[Any, ShardingType], str]
PROFILE_KIND: FacetTable[ProfileKind] = FacetTable("profile kind", "redist.measure.PROFILE_KIND")
"""The profile key a step's time is read from (and ``redist.calibrate`` files its samples under).
Moves that only copy values run on 16-bit floats' bit patterns (``redist.executor._on_bits``:
XLA:CPU widens 16-bit float collectives to f32), so they read the plain kind at their own bytes;
steps that add in the dtype read ``sized_kind``."""


def profile_kind(step: Step, before: ShardingType) -> str:
    return PROFILE_KIND[type(step)](step, before)


@PROFILE_KIND.register(DynSlice, Discard, PadUnreduced, ReduceScatter, AllReduceSlice, AllReduce)
def _sized_kind(step: Step, before: ShardingType) -> str:
    return sized_kind(step.kind, before.itemsize)


@PROFILE_KIND.register(AllGather, AllToAll)
def _plain_kind(step: Step, before: ShardingType) -> str:
    return step.kind


@PROFILE_KIND.register(MultiAllToAll)
def _all_to_all_kind(step: Step, before: ShardingType) -> str:
    return "all_to_all"  # one all-to-all over the flattened group


@PROFILE_KIND.register(Permute, Exchange)
def _p2p_kind(step: Step, before: ShardingType) -> str:
    return moved_kind(step.kind, before)


@PROFILE_KIND.register(ExchangeAllToAll)
def _exchange_all_to_all_kind(step: Step, before: ShardingType) -> str:
    return moved_kind("all_to_all", before)


def _ring(fraction_of: Callable[[ShardingType, ShardingType], int], phases: int) -> Measure:
    """A ring collective receiving ``phases * (p-1)/p`` of ``fraction_of(before, after)`` bytes."""

    def ring(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
        p = group_size(step, before)
        if p <= 1:
            return FREE
        recv = phases * (p - 1) / p * fraction_of(before, after)
        time = cm.collective_time(step.group_axes(), p, recv, phases, kind=profile_kind(step, before),
                                  written=written(step, before, after))
        return StepMeasure(recv, time, phases * math.ceil(math.log2(p)), 1)

    return ring


def _ring_with_leading_copy(block_of: Callable[[ShardingType, ShardingType], int]) -> Measure:
    """``_ring`` over ``block_of(before, after)`` bytes, plus one copy of them that brings ``dim``'s blocks to or
    from the front (``redist.executor``: a gather's stacked blocks moved into ``dim``, a
    reduce-scatter's chunks moved before it) unless every dimension before ``dim`` has local extent 1."""
    ring = _ring(block_of, 1)

    def measure(step: Any, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
        m = ring(step, before, after, cm)
        if m.rounds and math.prod(before.local_shape[: step.dim]) > 1 and not _prices_rows(step, before, cm):
            return m._replace(time_s=m.time_s + cm.copy_time(block_of(before, after)))
        return m

    return measure


def _prices_rows(step: Step, before: ShardingType, cm: CostModel) -> bool:
    """Whether the step's measured kind prices copies in rows (``written``; its calibration timed
    them): then the ring's ``written`` term is the copy's price, else ``copy_time``."""
    kc = cm.measured_kind(profile_kind(step, before), set(step.group_axes()))
    return kc is not None and (kc.strided_s_per_byte > 0 or kc.run_s > 0)


MEASURE.register(AllGather)(_ring_with_leading_copy(lambda before, after: after.local_bytes))
# an all-to-all: a ring over ``before``'s block plus what it copies in short rows (``written``);
# a ``MultiAllToAll`` is one all-to-all over the flattened group, priced as one ``all_to_all``
MEASURE.register(AllToAll, MultiAllToAll)(_ring(lambda before, after: before.local_bytes, 1))


def runs_in(piece: Sequence[int], block: Sequence[int]) -> int:
    """Contiguous runs (row-major) that a box of shape ``piece`` covers inside ``block``: the
    product of ``piece``'s extents before the last dimension where it is narrower than ``block``
    (1 where it spans whole trailing rows: one run)."""
    narrower = [i for i, (a, b) in enumerate(zip(piece, block)) if a != b]
    return math.prod(piece[: narrower[-1]]) if narrower else 1


WriteRule = Callable[[Any, ShardingType, ShardingType], Written]
WRITTEN: FacetTable[WriteRule] = FacetTable("written", "redist.measure.WRITTEN")
"""What a step copies in short rows as ``redist.executor`` lowers it (``written``): a move's
received cells, a gather's or reduce-scatter's leading copy, or nothing."""


def written(step: Step, before: ShardingType, after: ShardingType) -> Written:
    """What a move copies as pieces narrower than a block's rows, as ``redist.executor`` lowers
    it: every cell (``prod gcd(old local, new local)``) is read from the old block and written into
    the new one once. ``strided_bytes``: the new block where its cells are narrower than its rows;
    ``runs``: the rows of the cells on each side where they are narrower than that block's rows.
    Nothing for whole-row cells, a whole-block permute, other steps, or moves that add partial sums
    (not timed against it). Why: short rows and non-leading joins cost measurably more, and the
    kinds' ``strided_s_per_byte`` and ``run_s`` price it (docs/design.md 4.2, "Short rows")."""
    return WRITTEN[type(step)](step, before, after)


@WRITTEN.register(DynSlice, Discard, PadUnreduced, AllReduce, AllReduceSlice)
def _nothing_written(step: Step, before: ShardingType, after: ShardingType) -> Written:
    """Local passes and moves that add partial sums in whole blocks. Not ``AllReduceSlice``'s
    slice: priced so, its fit overpriced short slices by a collective (docs/design.md 4.2)."""
    return NOTHING_WRITTEN


@WRITTEN.register(AllToAll, MultiAllToAll, ExchangeAllToAll, Permute, Exchange)
def _cells_written(step: Step, before: ShardingType, after: ShardingType) -> Written:
    """A new block assembled from received cells: priced where the cells are narrower than a
    block's rows (nothing where the move adds partial sums: not timed against it)."""
    if not before.rank or before.unreduced or after.unreduced:
        return NOTHING_WRITTEN
    cell = cell_shape(before, after)
    cells = after.local_size // math.prod(cell)
    rows_out, rows_in = runs_in(cell, after.local_shape), runs_in(cell, before.local_shape)
    strided = float(after.local_bytes) if rows_out > 1 else 0.0
    side = after.local_bytes / SHORTEST_CELL_ROW_BYTES  # per side, rows priced no shorter than calibrated
    runs = sum(min(cells * rows, side) for rows in (rows_out, rows_in) if rows > 1)
    return Written(strided, float(runs)) if runs else NOTHING_WRITTEN


SHORTEST_ROW_BYTES = 256
"""Rows shorter than ``redist.calibrate``'s shortest (``SHORT_ROWS``: 64 f32) are priced as rows of
this length, so a fit's per-row cost is not extrapolated below what was timed: a gather's or
reduce-scatter's copy (``_leading_copy``; docs/design.md 4.2)."""

SHORTEST_CELL_ROW_BYTES = 32
"""The same floor for a move's cells (all-to-alls, exchanges, permutes): ``redist.calibrate`` times
those kinds with rows down to 32 B (``MOVE_SHORT_ROWS``: 8 f32). Why not 256 B: rank-4 exchanges
landing 32 B rows were underpriced and chosen over faster all-to-alls (docs/design.md 4.2)."""


@WRITTEN.register(ReduceScatter, AllGather)
def _leading_copy(step: Any, before: ShardingType, after: ShardingType) -> Written:
    """A gather's or reduce-scatter's copy that moves ``dim``'s ``g`` blocks to or from the front
    (``redist.executor``: the gathered stack moved into ``dim``, the chunks moved before it for a
    leading-dimension reduce-scatter): nothing where every dimension before ``dim`` has local
    extent 1, else the block copied in ``g * A`` rows (``A`` the extent before ``dim``)."""
    lead = math.prod(before.local_shape[: step.dim])
    if lead <= 1:
        return NOTHING_WRITTEN
    g = group_size(step, before)
    copied = max(before.local_bytes, after.local_bytes)
    return Written(float(copied), float(min(g * lead, copied / SHORTEST_ROW_BYTES)))


MEASURE.register(AllReduce, AllReduceSlice)(_ring(lambda before, after: before.local_bytes, 2))
MEASURE.register(ReduceScatter)(_ring_with_leading_copy(lambda before, after: before.local_bytes))


def moved_kind(kind: str, t: ShardingType) -> str:
    """The profile key of a point-to-point move of ``t`` (``Permute``, ``Exchange``,
    ``ExchangeAllToAll``): without pending sums it runs on 16-bit floats' bit patterns
    (``redist.executor._values_moved``), unwidened, so at the plain kind's bytes; a move that adds
    partial sums runs in the dtype (``sized_kind``)."""
    return sized_kind(kind, t.itemsize) if t.unreduced else kind


def p2p_axes(before: ShardingType, after: ShardingType) -> set[Axis]:
    """The axes a point-to-point step is priced over: every axis either layout shards by, and each
    unreduced axis one of them lacks (partials travel along those to be summed or spread; kept ones
    stay put), sub-axes kept, as ``CostModel.crosses`` reads them. The schedule's senders are picked
    by load, not axis speed, so a round may also cross a replicated axis (docs/design.md 13.3)."""
    return {a for t in (before, after) for axes in t.dims for a in axes} | (before.unreduced ^ after.unreduced)


def uniform_links(cm: CostModel) -> bool:
    """Whether ``cm`` prices a round the same over any mesh axes: no per-axis latency or bandwidth
    and no axes whose groups span processes (their measured costs differ)."""
    return not (cm.axis_latency_s or cm.axis_bandwidth_Bps or cm.cross_axes)


__all__ = ["MEASURE", "PROFILE_KIND", "WRITTEN", "StepMeasure", "group_size", "measure", "moved_kind", "p2p_axes",
           "profile_kind", "runs_in", "written", "uniform_links"]
