"""Who needs which cell (``need_rows``, or ``provider_rows`` routing by group), one replica per
cell (``cell_needs``), the holders grouped by what they hold (``Holders``) and one provider per
fresh group (``fresh_providers``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from redist.exchange.cells import (
    CellGrid,
    DeviceTables,
    Offset,
    held_blocks,
    per_dim_blocks,
    ravel_index,
    spread_blocks,
)
from redist.groups import (
    rank_within,
    stable_order,
)


class NeedRows(NamedTuple):
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
    at: np.ndarray | None = None  # [rows] each row's cell in its block (``provider_rows``); else
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
        for k, t in enumerate(per_dim_blocks(grid, self.base, dev.old_local)):
            out &= spread_blocks(t == dev.old_block[:, k, None], k, per_block)
        return out.reshape(-1)


def need_rows(grid: CellGrid, dev: DeviceTables, shape: Offset, offsets: bool = True) -> NeedRows:
    """Rows device-major, cells in ``np.ndindex`` order within a block: each device's cells are
    its block's first cell plus one shared table of cell offsets (a broadcast sum, not a per-row
    unravel). Every (global cell, kept) pair is needed by some device, so the needs are numbered
    in order of first need on dense tables of that size (no sort of the rows)."""
    idx, base = _cell_table(grid, dev)
    device = np.repeat(np.arange(dev.n_devices, dtype=np.int64), len(idx))
    code, n_codes = _grid_codes(grid, shape, base, idx)
    code = code.reshape(-1)
    n_kept = int(dev.kept.max()) + 1
    need = first_need_order(code * n_kept + dev.kept[device], n_codes * n_kept)
    cell_id = _dense_cells(code, n_codes) if n_kept > 1 else need
    return NeedRows(device, base, idx, np.array(grid.cell, dtype=np.int64), cell_id, need, offsets)


def _cell_table(grid: CellGrid, dev: DeviceTables) -> tuple[np.ndarray, np.ndarray]:
    """``idx`` (each cell's grid index inside a block, ``np.ndindex`` order) and ``base`` (each
    device's new block's first cell) of ``NeedRows``."""
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


def provider_rows(grid: CellGrid, dev: DeviceTables, blocks: Offset, shape: Offset, offsets: bool) -> NeedRows:
    """The rows ``fresh_providers`` keeps, without tabulating the others: where the new type adds
    pending sums (fresh atoms) and the source has one replica, a group's members (devices
    differing only along the fresh atoms) share a new block and kept partial, so per (group, cell)
    the provider is the member of least group index whose old block holds the cell, else the
    member of index 0. Rows are ``groups x cells``, not ``devices x cells``; laid out device-major
    as ``need_rows`` orders them (needs numbered in order of first need over every device: each
    group's first device is its member of index 0, the group key)."""
    idx, base = _cell_table(grid, dev)
    n_cells = len(idx)
    leads = np.flatnonzero(dev.group_index == 0)  # in device order: groups by their first device
    code, n_codes = _grid_codes(grid, shape, base[leads], idx)  # [groups, cells]
    cell = np.array(grid.cell, dtype=np.int64)
    n_blocks = math.prod(blocks)
    want = held_blocks(grid, base[leads], dev.old_local, blocks)  # old block of each cell
    want += np.arange(len(leads))[:, None] * n_blocks  # (group, old block) of each (group, cell)
    lead_rank = np.zeros(dev.n_devices, dtype=np.int64)
    lead_rank[leads] = np.arange(len(leads))  # a group's key is its lead's device id
    key = lead_rank[dev.group] * n_blocks + ravel_index(dev.old_block, blocks)  # each device's
    order = np.lexsort((dev.group_index, key))
    first = order[np.r_[True, key[order][1:] != key[order][:-1]]]  # least group index per (group, block)
    found = np.minimum(np.searchsorted(key[first], want), len(first) - 1)
    provider = np.where(key[first][found] == want, first[found], leads[:, None])  # [groups, cells]
    n_kept = int(dev.kept.max()) + 1
    need = first_need_order((code * n_kept + dev.kept[leads][:, None]).reshape(-1), n_codes * n_kept)
    cell_id = _dense_cells(code.reshape(-1), n_codes) if n_kept > 1 else need
    at = np.broadcast_to(np.arange(n_cells), code.shape).reshape(-1)
    rows = stable_order(provider.reshape(-1) * n_cells + at)  # device-major, cells in order (keys distinct:
    # a provider is a member of its own group)
    return NeedRows(provider.reshape(-1)[rows], base, idx, cell, cell_id[rows], need[rows], offsets, at[rows])


def _dense_cells(code: np.ndarray, n_codes: int) -> np.ndarray:
    """Per row, the rank of its global cell code among those present."""
    present = np.zeros(n_codes, dtype=bool)
    present[code] = True
    return (np.cumsum(present) - 1)[code]


def first_need_order(key: np.ndarray, n_keys: int) -> np.ndarray:
    """Per row, the rank of its key among the distinct keys ordered by first row."""
    first = np.full(n_keys, -1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # the earliest row wins (written last)
    row_first = first[key]  # per row, the first row of its key
    rank = np.cumsum(row_first == np.arange(len(key))) - 1  # first rows counted in row order
    return rank[row_first]


def _choose_replicas(grid: CellGrid, dev: DeviceTables, rows: NeedRows) -> np.ndarray:
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
    per_cell = values[most_held(rows.cell_id[holds], column.reshape(-1)[rows.device[holds]], rot, len(values))]
    need_cell = np.zeros(n_needs, dtype=np.int64)
    need_cell[rows.need] = rows.cell_id
    return per_cell[need_cell]


def _rank_in_block(rows: NeedRows, dev: DeviceTables, n_cells: int) -> np.ndarray:
    """Per global cell, its rank among the cells of the same old block (ids in order): rotating
    tied replicas by it gives each replica of a block an equal share of the block's cells (the
    cell id alone once put 33 of a block's cells on one replica: 33 rounds where 3 do)."""
    row = np.zeros(n_cells, dtype=np.int64)
    row[rows.cell_id] = np.arange(len(rows.cell_id))  # a row of each cell
    block = rows.gcell(row) * rows.cell // dev.old_local
    key = np.ravel_multi_index(tuple(block.T), tuple(block.max(axis=0) + 1)) if block.shape[1] else row * 0
    return rank_within(key)


def most_held(cell: np.ndarray, column: np.ndarray, rot: np.ndarray, n_cols: int) -> np.ndarray:
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


class Codes(NamedTuple):
    """Mixed-radix codes of ``(old block, kept, partial, replica)``: what an old block holds."""

    blocks: Offset  # old block grid shape
    n_kept: int
    n_red: int
    n_rep: int

    def of(self, block: np.ndarray, kept: np.ndarray, partial: np.ndarray, replica: np.ndarray) -> np.ndarray:
        flat = np.ravel_multi_index(tuple(block.T), self.blocks) if len(self.blocks) else np.zeros(len(kept), np.int64)
        return ((flat * self.n_kept + kept) * self.n_red + partial) * self.n_rep + replica


class Holders(NamedTuple):
    """Devices grouped by holder code, in device order within a group."""

    code: np.ndarray     # [groups] sorted distinct codes
    start: np.ndarray    # [groups] first index of each group in ``members``
    n: np.ndarray        # [groups] devices holding it
    members: np.ndarray  # [devices] device ids sorted by code

    @staticmethod
    def of(dev_code: np.ndarray) -> Holders:
        members = stable_order(dev_code)
        code, start, n = np.unique(dev_code[members], return_index=True, return_counts=True)
        return Holders(code, start, n, members)

    def find(self, code: np.ndarray) -> np.ndarray:
        """The group of each code (every code asked for has holders: replicas are chosen among
        those present)."""
        g = np.minimum(np.searchsorted(self.code, code), len(self.code) - 1)
        if not (self.code[g] == code).all():  # pragma: no cover - an invariant of the tables
            raise AssertionError("exchange: a cell without a holder")
        return g


class Needs(NamedTuple):
    """Per (global cell, kept partial), in order of first need."""

    start: np.ndarray    # [needs, rank] global element index of the cell's first element
    code: np.ndarray     # [needs] holder code of partial 0 in the chosen replica
    holds: np.ndarray    # [rows] whether the row's device holds some partial of its need


def cell_needs(grid: CellGrid, dev: DeviceTables, rows: NeedRows, codes: Codes) -> Needs:
    n_needs = int(rows.need.max()) + 1
    first = np.zeros(n_needs, dtype=np.int64)
    first[rows.need[::-1]] = np.arange(len(rows.need))[::-1]  # the earliest row of each need
    start = rows.gcell(first) * rows.cell
    kept = dev.kept[rows.device[first]]
    code = codes.of(start // dev.old_local, kept, kept * 0, _choose_replicas(grid, dev, rows))
    dev_code = codes.of(dev.old_block, dev.kept, dev.kept * 0, dev.replica)
    return Needs(start, code, dev_code[rows.device] == code[rows.need])


def fresh_providers(dev: DeviceTables, rows: NeedRows, holds: np.ndarray) -> np.ndarray:
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

