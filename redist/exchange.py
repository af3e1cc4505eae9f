"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums.
Rounds come from bipartite edge colouring (``redist.colouring``: each device sends and receives at
most one cell per round). Received traffic is therefore exactly the cells a device lacks: the
lower bound of docs/design.md section 4.

``schedule`` runs in phases, each a function below, every one a NumPy pass over arrays of
devices or (device, cell) rows, with no Python loop per device or cell: split the unreduced axes
(``_partial_axes``), lay the cell grid (``_cell_grid``), tabulate every device's coordinates
(``_device_tables``), list who needs which cell (``_need_rows``), choose one replica per cell
(``_choose_replicas``, in ``_needs``), group the holders by what they hold (``_Holders``), keep one
provider per fresh group (``_providers``; with one replica
only the providers' rows are tabulated, ``_provider_rows``), route the cells (``_route_direct``, or
``_route_reduced``: phase A merges partials at a root, phase B forwards merged sums), spread the
requests evenly over each cell's holders (``_senders``) and pack the transfers into rounds
(``_pack_schedule``). Planning stops before the packing: ``routing`` gives the cells received and
the rounds (each phase's max degree, which the colouring attains), ``provider_cells`` a floor;
it routes without offsets and without choosing senders (``_sent``: the busiest sender's load is
known from the holder groups alone).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from redist.atoms import Atom, dims_atoms, unreduced_atoms
from redist.bounds import on_prime_atoms, overlap_figures, overlap_total
from redist.colouring import colours, degree
from redist.errors import StepError
from redist.exchange_classes import Classes, classes, lift_pairs, lift_rows
from redist.groups import (
    atoms_index,
    group_key,
    group_sums,
    rank_within,
    replica_index,
    run_starts,
    stable_order,
)
from spmd_types import ShardingType
from spmd_types.layout import block_indices, check_index_range, overlap_elements, overlap_widths
from spmd_types.memo import Scope, cached_property, memo

MAX_CELLS = 1 << 22
"""Exchanges of more (device, cell, reduced partial) triples than this are neither routed nor
scheduled unless each device handles at most ``MAX_DEVICE_CELLS`` of them; devices count per class
(``redist.exchange_classes``: atoms both types use alike, and idle ones, are factored out first),
and by group where the routing tabulates one row per group (``_provider_rows``).
Routing is NumPy passes over these triples, scheduling adds the edge colouring of the transfers
(Euler splits in C) and rounds of ``devices x rank`` offsets. At this size, on one core of the
2-core CI machine: routing 0.5-1.7 s and 0.25-0.35 GB for the reducing exchanges of the large-mesh
ladder (``redist bench-plan --ladder``) on 65,536 devices, about 4 s for the worst (every triple a transfer:
``f32[65536@(a0..a9)]{U:(a10..a15)} -> f32[65536@(a10..a15,a0..a9)]`` on 16 axes of 2); a
schedule 3 s for the ladder's, 20 s and 1.8 GB where every triple moves (once per plan and mesh).
A refusal is ``ExchangeTooFineError``, a ``StepError``: planning refuses what ``schedule`` would
(``check_schedule``), though a plain exchange's figures are known in closed form at any size, so
no plan holds an exchange it cannot lower, simulate or prove; the synthesizer uses the best other
candidate and ``redist bench-plan --ladder`` counts the plans above the bound because of it
(docs/design.md 13.3)."""

MAX_DEVICE_CELLS = 16
"""(cell, reduced partial) pairs per device always allowed, whatever the mesh size: 65,536 devices
moving one to sixteen cells each are scheduled."""


MAX_PACKED = 1 << 26
"""Offsets a schedule's packed rounds may hold, ``rounds x devices x rank`` over the whole mesh,
where a device handles more than ``MAX_DEVICE_CELLS`` (cell, partial) pairs
(each an int64, sent and received: 1 GiB here). Routing by group (``_provider_rows``) tabulates
few rows where many devices receive many cells: ``f32[1024@fsdp,512,128@seq,32768@data,128@model]{U:pod} ->
f32[1024,512,128@model,32768@(pod,data),128]{U:(fsdp,seq)}`` on 65,536 devices routes 1M rows in
about 4 s, but its 1,024 rounds would pack 5 GiB of offsets: it is refused, like a plain exchange
past either limit (its figures would be exact, but no plan may hold a step it cannot lower)."""


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


@dataclass(frozen=True, eq=False)
class DeviceTables:
    """Per-device coordinates ``schedule`` reasons with, each ``[devices]`` or ``[devices, rank]``."""

    old_local: np.ndarray    # [rank] old local shape
    new_local: np.ndarray    # [rank] new local shape
    old_block: np.ndarray    # old block grid index
    new_block: np.ndarray    # new block grid index
    kept: np.ndarray         # index along the kept unreduced atoms
    partial: np.ndarray      # index along the reduced atoms
    replica: np.ndarray      # replica of the old block (0 without unreduced axes)
    group: np.ndarray        # id shared by the devices that differ only along fresh atoms
    group_index: np.ndarray  # index inside that group

    @property
    def n_devices(self) -> int:
        return len(self.kept)

    @cached_property
    def old_start(self) -> np.ndarray:
        """Old block start (global element index): only transfers with offsets read it."""
        return self.old_block * self.old_local


def _partial_axes(old: ShardingType, new: ShardingType, merged: bool = False) -> PartialAxes:
    """``merged``: the merging exchange (``_route_merged``) sums every partial of the source and
    feeds one member per group of devices differing along any of the new type's unreduced atoms,
    so its kept atoms count as reduced and as fresh."""
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    if merged:
        return PartialAxes((), tuple(sorted(ua)), tuple(sorted(ub)))
    return PartialAxes(tuple(sorted(ua & ub)), tuple(sorted(ua - ub)), tuple(sorted(ub - ua)))


def cell_shape(old: ShardingType, new: ShardingType) -> tuple[int, ...]:
    """A cell: per dimension ``gcd(old local, new local)``, so every cell lies wholly inside or
    wholly outside any device's old and new block (the unit of exchanges, their measures and floors)."""
    return tuple(math.gcd(a, b) for a, b in zip(old.local_shape, new.local_shape))


def _cell_grid(old: ShardingType, new: ShardingType) -> CellGrid:
    cell = cell_shape(old, new)
    return CellGrid(cell, tuple(n // c for n, c in zip(new.local_shape, cell)))


class ClosedForm(NamedTuple):
    """A point-to-point move without unreduced axes, without building its schedule."""

    mean_missing: float
    """Elements of its new block a device lacks (the transfer lower bound's summand), averaged."""
    max_missing: int
    """The same on the device that lacks the most."""
    cell: int
    """Elements per cell: ``prod gcd(old local, new local)``; one cell per ``ppermute`` round."""

    @property
    def rounds(self) -> int:
        """Rounds on the busiest device (sends are balanced over the replicas)."""
        return self.max_missing // self.cell


@memo(Scope.TYPE, maxsize=4096)
def closed_form(before: ShardingType, after: ShardingType) -> ClosedForm:
    """The one closed form of point-to-point traffic without pending sums (``redist.measure``'s
    measures, the synthesizer's floors and ``check_schedule``, which ask for the same pair:
    memoised, and only its two figures are kept, not the per-device table)."""
    cell = math.prod(cell_shape(before, after))
    n, size = before.mesh.size, after.local_size
    if size * n < EXACT_FLOAT_SUM:
        total, least = overlap_figures(before, after)
        return ClosedForm((size * n - total) / n, size - least, cell)
    missing = size - overlap_elements(before, after)
    return ClosedForm(float(missing.mean()), int(missing.max()), cell)


EXACT_FLOAT_SUM = 1 << 53
"""Below it a float64 sum of per-device integers is exact, so the mean ``closed_form`` divides from
the exact integer total is the float NumPy's mean of the per-device table gives (one correctly
rounded division); past it (no realistic mesh) the table is summed as it always was."""


def _few_cells(old: ShardingType, new: ShardingType, merged: bool = False) -> bool:
    """Whether each device handles at most ``MAX_DEVICE_CELLS`` (cell, partial) pairs: always
    allowed, at any mesh size, by both limits."""
    return math.prod(_cell_grid(old, new).per_block) * _partial_axes(old, new, merged).n_reduced <= MAX_DEVICE_CELLS


def check_size(old: ShardingType, new: ShardingType) -> None:
    """Raise ``ExchangeTooFineError`` if ``schedule(old, new)`` (and, with pending sums,
    ``routing(old, new)``) would be refused: its size limit, which applies to one class of devices
    (``redist.exchange_classes``)."""
    if _few_cells(old, new):
        return  # a class has the same cells and partials per device (planning asks often)
    c = classes(old, new)
    if c is not None:
        old, new = c.quotient_old, c.quotient_new
    _check_size(old, new, _cell_grid(old, new), _partial_axes(old, new))


def _check_size(old: ShardingType, new: ShardingType, grid: CellGrid, axes: PartialAxes,
                merged: bool = False) -> None:
    cells = math.prod(grid.per_block)
    per_device = cells * axes.n_reduced
    n, who = old.mesh.size, "devices"
    if not merged and _by_group(old, axes):
        n, who = n // math.prod(a.size for a in axes.fresh), "groups of devices differing only along new pending sums"
    total = per_device * n
    if total > MAX_CELLS and per_device > MAX_DEVICE_CELLS:
        raise ExchangeTooFineError(
            f"exchange {old} -> {new} needs {cells} cell(s) of {list(grid.cell)} elements per device "
            f"x {axes.n_reduced} partial(s) = {per_device} > MAX_DEVICE_CELLS = {MAX_DEVICE_CELLS}, "
            f"x {n} {who} = {total:,} > MAX_CELLS = {MAX_CELLS:,}; choose shapes whose "
            f"local blocks share a larger common divisor per dimension")


def check_schedule(old: ShardingType, new: ShardingType) -> None:
    """Raise ``ExchangeTooFineError`` if ``schedule(old, new)`` would be refused: past ``MAX_CELLS``
    (``check_size``) or ``MAX_PACKED``, unless each device handles at most ``MAX_DEVICE_CELLS``. Its rounds are the closed form's without pending sums
    (``closed_form``, the same count), else the routing's (which planning read), or
    its floor ``provider_cells`` where that alone is past the limit."""
    if _few_cells(old, new):
        return
    check_size(old, new)
    per_round = old.mesh.size * max(1, old.rank)
    if old.unreduced or new.unreduced:  # the round floor refuses without routing where it can
        floor = provider_cells(old, new)
        rounds = floor if floor * per_round > MAX_PACKED else routing(old, new).rounds
    elif math.prod(_cell_grid(old, new).per_block) * per_round <= MAX_PACKED:
        return  # a plain exchange has at most one round per cell of a new block
    else:
        rounds = closed_form(old, new).rounds
    packed = rounds * per_round
    if packed > MAX_PACKED:
        raise ExchangeTooFineError(
            f"exchange {old} -> {new}: {rounds:,} rounds x {old.mesh.size} devices x rank {old.rank} "
            f"= {packed:,} offsets > MAX_PACKED = {MAX_PACKED:,}; its figures are exact, but its schedule "
            f"is too large to build")


def _by_group(old: ShardingType, axes: PartialAxes) -> bool:
    """Whether the routing tabulates one row per (group, cell) (``_provider_rows``): the new type
    adds pending sums (fresh atoms) and the source has one replica (no pending sums, or every
    (block, partial) held by one device), so a group's provider depends only on who holds what."""
    if not axes.fresh:
        return False
    if not old.unreduced:
        return True
    blocks = math.prod(n // b for n, b in zip(old.shape, old.local_shape))
    return blocks * math.prod(a.size for a in unreduced_atoms(old)) == old.mesh.size


def _block_indices(t: ShardingType) -> np.ndarray:
    """``block_indices`` after ``block_bounds``' int64 range check: the routing reads block grid
    indices, and the element starts (``[devices, rank, 2]`` bounds) only where it sends offsets."""
    check_index_range(t)
    return block_indices(t)


def _device_tables(old: ShardingType, new: ShardingType, axes: PartialAxes) -> DeviceTables:
    mesh = old.mesh
    return DeviceTables(
        old_local=np.array(old.local_shape, dtype=np.int64),
        new_local=np.array(new.local_shape, dtype=np.int64),
        old_block=_block_indices(old),
        new_block=_block_indices(new),
        kept=atoms_index(mesh, axes.kept),
        partial=atoms_index(mesh, axes.reduced),
        replica=replica_index(old),
        group=group_key(mesh, axes.fresh),
        group_index=atoms_index(mesh, axes.fresh),
    )


class _NeedRows(NamedTuple):
    """Every (device, cell of its new block), device-major: who needs which cell. Per-row
    coordinates are read on demand for the rows asked (``offset``, ``gcell``): most rows are only
    counted, and ``[rows, rank]`` tables of every row cost as much as the rest of the routing."""

    device: np.ndarray  # [rows]
    base: np.ndarray    # [devices, rank] global cell grid index of each new block's first cell
    idx: np.ndarray     # [cells per block, rank] cell grid index inside a block
    cell: np.ndarray    # [rank] cell size
    cell_id: np.ndarray  # [rows] dense id of the global cell
    need: np.ndarray    # [rows] index of the row's (cell, kept) in order of first need
    offsets: bool       # whether transfers carry their offsets (``schedule``; ``routing`` counts only)
    at: np.ndarray | None = None  # [rows] each row's cell in its block (``_provider_rows``); else
                                  # rows are every device's cells in order: ``row % cells per block``

    def _at(self, sel: np.ndarray) -> np.ndarray:
        return sel % len(self.idx) if self.at is None else self.at[sel]

    def offset(self, sel: np.ndarray) -> np.ndarray:
        """``[len(sel), rank]``: start of each row's cell in its device's new block (``[len(sel), 0]``
        without offsets)."""
        if not self.offsets:
            return np.zeros((len(sel), 0), dtype=np.int64)
        return self.idx[self._at(sel)] * self.cell

    def src_offset(self, start: np.ndarray, need: np.ndarray, old_start: np.ndarray, src: np.ndarray) -> np.ndarray:
        """``start[need] - old_start[src]``: each cell's start in its sender's old block (as ``offset``)."""
        if not self.offsets:
            return np.zeros((len(need), 0), dtype=np.int64)
        return start[need] - old_start[src]

    def gcell(self, sel: np.ndarray) -> np.ndarray:
        """``[len(sel), rank]``: global cell grid index of each row's cell."""
        return self.base[self.device[sel]] + self.idx[self._at(sel)]

    def holds_old(self, dev: DeviceTables) -> np.ndarray:
        """``[rows]``: whether each row's device holds the row's cell in its old block."""
        per_block = tuple(int(n) for n in self.idx.max(axis=0) + 1) if len(self.cell) else ()
        grid = CellGrid(tuple(int(c) for c in self.cell), per_block)
        out = np.ones((len(self.base), *per_block), dtype=bool)
        for k, t in enumerate(_per_dim_blocks(grid, self.base, dev.old_local)):
            out &= _spread(t == dev.old_block[:, k, None], k, per_block)
        return out.reshape(-1)


def _need_rows(grid: CellGrid, dev: DeviceTables, shape: Offset, offsets: bool = True) -> _NeedRows:
    """Rows device-major, cells in ``np.ndindex`` order within a block: each device's cells are
    its block's first cell plus one shared table of cell offsets (a broadcast sum, not a per-row
    unravel). Every (global cell, kept) pair is needed by some device, so the needs are numbered
    in order of first need on dense tables of that size (no sort of the rows)."""
    idx, base = _cell_table(grid, dev)
    device = np.repeat(np.arange(dev.n_devices, dtype=np.int64), len(idx))
    code, n_codes = _grid_codes(grid, shape, base, idx)
    code = code.reshape(-1)
    n_kept = int(dev.kept.max()) + 1
    need = _first_need_order(code * n_kept + dev.kept[device], n_codes * n_kept)
    cell_id = _dense_cells(code, n_codes) if n_kept > 1 else need
    return _NeedRows(device, base, idx, np.array(grid.cell, dtype=np.int64), cell_id, need, offsets)


def _cell_table(grid: CellGrid, dev: DeviceTables) -> tuple[np.ndarray, np.ndarray]:
    """``idx`` (each cell's grid index inside a block, ``np.ndindex`` order) and ``base`` (each
    device's new block's first cell) of ``_NeedRows``."""
    n_cells = math.prod(grid.per_block)
    if not grid.cell:  # a scalar: one cell per device
        return np.zeros((1, 0), dtype=np.int64), np.zeros((dev.n_devices, 0), dtype=np.int64)
    idx = np.stack(np.unravel_index(np.arange(n_cells), grid.per_block), axis=-1)
    return idx, dev.new_block * (dev.new_local // np.array(grid.cell, dtype=np.int64))  # cell divides new local


def _grid_codes(grid: CellGrid, shape: Offset, base: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, int]:
    """``[len(base), cells per block]`` raveled global cell grid index of every block's cells, and
    how many cells the array has."""
    grid_shape = tuple(n // c for n, c in zip(shape, grid.cell))
    strides = np.array([math.prod(grid_shape[k + 1:]) for k in range(len(grid.cell))], dtype=np.int64)
    return (base @ strides)[:, None] + (idx @ strides)[None, :], math.prod(grid_shape)


def _provider_rows(grid: CellGrid, dev: DeviceTables, blocks: Offset, shape: Offset, offsets: bool) -> _NeedRows:
    """The rows ``_providers`` keeps, without tabulating the others: where the new type adds
    pending sums (fresh atoms) and the source has one replica, a group's members (devices
    differing only along the fresh atoms) share a new block and kept partial, so per (group, cell)
    the provider is the member of least group index whose old block holds the cell, else the
    member of index 0. Rows are ``groups x cells``, not ``devices x cells``; laid out device-major
    as ``_need_rows`` orders them (needs numbered in order of first need over every device: each
    group's first device is its member of index 0, the group key)."""
    idx, base = _cell_table(grid, dev)
    n_cells = len(idx)
    leads = np.flatnonzero(dev.group_index == 0)  # in device order: groups by their first device
    code, n_codes = _grid_codes(grid, shape, base[leads], idx)  # [groups, cells]
    cell = np.array(grid.cell, dtype=np.int64)
    n_blocks = math.prod(blocks)
    want = _held_blocks(grid, base[leads], dev.old_local, blocks)  # old block of each cell
    want += np.arange(len(leads))[:, None] * n_blocks  # (group, old block) of each (group, cell)
    lead_rank = np.zeros(dev.n_devices, dtype=np.int64)
    lead_rank[leads] = np.arange(len(leads))  # a group's key is its lead's device id
    key = lead_rank[dev.group] * n_blocks + _ravel(dev.old_block, blocks)  # each device's
    order = np.lexsort((dev.group_index, key))
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]]  # least group index per (group, block)
    found = np.minimum(np.searchsorted(key[first], want), len(first) - 1)
    provider = np.where(key[first][found] == want, first[found], leads[:, None])  # [groups, cells]
    n_kept = int(dev.kept.max()) + 1
    need = _first_need_order((code * n_kept + dev.kept[leads][:, None]).reshape(-1), n_codes * n_kept)
    cell_id = _dense_cells(code.reshape(-1), n_codes) if n_kept > 1 else need
    at = np.broadcast_to(np.arange(n_cells), code.shape).reshape(-1)
    rows = stable_order(provider.reshape(-1) * n_cells + at)  # device-major, cells in order (keys distinct:
    # a provider is a member of its own group)
    return _NeedRows(provider.reshape(-1)[rows], base, idx, cell, cell_id[rows], need[rows], offsets, at[rows])


def _per_dim_blocks(grid: CellGrid, base: np.ndarray, old_local: np.ndarray) -> list[np.ndarray]:
    """Per dimension ``k``, ``[len(base), cells per block along k]``: the old block index along
    ``k`` of each cell of each new block (``base``: its first cell). The old block of cell
    ``base + idx`` is ``(base + idx) * cell // old_local`` per dimension, and ``cell`` divides
    ``old_local``, so it is ``(base + idx) // (old_local / cell)``: per dimension a small table,
    not a ``[blocks, cells, rank]`` one (whose integer division was a quarter of the routing)."""
    return [(base[:, k, None] + np.arange(n)) // (int(old_local[k]) // c)
            for k, (n, c) in enumerate(zip(grid.per_block, grid.cell))]


def _spread(table: np.ndarray, k: int, per_block: Offset) -> np.ndarray:
    """A ``[n, per_block[k]]`` table shaped to broadcast over ``[n, *per_block]``."""
    shape = [len(table)] + [1] * len(per_block)
    shape[k + 1] = per_block[k]
    return table.reshape(shape)


def _held_blocks(grid: CellGrid, base: np.ndarray, old_local: np.ndarray, blocks: Offset) -> np.ndarray:
    """``[len(base), cells per block]``: the raveled old block (grid ``blocks``) holding each cell
    of each new block, cells in ``np.ndindex`` order: the ravel's sum of per-dimension terms
    (``_per_dim_blocks``), broadcast."""
    out = np.zeros((len(base), *grid.per_block), dtype=np.int64)
    stride = 1
    for k, t in reversed(list(enumerate(_per_dim_blocks(grid, base, old_local)))):
        out += _spread(t * stride, k, grid.per_block)
        stride *= blocks[k]
    return out.reshape(len(base), -1)


def _ravel(index: np.ndarray, shape: Offset) -> np.ndarray:
    """``[n, rank]`` grid indices as row-major ints (zeros for a scalar)."""
    return np.ravel_multi_index(tuple(index.T), shape) if len(shape) else np.zeros(len(index), dtype=np.int64)


def _dense_cells(code: np.ndarray, n_codes: int) -> np.ndarray:
    """Per row, the rank of its global cell code among those present."""
    present = np.zeros(n_codes, dtype=bool)
    present[code] = True
    return (np.cumsum(present) - 1)[code]


def _first_need_order(key: np.ndarray, n_keys: int) -> np.ndarray:
    """Per row, the rank of its key among the distinct keys ordered by first row."""
    first = np.full(n_keys, -1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # the earliest row wins (written last)
    row_first = first[key]  # per row, the first row of its key
    rank = np.cumsum(row_first == np.arange(len(key))) - 1  # first rows counted in row order
    return rank[row_first]


def _choose_replicas(grid: CellGrid, dev: DeviceTables, rows: _NeedRows) -> np.ndarray:
    """Per (cell, kept) need, the replica all its partials come from: the one in which most of the
    global cell's targets (over every kept partial) already hold the cell's old block, so the
    fewest cells move; ties go to the first such replica at or after the cell's id modulo the
    replica count, so cells no target holds are spread over every replica instead of all loading
    replica 0 (which once made one device send to hundreds: that many rounds)."""
    n_needs = int(rows.need.max()) + 1
    if not dev.replica.any():  # one replica (always so without unreduced axes)
        return np.zeros(n_needs, dtype=np.int64)
    values, column = np.unique(dev.replica, return_inverse=True)
    holds = rows.holds_old(dev)
    n_cells = int(rows.cell_id.max()) + 1
    rot = _rank_in_block(rows, dev, n_cells)  # ties rotate within each old block, spreading senders
    per_cell = values[_most_held(rows.cell_id[holds], column.reshape(-1)[rows.device[holds]], rot, len(values))]
    need_cell = np.zeros(n_needs, dtype=np.int64)
    need_cell[rows.need] = rows.cell_id
    return per_cell[need_cell]


def _rank_in_block(rows: _NeedRows, dev: DeviceTables, n_cells: int) -> np.ndarray:
    """Per global cell, its rank among the cells of the same old block (ids in order): rotating
    tied replicas by it gives each replica of a block an equal share of the block's cells (the
    cell id alone once put 33 of a block's cells on one replica: 33 rounds where 3 do)."""
    row = np.zeros(n_cells, dtype=np.int64)
    row[rows.cell_id] = np.arange(len(rows.cell_id))  # a row of each cell
    block = rows.gcell(row) * rows.cell // dev.old_local
    key = np.ravel_multi_index(tuple(block.T), tuple(block.max(axis=0) + 1)) if block.shape[1] else row * 0
    return rank_within(key)


def _most_held(cell: np.ndarray, column: np.ndarray, rot: np.ndarray, n_cols: int) -> np.ndarray:
    """Per cell, the column (replica) named most often by the pairs ``(cell[i], column[i])``; ties
    (and cells named by no pair) go to the first column at or after ``rot[cell] % n_cols``,
    cyclically. Counted on the distinct pairs (a sort), not on a dense ``cells x columns`` table,
    which at thousands of cells and replicas would be millions of entries."""
    out = rot % n_cols
    if not len(cell):
        return out
    pair, count = np.unique(cell * n_cols + column, return_counts=True)
    c, col = pair // n_cols, pair % n_cols
    order = np.lexsort(((col - rot[c]) % n_cols, -count, c))  # per cell: most held, then cyclic from rot
    first = order[np.r_[True, c[order][1:] != c[order][:-1]]]
    out[c[first]] = col[first]
    return out


class _Codes(NamedTuple):
    """Mixed-radix codes of ``(old block, kept, partial, replica)``: what an old block holds."""

    blocks: Offset  # old block grid shape
    n_kept: int
    n_red: int
    n_rep: int

    def of(self, block: np.ndarray, kept: np.ndarray, partial: np.ndarray, replica: np.ndarray) -> np.ndarray:
        flat = np.ravel_multi_index(tuple(block.T), self.blocks) if len(self.blocks) else np.zeros(len(kept), np.int64)
        return ((flat * self.n_kept + kept) * self.n_red + partial) * self.n_rep + replica


class _Holders(NamedTuple):
    """Devices grouped by holder code, in device order within a group."""

    code: np.ndarray     # [groups] sorted distinct codes
    start: np.ndarray    # [groups] first index of each group in ``members``
    n: np.ndarray        # [groups] devices holding it
    members: np.ndarray  # [devices] device ids sorted by code

    @staticmethod
    def of(dev_code: np.ndarray) -> _Holders:
        members = stable_order(dev_code)
        code, start, n = np.unique(dev_code[members], return_index=True, return_counts=True)
        return _Holders(code, start, n, members)

    def find(self, code: np.ndarray) -> np.ndarray:
        """The group of each code (every code asked for has holders: replicas are chosen among
        those present)."""
        g = np.minimum(np.searchsorted(self.code, code), len(self.code) - 1)
        if not (self.code[g] == code).all():  # pragma: no cover - an invariant of the tables
            raise AssertionError("exchange: a cell without a holder")
        return g


class _Needs(NamedTuple):
    """Per (global cell, kept partial), in order of first need."""

    start: np.ndarray    # [needs, rank] global element index of the cell's first element
    code: np.ndarray     # [needs] holder code of partial 0 in the chosen replica
    holds: np.ndarray    # [rows] whether the row's device holds some partial of its need


def _needs(grid: CellGrid, dev: DeviceTables, rows: _NeedRows, codes: _Codes) -> _Needs:
    n_needs = int(rows.need.max()) + 1
    first = np.zeros(n_needs, dtype=np.int64)
    first[rows.need[::-1]] = np.arange(len(rows.need))[::-1]  # the earliest row of each need
    start = rows.gcell(first) * rows.cell
    kept = dev.kept[rows.device[first]]
    code = codes.of(start // dev.old_local, kept, kept * 0, _choose_replicas(grid, dev, rows))
    dev_code = codes.of(dev.old_block, dev.kept, dev.kept * 0, dev.replica)
    return _Needs(start, code, dev_code[rows.device] == code[rows.need])


def _providers(dev: DeviceTables, rows: _NeedRows, holds: np.ndarray) -> np.ndarray:
    """For axes the new type makes unreduced, the rows (one per need and group of devices that
    differ only along them) that carry the cell: a holder if the group has one, else its first
    member; the other members keep zeros. Rows stay in their order. A group's members share a
    new block and a kept partial, so their rows list the same needs in the same order: a
    ``[groups, members, cells]`` table of ``holds`` whose first holder per (group, cell) is one
    ``argmax`` (0, the first member, where none holds), no sort of the rows."""
    n_idx = int(dev.group_index.max()) + 1
    members = stable_order(dev.group * n_idx + dev.group_index).reshape(-1, n_idx)
    n_cells = len(rows.idx)
    table = members[:, :, None] * n_cells + np.arange(n_cells)  # [groups, members, cells] rows
    first = holds[table].argmax(axis=1)  # [groups, cells]
    chosen = np.zeros(len(holds), dtype=bool)
    chosen[np.take_along_axis(table, first[:, None, :], axis=1)] = True
    return np.flatnonzero(chosen)


def _senders(h: _Holders, grp: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A holder of group ``grp[i]`` to send request ``i`` to ``dst[i]``: each group's requests are
    spread evenly (at most ``ceil(requests / holders)`` per holder, the fewest rounds), each going
    to the first holder at or after its receiver in device order (wrapping) where that one has room,
    else to the next with room; requests left past the last holder take the first free ones."""
    n = len(grp)
    if not n:
        return np.zeros(0, dtype=np.int64)
    span = int(max(int(dst.max()), int(h.members.max()))) + 1
    member_key = np.repeat(np.arange(len(h.code)), h.n) * span + h.members
    p = np.searchsorted(member_key, grp * span + dst) - h.start[grp]
    p = np.where(p >= h.n[grp], 0, p)  # nearest holder after dst, wrapping
    order = stable_order(grp * span + p)  # p < holders <= span
    g, p = grp[order], p[order]
    n_req = np.bincount(grp, minlength=len(h.code))
    j = np.arange(n) - (np.cumsum(n_req) - n_req)[g]
    cap = -(-n_req // h.n)  # ceil
    slots = h.n * cap
    big = int(slots.max()) + 2 * n + 1
    acc = np.maximum.accumulate(g * big + p * cap[g] - j + n) - g * big - n
    slot = j + acc  # the first slot at or after the preferred holder's, after the earlier requests
    over = slot >= slots[g]
    if over.any():
        slot[over] = _free_slots(slots, g, slot, over)
    out = np.empty(n, dtype=np.int64)
    out[order] = h.members[h.start[g] + slot // cap[g]]
    return out


def _free_slots(slots: np.ndarray, g: np.ndarray, slot: np.ndarray, over: np.ndarray) -> np.ndarray:
    """The requests ``over`` ran past their group's last slot: they take the group's lowest free
    slots, in order."""
    base = np.cumsum(slots) - slots
    occupied = np.zeros(int(slots.sum()), dtype=bool)
    occupied[base[g[~over]] + slot[~over]] = True
    free = np.flatnonzero(~occupied)
    free_g = np.searchsorted(base, free, side="right") - 1
    free_rank = np.arange(len(free)) - np.searchsorted(free_g, free_g)
    og = g[over]
    o_rank = np.arange(len(og)) - np.searchsorted(og, og)
    m = len(free) + 1
    idx = np.searchsorted(free_g * m + free_rank, og * m + o_rank)
    return free[idx] - base[og]


def _items(src: np.ndarray, dst: np.ndarray, src_offset: np.ndarray, dst_offset: np.ndarray) -> _Items:
    """Fancy-indexed arrays are fresh already: convert, never copy, int64 ones (planning reads these)."""
    return _Items(*(np.asarray(a, dtype=np.int64) for a in (src, dst, src_offset, dst_offset)))


class _Routed(NamedTuple):
    local: _Items    # src == dst, in the order each device adds them
    merge: _Items    # phase A: old blocks -> targets / roots; counting only, ``src`` is empty
    forward: _Items  # phase B: roots -> other targets
    level: np.ndarray  # [forward] phase-B level: the rounds of level l follow those of level l-1
    send_load: int   # the most phase-A cells one device sends (``_sent``)


def _sent(h: _Holders, grp: np.ndarray, dst: np.ndarray, offsets: bool) -> tuple[np.ndarray, int]:
    """The senders of requests to holder groups ``grp`` (``_senders``) and the most one device
    sends. Counting only (``routing``: no offsets), the senders are not chosen: ``_senders`` gives
    each holder of a group at most ``cap = ceil(requests / holders)`` requests, so by pigeonhole
    some holder gets exactly ``cap``, and each device holds for one group only: the busiest sender
    sends the largest ``cap`` (tests check it against the chosen senders)."""
    if offsets:
        s = _senders(h, grp, dst)
        return s, int(np.bincount(s).max()) if len(s) else 0
    if not len(grp):
        return np.zeros(0, dtype=np.int64), 0
    n_req = np.bincount(grp, minlength=len(h.code))
    return np.zeros(0, dtype=np.int64), int((-(-n_req // h.n)).max())


def _route_direct(dev: DeviceTables, rows: _NeedRows, needs: _Needs, sel: np.ndarray, h: _Holders) -> _Routed:
    """Without reduced axes: each target adds its cell from its own old block when it holds it,
    else receives it from a holder (``_senders``). Needs in order, targets in device order."""
    sel = sel[stable_order(rows.need[sel])]  # row order is device order
    held = needs.holds[sel]
    mine = sel[held]
    local = _items(rows.device[mine], rows.device[mine],
                   rows.src_offset(needs.start, rows.need[mine], dev.old_start, rows.device[mine]), rows.offset(mine))
    far = sel[~held]
    s, load = _sent(h, h.find(needs.code[rows.need[far]]), rows.device[far], rows.offsets)
    merge = _items(s, rows.device[far], rows.src_offset(needs.start, rows.need[far], dev.old_start, s), rows.offset(far))
    return _Routed(local, merge, _Items.of([], len(dev.old_local)), np.zeros(0, dtype=np.int64), load)


def _route_reduced(dev: DeviceTables, rows: _NeedRows, needs: _Needs, sel: np.ndarray, h: _Holders,
                   n_red: int, n_rep: int) -> _Routed:
    """With reduced axes the partials of each cell merge at one *root* target (a holder if any,
    else the first target): ``k - 1`` cells into it; the root then forwards the sum to the other
    targets, ``|T| - 1`` cells: the ``(k-1) + (|T|-1)`` bound of ``redist.bounds``."""
    rank = len(dev.old_local)
    # ``sel`` is in row order, so in device order with one row per (device, need): a stable sort
    # on (need, not holding) leaves each need's rows in device order (one key, no lexsort)
    need_sel = rows.need[sel]
    order = sel[stable_order(need_sel * 2 + ~needs.holds[sel])]
    is_root = np.r_[True, rows.need[order][1:] != rows.need[order][:-1]]
    root_row = np.empty(len(needs.code), dtype=np.int64)
    root_row[rows.need[order[is_root]]] = order[is_root]
    root, root_off = rows.device[root_row], rows.offset(root_row)
    n_needs = len(needs.code)
    need = np.repeat(np.arange(n_needs), n_red)
    code = needs.code[need] + np.tile(np.arange(n_red), n_needs) * n_rep  # partial u of the need
    dev_code = h.code[_device_group(h, dev.n_devices)]
    own = dev_code[root[need]] == code
    local = _items(root[need[own]], root[need[own]],
                   rows.src_offset(needs.start, need[own], dev.old_start, root[need[own]]), root_off[need[own]])
    far = ~own
    s, load = _sent(h, h.find(code[far]), root[need[far]], rows.offsets)
    merge = _items(s, root[need[far]], rows.src_offset(needs.start, need[far], dev.old_start, s), root_off[need[far]])
    not_root = np.ones(len(rows.need), dtype=bool)
    not_root[root_row] = False
    rest = sel[not_root[sel]]
    rest = rest[stable_order(rows.need[rest])]  # need-major, then device order
    if not len(rest):
        return _Routed(local, merge, _Items.of([], rank), np.zeros(0, dtype=np.int64), load)
    fwd, level = _forwarding(rows, rest, root, root_off)
    return _Routed(local, merge, fwd, level, load)


class _Cover(NamedTuple):
    """Per (need, group of devices differing only along the new type's unreduced atoms) that holds
    the need's old block: the replica of which its members hold the most partials, how many, and
    its first member holding one of them (rows device-major, so the first row)."""

    key: np.ndarray      # [pairs] sorted ``need * devices + group``
    replica: np.ndarray  # [pairs]
    n_held: np.ndarray   # [pairs] partials of that replica its members hold
    first: np.ndarray    # [pairs] a row

    def find(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of each key and whether it is present."""
        if not len(self.key):
            return np.zeros(len(key), dtype=np.int64), np.zeros(len(key), dtype=bool)
        i = np.minimum(np.searchsorted(self.key, key), len(self.key) - 1)
        return i, self.key[i] == key


def _cover(dev: DeviceTables, rows: _NeedRows, hold: np.ndarray) -> _Cover:
    n_dev, n_rep = dev.n_devices, int(dev.replica.max()) + 1
    hr = np.flatnonzero(hold)
    d = rows.device[hr]
    key3 = (rows.need[hr] * n_dev + dev.group[d]) * n_rep + dev.replica[d]
    u, first, count = np.unique(key3, return_index=True, return_counts=True)
    key2, rep = u // n_rep, u % n_rep
    order = np.lexsort((rep, -count, key2))  # per pair: most partials, then the least replica
    best = order[np.r_[True, key2[order][1:] != key2[order][:-1]]] if len(order) else order
    return _Cover(key2[best], rep[best], count[best], hr[first[best]])


def _route_merged(dev: DeviceTables, rows: _NeedRows, needs: _Needs, sel: np.ndarray, h: _Holders,
                  codes: _Codes) -> _Routed:
    """The merging exchange: every partial of the source is summed (kept ones too) and each
    *group* (devices differing only along the new type's unreduced atoms) needs one decomposition
    of the sum. Per need (global cell), a group is *complete* when its members hold every
    partial of one replica. No incomplete group: each complete one keeps its partials. Else a
    *root*, in the first complete group if any (its other members keep zeros), receives the
    partials it lacks of its replica and forwards the sum to one member of each incomplete group
    (``(k - 1) + I`` messages; the other complete groups keep theirs), unless the only
    incomplete group is the root's (no complete one), whose holders keep their partials while
    the root receives the ones they lack (``k - cover``). Without a complete group and with
    several incomplete ones it is ``_route_reduced``'s rule (``k - [root holds] + I - 1``).
    These are the exchange-slack programs of ``redist.bounds``: they meet the bound there."""
    k, n_rep, n_dev = codes.n_red, codes.n_rep, dev.n_devices
    n_needs = len(needs.code)
    block = needs.code // (n_rep * k)  # the cell's (old block, kept) code
    dev_block = codes.of(dev.old_block, dev.kept, dev.kept * 0, dev.kept * 0) // (n_rep * k)
    hold = dev_block[rows.device] == block[rows.need]  # any partial of any replica
    cov = _cover(dev, rows, hold)
    sel_key = rows.need[sel] * n_dev + dev.group[rows.device[sel]]
    ci, present = cov.find(sel_key)
    complete = present & (cov.n_held[ci] == k)
    nc = np.bincount(rows.need[sel], weights=complete, minlength=n_needs).astype(np.int64)
    ni = np.bincount(rows.need[sel], weights=~complete, minlength=n_needs).astype(np.int64)
    root_row, root_rep, mode = _merged_roots(rows, needs, sel, complete, cov, ci, present, nc, ni, n_rep)
    root = rows.device[root_row]
    root_grp = dev.group[root]
    # local copies: holders of their group's best replica, in complete groups other than the root's
    # (every one where no group is incomplete), in the root's group where it is the only one (C)
    hr = np.flatnonzero(hold)
    hi, _ = cov.find(rows.need[hr] * n_dev + dev.group[rows.device[hr]])
    n = rows.need[hr]
    same = dev.group[rows.device[hr]] == root_grp[n]
    best = dev.replica[rows.device[hr]] == cov.replica[hi]
    keep = best & (((cov.n_held[hi] == k) & ((mode[n] == _KEEP) | ~same)) | ((mode[n] == _SOLE) & same))
    own = (hr == root_row[n]) & (dev.replica[rows.device[hr]] == root_rep[n]) & (mode[n] != _KEEP)
    keep |= own  # the root's own partial, where it is of the replica the root sums
    mine = hr[keep]
    local = _items(rows.device[mine], rows.device[mine],
                   rows.src_offset(needs.start, rows.need[mine], dev.old_start, rows.device[mine]), rows.offset(mine))
    merge, load = _merged_gather(dev, rows, needs, mine, root, root_row, root_rep, root_grp, mode, h, k, n_rep)
    rest = sel[(mode[rows.need[sel]] == _FORWARD) & ~complete & (dev.group[rows.device[sel]] != root_grp[rows.need[sel]])]
    rest = rest[stable_order(rows.need[rest])]  # need-major, then device order
    if not len(rest):
        return _Routed(local, merge, _Items.of([], len(dev.old_local)), np.zeros(0, dtype=np.int64), load)
    fwd, level = _forwarding(rows, rest, root, rows.offset(root_row))
    return _Routed(local, merge, fwd, level, load)


_KEEP, _SOLE, _FORWARD = 0, 1, 2
"""Per need of the merging exchange: every group complete (each keeps); one incomplete group and
no complete one (its holders keep, the root completes it); a root forwards the sum."""


def _merged_roots(rows: _NeedRows, needs: _Needs, sel: np.ndarray, complete: np.ndarray, cov: _Cover,
                  ci: np.ndarray, present: np.ndarray, nc: np.ndarray, ni: np.ndarray, n_rep: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per need: the root's row, the replica it sums, and the need's mode. The root's group is
    the first complete one, else (one incomplete group) that group, at its first holder of its
    best replica (its provider where it holds nothing); else ``_route_reduced``'s root (the first
    provider holding the chosen replica, else the first provider)."""
    n_needs = len(nc)
    chosen = needs.code % n_rep
    mode = np.where(ni == 0, _KEEP, np.where((nc == 0) & (ni == 1), _SOLE, _FORWARD))
    need_sel = rows.need[sel]
    order = sel[stable_order(need_sel * 2 + ~needs.holds[sel])]  # ``_route_reduced``'s rule
    first = np.r_[True, rows.need[order][1:] != rows.need[order][:-1]]
    root_row = np.empty(n_needs, dtype=np.int64)
    root_row[rows.need[order[first]]] = order[first]
    root_rep = chosen.copy()
    # the first complete group, else the sole group: its best replica's first holder
    pick = np.where(complete, 0, 1)
    order = np.flatnonzero(complete | (nc[need_sel] == 0))
    order = order[stable_order(need_sel[order] * 2 + pick[order])]
    firsts = order[np.r_[True, need_sel[order][1:] != need_sel[order][:-1]]] if len(order) else order
    n = need_sel[firsts]
    use = (nc[n] > 0) | (ni[n] == 1)
    firsts, n = firsts[use], n[use]
    held = present[firsts]
    root_row[n] = np.where(held, cov.first[ci[firsts]], sel[firsts])
    root_rep[n] = np.where(held, cov.replica[ci[firsts]], chosen[n])
    return root_row, root_rep, mode


def _merged_gather(dev: DeviceTables, rows: _NeedRows, needs: _Needs, mine: np.ndarray, root: np.ndarray,
                   root_row: np.ndarray, root_rep: np.ndarray, root_grp: np.ndarray, mode: np.ndarray,
                   h: _Holders, k: int, n_rep: int) -> tuple[_Items, int]:
    """Phase A of the merging exchange: each root receives the partials of its replica that no
    local copy of its group adds (in ``_SOLE`` needs its group's holders keep theirs, else only
    the root's own is local)."""
    n_needs = len(root)
    covered = np.zeros(n_needs * k, dtype=bool)
    d = rows.device[mine]
    at_root = dev.group[d] == root_grp[rows.need[mine]]
    covered[rows.need[mine][at_root] * k + dev.partial[d][at_root]] = True
    covered.reshape(n_needs, k)[mode == _KEEP] = True
    want = np.flatnonzero(~covered)
    need, u = want // k, want % k
    code = needs.code[need] - needs.code[need] % n_rep + root_rep[need] + u * n_rep
    s, load = _sent(h, h.find(code), root[need], rows.offsets)
    return _items(s, root[need], rows.src_offset(needs.start, need, dev.old_start, s), rows.offset(root_row[need])), load


def _forwarding(rows: _NeedRows, rest: np.ndarray, root: np.ndarray, root_off: np.ndarray) -> tuple[_Items, np.ndarray]:
    """Phase B: each need's sum from its root to its other targets ``rest`` (need-major), and the
    level of each transfer. A *star* (the root sends to all, one level) unless a *doubling tree*
    needs fewer rounds: target ``j`` (1-based, per need) receives at level ``floor(log2 j)`` from
    target ``j - 2**level`` (0: the root), which has the sum from an earlier level. Bytes are the
    same (one cell per non-root target); rounds are the max degree of the star, against the sum
    over levels of each level's max degree."""
    need = rows.need[rest]
    rest_off = rows.offset(rest)
    star = _items(root[need], rows.device[rest], root_off[need], rest_off)
    star_rounds = degree(star.src, star.dst)
    if star_rounds <= 2:
        return star, np.zeros(len(rest), dtype=np.int64)
    j = np.arange(1, len(rest) + 1) - run_starts(need)  # 1-based index among the need's targets
    if star_rounds <= int(j.max()).bit_length():  # the tree has a round per level at least
        return star, np.zeros(len(rest), dtype=np.int64)
    level = np.floor(np.log2(j)).astype(np.int64)
    level += (np.left_shift(1, level + 1) <= j).astype(np.int64) - (np.left_shift(1, level) > j)
    frm = j - np.left_shift(1, level)  # 0: the root, else the need's target number frm
    row = rest[np.maximum(np.arange(len(rest)) - j + frm, 0)]
    tree = _items(np.where(frm == 0, root[need], rows.device[row]), rows.device[rest],
                  np.where((frm == 0)[:, None], root_off[need], rows.offset(row)), rest_off)
    tree_rounds = _phased_degree(tree.src, tree.dst, level)
    if tree_rounds < star_rounds:
        return tree, level
    return star, np.zeros(len(rest), dtype=np.int64)


def _phased_degree(src: np.ndarray, dst: np.ndarray, level: np.ndarray) -> int:
    """The sum over levels of each level's max degree (its rounds, each level coloured apart): one
    count over (level, device) pairs instead of a masked pass per level."""
    if not len(src):
        return 0
    n = int(max(src.max(), dst.max())) + 1
    n_lv = int(level.max()) + 1
    per = [np.bincount(level * n + v, minlength=n_lv * n).reshape(n_lv, n).max(axis=1) for v in (src, dst)]
    return int(np.maximum(*per).sum())


def _device_group(h: _Holders, n_dev: int) -> np.ndarray:
    """The holder group of each device."""
    out = np.empty(n_dev, dtype=np.int64)
    out[h.members] = np.repeat(np.arange(len(h.code)), h.n)
    return out


class _Items(NamedTuple):
    """Transfers as arrays: ``[n]`` senders and receivers, ``[n, rank]`` offsets."""

    src: np.ndarray
    dst: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray

    @staticmethod
    def of(items: Sequence[tuple[int, int, Offset, Offset]], rank: int) -> _Items:
        if not items:
            z = np.zeros(0, dtype=np.int64)
            return _Items(z, z, np.zeros((0, rank), np.int64), np.zeros((0, rank), np.int64))
        src, dst, so, do = zip(*items)
        return _Items(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                      np.array(so, dtype=np.int64).reshape(len(items), rank),
                      np.array(do, dtype=np.int64).reshape(len(items), rank))

    def take(self, idx: np.ndarray) -> _Items:
        return _Items(self.src[idx], self.dst[idx], self.src_offset[idx], self.dst_offset[idx])


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


def _coloured_rounds(n_dev: int, it: _Items, from_output: bool, torus: Sequence[int]) -> list[Round]:
    """The fewest rounds in which no device sends or receives two cells (``redist.colouring``,
    seeded with the mesh offsets of ``torus``)."""
    if not len(it.src):
        return []
    col = colours(it.src, it.dst, torus)
    n_rounds, rank = int(col.max()) + 1, it.src_offset.shape[1]
    send = np.zeros((n_rounds, n_dev, rank), dtype=np.int64)  # every round's arrays in one pass
    recv = np.zeros((n_rounds, n_dev, rank), dtype=np.int64)
    valid = np.zeros((n_rounds, n_dev), dtype=bool)
    send[col, it.src] = it.src_offset
    recv[col, it.dst] = it.dst_offset
    valid[col, it.dst] = True
    order = np.argsort(col, kind="stable")
    order = order[it.src[order] != it.dst[order]]
    cuts = np.searchsorted(col[order], np.arange(1, n_rounds))
    src, dst = np.split(it.src[order], cuts), np.split(it.dst[order], cuts)
    return [Round(tuple(zip(src[r].tolist(), dst[r].tolist())), send[r], recv[r], valid[r], from_output)
            for r in range(n_rounds)]


def _local_rounds(n_dev: int, it: _Items) -> list[Round]:
    """The i-th local copy of every device in round i."""
    order = np.argsort(it.dst, kind="stable")
    d = it.dst[order]
    index = np.arange(len(d)) - np.searchsorted(d, d)
    return [_pack(n_dev, it, order[index == i]) for i in range(int(index.max()) + 1 if len(d) else 0)]


def _pack_schedule(grid: CellGrid, n_dev: int, routed: _Routed, torus: Sequence[int]) -> Schedule:
    """Local copies, then phase A, then phase B."""
    rounds = _coloured_rounds(n_dev, routed.merge, False, torus)
    for lv in range(int(routed.level.max()) + 1 if len(routed.level) else 0):
        rounds += _coloured_rounds(n_dev, routed.forward.take(np.flatnonzero(routed.level == lv)), True, torus)
    received = np.concatenate([routed.merge.dst, routed.forward.dst])
    recv_cells = np.bincount(received, minlength=n_dev).astype(np.int64)
    return Schedule(grid.cell, tuple(_local_rounds(n_dev, routed.local)), tuple(rounds), recv_cells)


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
    The devices run in classes that exchange only among themselves (``redist.exchange_classes``):
    one class's schedule is built and repeated for every class.
    """
    check_schedule(old, new)
    return _schedule(old, new, merges(old, new))


@memo(Scope.TYPE)
def _schedule(old: ShardingType, new: ShardingType, merged: bool) -> Schedule:
    c = classes(old, new, merged)
    if c is not None:
        return _lift(c, _schedule(c.quotient_old, c.quotient_new, merged))
    grid, n_dev, routed = _route(old, new, True, merged)
    return _pack_schedule(grid, n_dev, routed, tuple(n for _, n in old.mesh.axes))


MERGED_MAX_ROWS = 1 << 12
"""(device, cell, partial) rows past which ``merges`` does not try the merging exchange, and the
exchange floors do not count it. Its routing rarely factors into classes (only aligned atoms do),
so it costs about twice the other's, both are routed for every exchange candidate, and its lower
floors open more candidates to routing: on the 4,096- and 8,192-device ladder rungs of 12 and 13
axes it took the slowest pending-sum pairs from 27-56 ms to 46-110 ms of planning, past the 50 ms
target, without bringing any of them to the bound (with a limit of ``1 << 16`` still 62 ms). The
exhaustive pairs it brings to the bound (96, design 13.2) have at most a few hundred rows. Past
the limit the partial-by-partial exchange is used, and a plan above the bound is counted as such
(``redist bench-plan``'s shared-unreduced column)."""


@memo(Scope.TYPE)
def merges(old: ShardingType, new: ShardingType) -> bool:
    """Whether ``schedule(old, new)`` is the merging exchange (``_route_merged``): only where the
    types share an unreduced atom, and only where it receives fewer cells than the exchange that
    moves kept partials one by one (or as many in fewer rounds); never where its own tables or
    packed rounds would pass ``MAX_CELLS`` or ``MAX_PACKED``, nor past ``MERGED_MAX_ROWS`` (the
    other one is used then)."""
    if not may_merge(old, new):
        return False
    try:
        m = _routing(old, new, True)
    except ExchangeTooFineError:
        return False
    if not _few_cells(old, new, True) and m.rounds * old.mesh.size * max(1, old.rank) > MAX_PACKED:
        return False
    if m.cells < _direct_reduced_cells(old, new):
        return True  # fewer cells than the other can receive: no need to route it
    direct = _routing(old, new, False)
    return (m.cells, m.rounds) < (direct.cells, direct.rounds)


def _lift(c: Classes, sch: Schedule) -> Schedule:
    """One class's schedule run by every class at once."""
    def lift(r: Round) -> Round:
        return Round(lift_pairs(c, r.pairs), lift_rows(c, r.send_offset), lift_rows(c, r.recv_offset),
                     lift_rows(c, r.recv_valid), r.from_output)
    return Schedule(sch.cell, tuple(map(lift, sch.local_copies)), tuple(map(lift, sch.rounds)),
                    lift_rows(c, sch.recv_cells))


@memo(Scope.TYPE, maxsize=64)  # read twice per floor (bytes and rounds)
def group_missing(old: ShardingType, new: ShardingType, merged: bool = False) -> np.ndarray | None:
    """Per device, the elements of its new block that no device of its *group* (those differing
    only along ``new``'s fresh unreduced atoms, one device without any; with ``merged``, along any
    of its unreduced atoms: the merging exchange's groups) holds in its old block,
    whatever partial or replica: each must reach the group in at least one received cell, so the
    sum over groups bounds any exchange's traffic from below. The members' old blocks are the
    product over dimensions of the blocks their fresh atoms in that dimension span, so what a group
    holds of its new block is a product, per dimension, of the members' overlaps summed over the
    fresh atoms of that dimension: per-device NumPy rows, no cells. ``None`` where those sums could
    leave int64, and where a sub-axis is not a product of the mesh's prime atoms (``x:(3)2`` on
    ``x=6``, ``on_prime_atoms``): its digit is not one of the fresh atoms', so a dimension's overlap
    would vary along atoms it does not name, and no product of group sums counts the blocks a
    group holds (``f32[6@(x:(3)2)] -> f32[6@y]{U:x}`` on ``{x=6,y=2}`` once claimed 4 missing
    elements where every group held its new block whole)."""
    mesh = old.mesh
    fresh = _partial_axes(old, new, merged).fresh
    if not _group_sums_countable(old, new, fresh):
        return None
    widths = overlap_widths(old, new)  # checks sizes and the mesh first
    held = np.ones(mesh.size, dtype=np.int64)
    for width, atoms in zip(widths, dims_atoms(old)):
        # a dimension's overlap varies only along its own atoms: sum over the fresh ones among them
        mine = tuple(a for a in fresh if a in atoms)
        held = held * (group_sums(mesh, mine, width) if mine else width)
    out = new.local_size - held
    out.setflags(write=False)  # cached: shared by every caller
    return out


def _group_sums_countable(old: ShardingType, new: ShardingType, fresh: tuple[Atom, ...]) -> bool:
    """Where ``group_missing`` counts (it is ``None`` elsewhere, and ``sampled_provider_cells`` 0):
    the group sums fit int64, and both types are on the mesh's prime atoms."""
    return (max(new.local_shape, default=1) * math.prod(a.size for a in fresh) < 1 << 62
            and on_prime_atoms(old) and on_prime_atoms(new))


def provider_cells(old: ShardingType, new: ShardingType) -> int:
    """A floor on the most cells one device receives in ``schedule(old, new)``, without its rows
    (0 where ``group_missing`` cannot tell). Every cell a group lacks entirely goes to one member
    (``_providers``: the first, as no member holds it; without fresh atoms the group is the device
    itself), which receives at least one cell for it: a partial as the root, or the forwarded sum.
    Exact without unreduced axes in ``old`` (each such cell is one cell received). Phases are
    coloured apart, so the schedule has at least this many rounds (the synthesizer's round floor,
    ``redist.synth._pending_sum_rounds``)."""
    cell = math.prod(_cell_grid(old, new).cell)
    floors = [group_missing(old, new, merged) for merged in _modes(old, new)]
    return min(0 if m is None else int(m.max()) // cell for m in floors)


SAMPLED_MAX_MEMBERS = 1 << 10
"""Members of one device's group past which ``sampled_provider_cells`` counts nothing for it
(a floor of 0 is always sound): it sums their overlaps one by one, in Python."""


@memo(Scope.TYPE, maxsize=4096)
def sampled_provider_cells(old: ShardingType, new: ShardingType) -> int:
    """``provider_cells`` read on two devices only, the first and the last (every coordinate 0,
    every coordinate at its top), so at most it: the most cells one of them must receive is a
    floor on the most any device must. No per-device table: per dimension, each sampled device's
    old blocks summed over its group (``group_missing``'s fresh atoms, which its new block does
    not depend on), a few integer operations. On 13 axes of 2 it is the round floor that prunes
    exchange starts (it did, where ``provider_cells`` did, for 62 of 66 of one ladder rung's
    prefixes), at a fraction of ``group_missing``'s per-device tables, so
    ``redist.synth._bytes_floor`` reads it before those."""
    cell = math.prod(cell_shape(old, new))
    return min(_sampled_missing(old, new, merged) // cell for merged in _modes(old, new))


def _sampled_missing(old: ShardingType, new: ShardingType, merged: bool) -> int:
    """The greater ``group_missing`` of the first device and the last; 0 where it would be
    ``None`` or a group is past ``SAMPLED_MAX_MEMBERS``. A dimension's block index is mixed radix
    over its atoms, major first: 0 on the first device, the block count less one on the last;
    a member of the group differs by its digits on the fresh atoms, each times its stride."""
    fresh = _partial_axes(old, new, merged).fresh
    if not _group_sums_countable(old, new, fresh):
        return 0
    held = [1, 1]
    for atoms_old, atoms_new, lo, ln in zip(dims_atoms(old), dims_atoms(new), old.local_shape, new.local_shape):
        offsets = [0]  # each member's block index less the sampled device's, on the first device
        stride = 1
        for a in reversed(atoms_old):
            if a in fresh:
                offsets = [o + k * stride for o in offsets for k in range(a.size)]
                if len(offsets) > SAMPLED_MAX_MEMBERS:
                    return 0
            stride *= a.size
        top_new = math.prod(a.size for a in atoms_new) - 1
        top_old = stride - 1 - (offsets[-1] if offsets else 0)  # the last device's fresh digits at their top too
        for i, (s_new, base) in enumerate(((0, 0), (top_new * ln, top_old))):
            width = 0
            for o in offsets:
                s = (base + o) * lo
                width += max(0, min(s + lo, s_new + ln) - max(s, s_new))
            held[i] *= width
    return new.local_size - min(held)


def _modes(old: ShardingType, new: ShardingType) -> tuple[bool, ...]:
    """The exchanges ``schedule(old, new)`` may be (``merges``), for floors that must hold for
    either without routing to learn which: the merging one only where the types share an
    unreduced atom and within ``MERGED_MAX_ROWS`` (``may_merge``)."""
    return (False, True) if may_merge(old, new) else (False,)


def may_merge(old: ShardingType, new: ShardingType) -> bool:
    """Whether ``merges`` considers the merging exchange at all: the types share an unreduced atom
    and its rows are within ``MERGED_MAX_ROWS``. Floors take the lesser of both exchanges' only
    here: a lower floor elsewhere would only open more candidates to routing."""
    if not unreduced_atoms(old) & unreduced_atoms(new):
        return False
    rows = old.mesh.size * math.prod(_cell_grid(old, new).per_block) * _partial_axes(old, new, True).n_reduced
    return rows <= MERGED_MAX_ROWS


def group_missing_total(old: ShardingType, new: ShardingType) -> int:
    """Elements summed over groups that ``group_missing`` says each group must receive (0 where it
    cannot tell): a floor on the elements any exchange ``old -> new`` receives in all (the least
    over the exchanges ``schedule`` may be, ``_modes``)."""
    return min(_group_missing_total(old, new, merged) for merged in _modes(old, new))


def _group_missing_total(old: ShardingType, new: ShardingType, merged: bool) -> int:
    missing = group_missing(old, new, merged)
    if missing is None:
        return 0
    n_group = math.prod(a.size for a in _partial_axes(old, new, merged).fresh)
    if int(missing.max()) <= (1 << 62) // len(missing):
        return int(missing.sum()) // n_group
    return sum(int(x) for x in missing.tolist()) // n_group


def reduced_cells(old: ShardingType, new: ShardingType) -> int:
    """A floor on the cells ``routing(old, new)`` receives where ``new`` sums ``k > 1`` partials,
    without rows (0 otherwise): exact where the old type has one replica. ``_route_reduced``
    receives, per need (global cell, kept partial), ``k - 1`` partials at the root (``k`` where no
    target holds the cell) and the sum at each other target: one per target group (devices
    differing only along fresh atoms share a new block and a kept partial), so in all
    ``needs * (k - 1) + groups * cells per block - held``, where ``held`` (needs whose root holds a
    partial of the chosen replica) is at most the needs some target holds in any replica. Two
    devices' old-and-new overlaps are equal or disjoint (each type's blocks tile the array), equal
    exactly when they agree on the atoms either type shards and on the kept atoms, so that count
    is the summed overlap divided by how many devices share those coordinates. Exact integers.
    Where the types share an unreduced atom, the lesser of that and the merging exchange's floor."""
    direct = _direct_reduced_cells(old, new)
    if direct == 0 or not may_merge(old, new):
        return direct
    return min(direct, _merged_reduced_cells(old, new, _cell_grid(old, new)))


def _direct_reduced_cells(old: ShardingType, new: ShardingType) -> int:
    """``reduced_cells`` of the partial-by-partial exchange (``_route_reduced``) alone: ``merges``
    routes the merging exchange first and skips routing this one where it cannot do better."""
    axes = _partial_axes(old, new)
    k = axes.n_reduced
    if k == 1:
        return 0
    grid = _cell_grid(old, new)
    cell = math.prod(grid.cell)
    n_kept, n_fresh = (math.prod(a.size for a in atoms) for atoms in (axes.kept, axes.fresh))
    needs = math.prod(n // c for n, c in zip(old.shape, grid.cell)) * n_kept
    targets = old.mesh.size // n_fresh * math.prod(grid.per_block)
    distinct = math.prod(a.size for a in {a for t in (old, new) for d in dims_atoms(t) for a in d} | set(axes.kept))
    held = overlap_total(old, new) // cell * distinct // old.mesh.size
    return needs * (k - 1) + targets - held


def _merged_reduced_cells(old: ShardingType, new: ShardingType, grid: CellGrid) -> int:
    """The merging exchange's floor where partials are summed (``k_red > 1``): no group of
    devices differing along the new unreduced atoms covers more than the kept partials of one
    reduced coordinate, so none is complete; per cell the root receives at least ``k - kept``
    partials and every other target group one cell."""
    axes = _partial_axes(old, new, True)
    n_kept = math.prod(a.size for a in unreduced_atoms(old) & unreduced_atoms(new))
    n_cells = math.prod(n // c for n, c in zip(old.shape, grid.cell))
    targets = old.mesh.size // math.prod(a.size for a in axes.fresh) * math.prod(grid.per_block)
    return n_cells * (axes.n_reduced - n_kept) + targets - n_cells


ROOTED_MAX_CELLS = 1 << 20
"""Cells of one new block past which ``rooted_rounds`` gives 0 rather than tabulate them."""


@memo(Scope.TYPE, maxsize=256)
def rooted_rounds(old: ShardingType, new: ShardingType) -> int:
    """A floor on ``routing(old, new).rounds`` where ``new`` sums ``k > 1`` partials (0 otherwise),
    from device 0's new block alone, no rows. ``_route_reduced`` roots each need at its first
    holding target, else its first target in device order (rows are device-major). Let ``S`` be the
    devices sharing device 0's new block and kept partial (each need of that block targets only
    them) and ``R`` the cells of the block that no device of ``S`` holds in any old block, replica
    or partial. For each, no target holds it, so device 0 is its root: without fresh atoms it is a
    target, with them the first member of its group (index 0) provides a cell no member holds.
    Device 0 then receives all ``k`` partials of each (phase A: ``k R`` cells, hence rounds), and
    sends each sum to its ``t - 1`` other targets (one per fresh group of ``S``): as a star ``t - 1``
    per need in one level, as a doubling tree one per need at every level ``l`` with
    ``2**l <= t - 1`` (target ``2**l`` hears from the root). Phase B's rounds sum each level's
    degree, so the routing has at least ``R (k + bit_length(t - 1))`` rounds. ``routing`` routes
    one class (``redist.exchange_classes``), so the floor is read on the same types. Types that
    share an unreduced atom may route by the merging exchange instead (``merges``), which roots
    differently: 0 wherever ``may_merge`` lets it try; past ``MERGED_MAX_ROWS`` (every pending
    pair on 13 axes of 2) they route partial by partial, and the kept atoms only narrow ``S``."""
    if _partial_axes(old, new).n_reduced == 1 or may_merge(old, new):
        return 0  # no partials summed, or perhaps the merging exchange (a floor of 0 is always sound)
    c = classes(old, new)
    if c is not None:
        return rooted_rounds(c.quotient_old, c.quotient_new)
    axes = _partial_axes(old, new)
    grid = _cell_grid(old, new)
    if axes.n_reduced == 1 or math.prod(grid.per_block) > ROOTED_MAX_CELLS:
        return 0
    try:
        check_index_range(old)
        check_index_range(new)
    except StepError:
        return 0
    closed = _rooted_closed(old, new, axes, grid)
    return closed if closed is not None else _rooted_tables(old, new, axes, grid)


ROOTED_CLOSED_MAX_BLOCKS = 1 << 16
"""Old blocks along one dimension past which ``_rooted_closed`` leaves the count to the tables."""


def _rooted_closed(old: ShardingType, new: ShardingType, axes: PartialAxes, grid: CellGrid) -> int | None:
    """``rooted_rounds``' count without per-device tables. A device shares device 0's new block
    and kept partial exactly when its digit is 0 on every atom of the new type's dimensions and
    on every kept atom (``C``); the others range freely. So the old blocks those devices hold
    are, per dimension, the indices whose digits on ``C``'s atoms are 0, and a cell of device
    0's new block is held when its old block is such an index in every dimension: the held cells
    are a product over dimensions of counts along each, read off the old blocks the new block
    spans there (cells of ``gcd`` size, so each lies in one). ``None`` (the tables decide) where
    a type is not on the mesh's prime atoms (the digit sets would not be a product) or a
    dimension spans more than ``ROOTED_CLOSED_MAX_BLOCKS`` old blocks."""
    if not (on_prime_atoms(old) and on_prime_atoms(new)):
        return None
    fixed = {a for d in dims_atoms(new) for a in d} | set(axes.kept)
    held = 1
    for atoms, lo, ln, c in zip(dims_atoms(old), old.local_shape, new.local_shape, grid.cell):
        spanned = -(-ln // lo)  # old blocks meeting [0, ln)
        if spanned > ROOTED_CLOSED_MAX_BLOCKS:
            return None
        count = 0
        for o in range(spanned):
            if _digits_free(o, atoms, fixed):
                count += (min((o + 1) * lo, ln) - o * lo) // c
        held *= count
    n_rooted = math.prod(grid.per_block) - held
    targets = old.mesh.size // math.prod(a.size for a in fixed) // math.prod(a.size for a in axes.fresh)
    return n_rooted * (axes.n_reduced + (targets - 1).bit_length())


def _digits_free(index: int, atoms: tuple[Atom, ...], fixed: set[Atom]) -> bool:
    """Whether block ``index`` (mixed radix over ``atoms``, major first) has digit 0 on every
    atom of ``fixed``."""
    for a in reversed(atoms):
        if a in fixed and index % a.size:
            return False
        index //= a.size
    return True


def _rooted_tables(old: ShardingType, new: ShardingType, axes: PartialAxes, grid: CellGrid) -> int:
    """``rooted_rounds``' count off the per-device block tables (``_rooted_closed``'s fallback;
    ``rooted_rounds`` has checked the index range)."""
    old_block, new_block = block_indices(old), block_indices(new)
    kept = atoms_index(old.mesh, axes.kept)
    mates = np.flatnonzero((new_block == new_block[0]).all(axis=1) & (kept == kept[0]))
    blocks = tuple(n // b for n, b in zip(old.shape, old.local_shape))
    base = new_block[:1] * (np.array(new.local_shape, dtype=np.int64) // np.array(grid.cell, dtype=np.int64))
    cell_old = _held_blocks(grid, base, np.array(old.local_shape, dtype=np.int64), blocks)[0]
    n_rooted = int((~np.isin(cell_old, _ravel(old_block[mates], blocks))).sum())
    targets = len(mates) // math.prod(a.size for a in axes.fresh)
    return n_rooted * (axes.n_reduced + (targets - 1).bit_length())


class Routing(NamedTuple):
    """What ``schedule(old, new)`` will contain, known before its rounds are built."""

    cell: tuple[int, ...]
    cells: int   # cells received, over all devices
    rounds: int  # rounds: max degree of phase A plus that of each level of phase B


@memo(Scope.TYPE)
def routing(old: ShardingType, new: ShardingType) -> Routing:
    """The exact bytes and rounds of ``schedule(old, new)`` from its routing alone (no colouring,
    no packing; rounds by König's theorem): cheap enough for the synthesizer to prune candidates
    whose optimistic floor is not tight (pending sums). Raises as ``schedule``; routes one class
    of devices (``redist.exchange_classes``): every class receives as many cells, in the same rounds."""
    check_index_range(old)  # before any int64 table (SizeLimitError naming the dimension)
    check_index_range(new)
    return _routing(old, new, merges(old, new))


@memo(Scope.TYPE)
def _routing(old: ShardingType, new: ShardingType, merged: bool) -> Routing:
    c = classes(old, new, merged)
    if c is not None:
        r = _routing(c.quotient_old, c.quotient_new, merged)
        return r._replace(cells=r.cells * c.n_classes)
    plain = None if merged else _plain_routing(old, new) or _summing_routing(old, new)
    return _rows_routing(old, new, merged) if plain is None else plain


def _rows_routing(old: ShardingType, new: ShardingType, merged: bool) -> Routing:
    """``Routing`` read off the routed (device, cell) rows of ``_route``."""
    grid, _, routed = _route(old, new, False, merged)
    fwd, level = routed.forward, routed.level
    merge = routed.merge.dst
    rounds = max(routed.send_load, int(np.bincount(merge).max()) if len(merge) else 0)
    rounds += _phased_degree(fwd.src, fwd.dst, level)
    return Routing(grid.cell, len(routed.merge.dst) + len(fwd.dst), rounds)


def _plain_routing(old: ShardingType, new: ShardingType) -> Routing | None:
    """The routing of a move without pending sums, from its closed form (``closed_form``: per-device
    overlaps, no (device, cell) rows): every cell a device lacks is sent to it directly, so it
    receives its missing cells and the busiest receiver's count is the rounds (König; sends are
    balanced over the replicas). Pending-sum moves whose unreduced atoms are all kept reach here as
    such quotients (``redist.exchange_classes``): the synthesizer measures the permutes of its
    candidates on them, and routing their rows cost 0.3-0.7 ms each on 13 axes of 2. Refused as
    ``_route`` refuses (``_check_size``); ``None`` where the sum is past ``EXACT_FLOAT_SUM``."""
    if old.unreduced or new.unreduced or new.local_size * old.mesh.size >= EXACT_FLOAT_SUM:
        return None
    return _overlap_routing(old, new, _partial_axes(old, new), new.local_size)


def _overlap_routing(old: ShardingType, new: ShardingType, axes: PartialAxes, demand: int) -> Routing:
    """The closed forms' shared tail: every device receives ``demand`` elements less its
    old-and-new overlap (``overlap_figures``), in cells, and the busiest receiver's count is the
    rounds. Refused first as ``_route`` refuses (``_check_size``)."""
    grid = _cell_grid(old, new)
    _check_size(old, new, grid, axes)
    cell = math.prod(grid.cell)
    total, least = overlap_figures(old, new)
    return Routing(grid.cell, (demand * old.mesh.size - total) // cell, (demand - least) // cell)


def _summing_routing(old: ShardingType, new: ShardingType) -> Routing | None:
    """The routing of a pending-sum move in closed form (``overlap_figures``, no (device, cell)
    rows) where each device is the one holder of its (old block, kept, reduced partial) and the
    one target of its (new block, kept), and the new type adds no pending sums: the reducing
    exchange onto a fully sharded layout, whose rows took 0.1-0.2 s of NumPy on 4,096 devices.
    ``_route_reduced`` roots each (cell, kept) need at its one target ``t``, which receives the
    ``k`` partials less the one it holds where its old block has the cell: ``k C_new - O(t)``
    cells (``C`` a block's cells, ``O`` a device's old-and-new overlap in cells); the holder
    ``h`` of a partial sends its old block's cells to their targets, all but the ``O(h)`` that
    are its own: ``C_old - O(h)``. As ``C_old = k C_new`` (``k`` times as many old blocks as
    new), both busiest degrees are ``C_old`` less the least overlap, and with one target per need
    there is no phase B: that is the rounds (König). ``None`` elsewhere (the rows route it);
    refused as ``_route`` refuses (``_check_size``); ``None`` past ``EXACT_FLOAT_SUM``, as
    ``_plain_routing``."""
    axes = _partial_axes(old, new)
    if axes.fresh or axes.n_reduced == 1 or not (on_prime_atoms(old) and on_prime_atoms(new)):
        return None
    n, n_kept = old.mesh.size, math.prod(a.size for a in axes.kept)
    blocks_old = math.prod(s // b for s, b in zip(old.shape, old.local_shape))
    blocks_new = math.prod(s // b for s, b in zip(new.shape, new.local_shape))
    if blocks_old * n_kept * axes.n_reduced != n or blocks_new * n_kept != n:
        return None  # replicas to choose among, or targets to forward to: the rows decide
    if new.local_size * n >= EXACT_FLOAT_SUM or may_merge(old, new):
        return None
    return _overlap_routing(old, new, axes, old.local_size)  # = k new blocks' worth: k times as many old blocks


@memo(Scope.TYPE)
def _route(old: ShardingType, new: ShardingType, offsets: bool = True, merged: bool = False
           ) -> tuple[CellGrid, int, _Routed]:
    """Every phase of ``schedule`` before the rounds: who sends which cell to whom, and (with
    ``offsets``, which only the packed rounds read) from and to where in the local blocks;
    ``merged``: the merging exchange (``_route_merged``)."""
    axes = _partial_axes(old, new, merged)
    grid = _cell_grid(old, new)
    _check_size(old, new, grid, axes, merged)
    dev = _device_tables(old, new, axes)
    codes = _Codes(tuple(n // b for n, b in zip(old.shape, old.local_shape)), int(dev.kept.max()) + 1,
                   axes.n_reduced, int(dev.replica.max()) + 1)
    grouped = not merged and _by_group(old, axes)
    if grouped:
        rows = _provider_rows(grid, dev, codes.blocks, old.shape, offsets)
    else:
        rows = _need_rows(grid, dev, old.shape, offsets)
    needs = _needs(grid, dev, rows, codes)
    h = _Holders.of(codes.of(dev.old_block, dev.kept, dev.partial, dev.replica))
    sel = _providers(dev, rows, needs.holds) if axes.fresh and not grouped else np.arange(len(rows.need))
    if merged:
        routed = _route_merged(dev, rows, needs, sel, h, codes)
    elif axes.n_reduced == 1:
        routed = _route_direct(dev, rows, needs, sel, h)
    else:
        routed = _route_reduced(dev, rows, needs, sel, h, axes.n_reduced, codes.n_rep)
    return grid, dev.n_devices, routed


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
        return ClassSchedule(_schedule(old, new, merged), 1, None)
    return ClassSchedule(_schedule(c.quotient_old, c.quotient_new, merged), c.n_classes, c)
