"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums.
Rounds come from bipartite edge colouring (``redist.colouring``: each device sends and receives at
most one cell per round). Received traffic is therefore exactly the cells a device lacks: the
lower bound of docs/design.md section 4.

``schedule`` runs in phases, each a function below: split the unreduced axes
(``_partial_axes``), lay the cell grid (``_cell_grid``), tabulate every device's coordinates
(``_device_tables``), index who holds what (``_holders``) and who needs what (``_targets``),
choose one replica per cell (``_choose_replicas``) and one provider per fresh group
(``_providers``), route each cell (``_route_cell``: phase A moves or merges partials at a root,
phase B forwards merged sums) and pack the transfers into rounds (``_pack_schedule``).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from redist.atoms import Atom, unreduced_atoms
from redist.colouring import colours
from redist.errors import StepError
from redist.groups import atoms_index, group_key, replica_index
from spmd_types import ShardingType
from spmd_types.layout import block_bounds
from spmd_types.memo import Scope, memo

MAX_CELLS = 1 << 16
"""Exchanges of more (device, cell, reduced partial) triples than this are refused unless each
device handles at most ``MAX_DEVICE_CELLS`` of them: so 65,536 devices moving one or two cells
each (the issue-12 pairs on 16 axes of 2) plan at the transfer bound, while candidates whose
blocks are finer than needed (thousands of cells per device) are not scheduled at all. A refusal
is ``ExchangeTooFineError``, a ``StepError``: the synthesizer skips that candidate."""

MAX_DEVICE_CELLS = 16
"""(cell, reduced partial) pairs per device always allowed, whatever the mesh size."""


class ExchangeTooFineError(StepError):
    """An exchange would schedule more than ``MAX_CELLS`` (device, cell, partial) triples."""

Offset = tuple[int, ...]
"""An index per dimension: a cell's start inside a local block, or a cell / block grid index."""


@dataclass(frozen=True, eq=False)
class Round:
    """One ``ppermute``: ``pairs`` (src, dst); offsets are cell starts in the local arrays.

    ``from_output``: the senders forward a cell of their *new* block (a sum they completed in an
    earlier round) instead of a cell of their old block.
    """

    pairs: tuple[tuple[int, int], ...]
    send_offset: np.ndarray  # [devices, rank], rows of non-senders are zero
    recv_offset: np.ndarray  # [devices, rank]
    recv_valid: np.ndarray   # [devices] bool
    from_output: bool = False


@dataclass(frozen=True, eq=False)
class Schedule:
    cell: tuple[int, ...]
    local_copies: tuple[Round, ...]  # pairs empty; send_offset = source, recv_offset = destination
    rounds: tuple[Round, ...]
    recv_cells: np.ndarray           # [devices] cells received by each device

    @property
    def n_transfers(self) -> int:
        return int(self.recv_cells.sum())


class Transfer(NamedTuple):
    """One cell added from ``src``'s block into ``dst``'s new block (a local copy when equal)."""

    src: int
    dst: int
    src_offset: Offset  # cell start in src's old block (its new block when forwarding)
    dst_offset: Offset  # cell start in dst's new block


class PartialAxes(NamedTuple):
    """The unreduced atoms of the old type, by what the new type does with them."""

    kept: tuple[Atom, ...]     # unreduced in both: moved partial by partial
    reduced: tuple[Atom, ...]  # unreduced in old only: summed at a root
    fresh: tuple[Atom, ...]    # unreduced in new only: one provider per group, the others zeros

    @property
    def n_reduced(self) -> int:
        """Partials summed into each element of the new type."""
        return math.prod(a.size for a in self.reduced)


class CellGrid(NamedTuple):
    cell: Offset       # cell size: gcd of the old and new local sizes per dimension
    per_block: Offset  # cells per new block along each dimension


class HolderKey(NamedTuple):
    """What an old block holds: which block, which kept and reduced partial, in which replica."""

    block: Offset  # old block grid index
    kept: int      # index along the kept unreduced atoms
    partial: int   # index along the reduced atoms
    replica: int   # which replica: rank among the devices with the same block and partials


class CellKey(NamedTuple):
    """What a new block needs: a global cell of one kept partial."""

    cell: Offset  # global cell grid index
    kept: int


class Target(NamedTuple):
    device: int
    offset: Offset  # cell start in the device's new block


class CellNeed(NamedTuple):
    """One (global cell, kept partial) and the devices whose new block needs it."""

    key: CellKey
    start: Offset      # global element index of the cell's first element
    old_block: Offset  # old block grid index containing the cell
    targets: list[Target]  # in device order


@dataclass(frozen=True, eq=False)
class DeviceTables:
    """Per-device coordinates ``schedule`` reasons with, each ``[devices]`` or ``[devices, rank]``."""

    old_local: np.ndarray    # [rank] old local shape
    old_start: np.ndarray    # old block start (global element index)
    new_start: np.ndarray    # new block start
    kept: np.ndarray         # index along the kept unreduced atoms
    partial: np.ndarray      # index along the reduced atoms
    replica: np.ndarray      # replica of the old block (0 without unreduced axes)
    group: np.ndarray        # id shared by the devices that differ only along fresh atoms
    group_index: np.ndarray  # index inside that group

    @property
    def n_devices(self) -> int:
        return len(self.kept)

    @cached_property
    def old_block(self) -> np.ndarray:
        """Old block grid index."""
        return self.old_start // self.old_local

    @cached_property
    def old_rows(self) -> list[Offset]:
        """``old_start`` as tuples: the per-transfer offset arithmetic stays in plain ints."""
        return [tuple(r) for r in self.old_start.tolist()]


@dataclass
class Routes:
    """Transfers chosen so far; ``load`` (cells each device sends) balances the next choices."""

    load: list[int]
    copies: list[list[Transfer]]  # per device, its local copies in order
    merge: list[Transfer] = field(default_factory=list)    # phase A: old blocks -> targets / roots
    forward: list[Transfer] = field(default_factory=list)  # phase B: roots -> other targets


def _partial_axes(old: ShardingType, new: ShardingType) -> PartialAxes:
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    return PartialAxes(tuple(sorted(ua & ub)), tuple(sorted(ua - ub)), tuple(sorted(ub - ua)))


def _cell_grid(old: ShardingType, new: ShardingType) -> CellGrid:
    cell = tuple(math.gcd(a, b) for a, b in zip(old.local_shape, new.local_shape))
    return CellGrid(cell, tuple(n // c for n, c in zip(new.local_shape, cell)))


def _check_size(old: ShardingType, new: ShardingType, grid: CellGrid, axes: PartialAxes) -> None:
    cells = math.prod(grid.per_block)
    per_device = cells * axes.n_reduced
    total = per_device * old.mesh.size
    if total > MAX_CELLS and per_device > MAX_DEVICE_CELLS:
        raise ExchangeTooFineError(
            f"exchange {old} -> {new} needs {cells} cell(s) of {list(grid.cell)} elements per device "
            f"x {axes.n_reduced} partial(s) = {per_device} > MAX_DEVICE_CELLS = {MAX_DEVICE_CELLS}, "
            f"x {old.mesh.size} devices = {total:,} > MAX_CELLS = {MAX_CELLS:,}; choose shapes whose "
            f"local blocks share a larger common divisor per dimension")


def _device_tables(old: ShardingType, new: ShardingType, axes: PartialAxes) -> DeviceTables:
    mesh = old.mesh
    return DeviceTables(
        old_local=np.array(old.local_shape, dtype=np.int64),
        old_start=block_bounds(old)[..., 0],
        new_start=block_bounds(new)[..., 0],
        kept=atoms_index(mesh, axes.kept),
        partial=atoms_index(mesh, axes.reduced),
        replica=replica_index(old),
        group=group_key(mesh, axes.fresh),
        group_index=atoms_index(mesh, axes.fresh),
    )


def _holders(dev: DeviceTables) -> dict[HolderKey, list[int]]:
    """The devices whose old block is each (block, kept, partial, replica), in device order."""
    holders: dict[HolderKey, list[int]] = {}
    rows = zip(dev.old_block.tolist(), dev.kept.tolist(), dev.partial.tolist(), dev.replica.tolist())
    for v, (block, kept, partial, replica) in enumerate(rows):
        holders.setdefault(HolderKey(tuple(block), kept, partial, replica), []).append(v)
    return holders


class _NeedRows(NamedTuple):
    """Every (device, cell of its new block), device-major: the rows ``_targets`` groups."""

    device: np.ndarray  # [rows]
    offset: np.ndarray  # [rows, rank] cell start in the device's new block
    gcell: np.ndarray   # [rows, rank] global cell grid index
    cell_id: np.ndarray  # [rows] dense id of the global cell
    need: np.ndarray    # [rows] index of the row's (cell, kept) in order of first need


def _need_rows(grid: CellGrid, dev: DeviceTables, shape: Offset) -> _NeedRows:
    cell = np.array(grid.cell, dtype=np.int64)
    n_cells = math.prod(grid.per_block)
    row = np.arange(dev.n_devices * n_cells, dtype=np.int64)
    device, index = np.divmod(row, n_cells)
    offset = np.stack(np.unravel_index(index, grid.per_block), axis=-1) * cell if len(cell) else \
        np.zeros((len(row), 0), dtype=np.int64)  # cells in np.ndindex order
    gcell = (dev.new_start[device] + offset) // cell if len(cell) else offset
    grid_shape = tuple(n // c for n, c in zip(shape, grid.cell))
    code = np.ravel_multi_index(tuple(gcell.T), grid_shape) if len(cell) else np.zeros(len(device), np.int64)
    n_kept = int(dev.kept.max()) + 1
    _, first, inverse = np.unique(code * n_kept + dev.kept[device], return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    need = rank[inverse.reshape(-1)]
    cell_id = need if n_kept == 1 else np.unique(code, return_inverse=True)[1].reshape(-1)
    return _NeedRows(device, offset, gcell, cell_id, need)


def _targets(grid: CellGrid, dev: DeviceTables, rows: _NeedRows) -> list[CellNeed]:
    """Every (global cell, kept partial) of the new blocks and the devices that need it, in order
    of first need (device-major, then cell by cell), targets in device order."""
    order = np.argsort(rows.need, kind="stable")
    sizes = np.bincount(rows.need)
    first = order[np.cumsum(sizes) - sizes]  # the earliest row of each need
    ends = np.cumsum(sizes).tolist()
    starts = rows.gcell[first] * np.array(grid.cell, dtype=np.int64)
    blocks = starts // dev.old_local
    kept = dev.kept[rows.device[first]].tolist()
    flat = [Target(d, tuple(o)) for d, o in zip(rows.device[order].tolist(), rows.offset[order].tolist())]
    needs, lo = [], 0
    for i, (g, s, b, hi) in enumerate(zip(rows.gcell[first].tolist(), starts.tolist(), blocks.tolist(), ends)):
        needs.append(CellNeed(CellKey(tuple(g), kept[i]), tuple(s), tuple(b), flat[lo:hi]))
        lo = hi
    return needs


def _choose_replicas(grid: CellGrid, dev: DeviceTables, rows: _NeedRows) -> list[int]:
    """Per (cell, kept) need, the replica all its partials come from: the one in which most of the
    global cell's targets (over every kept partial) already hold the cell's old block, the lowest
    on ties, so the fewest cells move."""
    if not dev.replica.any():  # one replica (always so without unreduced axes)
        return [0] * (int(rows.need.max()) + 1)
    values, column = np.unique(dev.replica, return_inverse=True)
    block = rows.gcell * np.array(grid.cell, dtype=np.int64) // dev.old_local
    holds = (block == dev.old_block[rows.device]).all(axis=1)
    counts = np.zeros((int(rows.cell_id.max()) + 1, len(values)), dtype=np.int64)
    np.add.at(counts, (rows.cell_id[holds], column.reshape(-1)[rows.device[holds]]), 1)
    per_cell = values[counts.argmax(axis=1)]
    need_cell = np.zeros(int(rows.need.max()) + 1, dtype=np.int64)
    need_cell[rows.need] = rows.cell_id
    return per_cell[need_cell].tolist()


def _providers(tgts: list[Target], holding: set[int], group: list[int], group_index: list[int]) -> list[Target]:
    """For axes the new type makes unreduced, one target per group carries the cell (a holder if
    the group has one, else its first member); the others keep zeros."""
    best: dict[int, tuple[int, int]] = {}
    ranks = [(0 if t.device in holding else 1, group_index[t.device]) for t in tgts]
    for t, r in zip(tgts, ranks):
        g = group[t.device]
        if g not in best or r < best[g]:
            best[g] = r
    return [t for t, r in zip(tgts, ranks) if r == best[group[t.device]]]


def _sender(holders: Sequence[int], dst: int, routes: Routes) -> int:
    """The least loaded holder, the nearest after ``dst`` on ties; its load grows by one."""
    n, load = len(routes.load), routes.load
    s = min(holders, key=lambda h: (load[h], (h - dst) % n))
    load[s] += 1
    return s


def _add_partial(routes: Routes, holders: Sequence[int], dst: int, need: CellNeed, dst_offset: Offset,
                 dev: DeviceTables) -> None:
    """Phase A: ``dst`` adds one partial of the cell, from its own old block when it holds it,
    else from a chosen holder."""
    s = dst if dst in holders else _sender(holders, dst, routes)
    src_offset = tuple(map(operator.sub, need.start, dev.old_rows[s]))
    (routes.copies[dst] if s == dst else routes.merge).append(Transfer(s, dst, src_offset, dst_offset))


def _route_cell(routes: Routes, need: CellNeed, tgts: list[Target], sources: list[list[int]],
                dev: DeviceTables) -> None:
    """Route one (cell, kept partial) to its targets. Without reduced axes each target takes the
    cell directly (phase A). Otherwise the partials merge at one *root* target (a holder if any)
    and the root forwards the sum to the other targets (phase B): ``k - 1`` cells into the root
    and ``|T| - 1`` out of it, the ``(k-1) + (|T|-1)`` bound of ``redist.bounds``."""
    if len(sources) == 1:
        for t in tgts:
            _add_partial(routes, sources[0], t.device, need, t.offset, dev)
        return
    holding = {h for hs in sources for h in hs}
    root = min(tgts, key=lambda t: (0 if t.device in holding else 1, t.device))
    for hs in sources:
        _add_partial(routes, hs, root.device, need, root.offset, dev)
    routes.forward.extend(Transfer(root.device, t.device, root.offset, t.offset) for t in tgts if t != root)


class _Items(NamedTuple):
    """Transfers as arrays: ``[n]`` senders and receivers, ``[n, rank]`` offsets."""

    src: np.ndarray
    dst: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray

    @staticmethod
    def of(items: Sequence[Transfer], rank: int) -> _Items:
        if not items:
            z = np.zeros(0, dtype=np.int64)
            return _Items(z, z, np.zeros((0, rank), np.int64), np.zeros((0, rank), np.int64))
        src, dst, so, do = zip(*items)
        return _Items(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                      np.array(so, dtype=np.int64).reshape(len(items), rank),
                      np.array(do, dtype=np.int64).reshape(len(items), rank))


def _pack(n_dev: int, it: _Items, idx: np.ndarray, from_output: bool = False) -> Round:
    """One round of the transfers ``idx`` of ``it``: each device sends and receives at most one."""
    rank = it.src_offset.shape[1]
    send = np.zeros((n_dev, rank), dtype=np.int64)
    recv = np.zeros((n_dev, rank), dtype=np.int64)
    valid = np.zeros(n_dev, dtype=bool)
    s, d = it.src[idx], it.dst[idx]
    send[s] = it.src_offset[idx]
    recv[d] = it.dst_offset[idx]
    valid[d] = True
    moved = s != d
    pairs = tuple(zip(s[moved].tolist(), d[moved].tolist()))
    return Round(pairs, send, recv, valid, from_output)


def _coloured_rounds(n_dev: int, rank: int, items: list[Transfer], from_output: bool,
                     torus: Sequence[int]) -> list[Round]:
    """The fewest rounds in which no device sends or receives two cells (``redist.colouring``,
    seeded with the mesh offsets of ``torus``)."""
    it = _Items.of(items, rank)
    col = colours(it.src, it.dst, torus)
    order = np.argsort(col, kind="stable")
    classes = np.split(order, np.flatnonzero(np.diff(col[order])) + 1) if len(order) else []
    return [_pack(n_dev, it, c, from_output) for c in classes]


def _pack_schedule(grid: CellGrid, routes: Routes, torus: Sequence[int]) -> Schedule:
    """Local copies (the i-th copy of every device in round i), then phase A, then phase B."""
    n_dev, rank = len(routes.load), len(grid.cell)
    n_local = max((len(c) for c in routes.copies), default=0)
    local = tuple(_pack(n_dev, it, np.arange(len(it.src)))
                  for it in (_Items.of([c[i] for c in routes.copies if i < len(c)], rank) for i in range(n_local)))
    rounds = _coloured_rounds(n_dev, rank, routes.merge, False, torus)
    rounds += _coloured_rounds(n_dev, rank, routes.forward, True, torus)
    received = [t.dst for t in routes.merge + routes.forward]
    recv_cells = np.bincount(np.array(received, dtype=np.int64), minlength=n_dev).astype(np.int64)
    return Schedule(grid.cell, local, tuple(rounds), recv_cells)


def crossed_axes(sch: Schedule, coords: np.ndarray) -> np.ndarray:
    """``[rounds, axes]``: whether any message of each round joins devices whose coordinates
    (``coords``, ``[devices, axes]``) differ along each axis, i.e. which links the round uses;
    one vectorised pass over all messages instead of a loop per message and axis."""
    sizes = [len(r.pairs) for r in sch.rounds]
    out = np.zeros((len(sizes), coords.shape[1]), dtype=bool)
    if not sum(sizes):
        return out
    flat = np.fromiter(itertools.chain.from_iterable(itertools.chain.from_iterable(r.pairs for r in sch.rounds)),
                       dtype=np.int64, count=2 * sum(sizes)).reshape(-1, 2)
    differ = coords[flat[:, 0]] != coords[flat[:, 1]]
    nonempty = np.flatnonzero(sizes)
    starts = np.cumsum([0, *sizes])[:-1][nonempty]
    out[nonempty] = np.logical_or.reduceat(differ, starts, axis=0)
    return out


@memo(Scope.TYPE)
def schedule(old: ShardingType, new: ShardingType) -> Schedule:
    """Cells each device adds into its new block, locally or from a peer.

    Unreduced axes of ``old`` that ``new`` keeps move partial by partial, all partials of a cell
    from one replica (replicas may hold different decompositions of the same value). Those ``new`` drops are
    summed at one *root* per element (a target that holds a partial, if any): it receives one cell
    per partial it lacks, then forwards the sum to the element's other targets, which is the
    ``(k-1) + (|T|-1)`` message bound of ``redist.bounds``. Axes ``new`` adds are provided by one
    member of each group (the first holding a partial), the others keeping zeros.
    """
    axes = _partial_axes(old, new)
    grid = _cell_grid(old, new)
    _check_size(old, new, grid, axes)
    dev = _device_tables(old, new, axes)
    holders = _holders(dev)
    rows = _need_rows(grid, dev, old.shape)
    group, group_index = dev.group.tolist(), dev.group_index.tolist()
    routes = Routes([0] * dev.n_devices, [[] for _ in range(dev.n_devices)])
    for need, f in zip(_targets(grid, dev, rows), _choose_replicas(grid, dev, rows)):
        sources = [holders.get(HolderKey(need.old_block, need.key.kept, u, f), [])
                   for u in range(axes.n_reduced)]
        tgts = need.targets
        if axes.fresh:
            tgts = _providers(tgts, {h for hs in sources for h in hs}, group, group_index)
        _route_cell(routes, need, tgts, sources, dev)
    return _pack_schedule(grid, routes, tuple(n for _, n in old.mesh.axes))
