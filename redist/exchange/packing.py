"""Transfer items packed into ``ppermute`` rounds by bipartite edge colouring (``redist.colouring``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from redist.colouring import colours
from redist.exchange.cells import CellGrid
from redist.exchange.routes import Items, Routed


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


def _pack(n_dev: int, it: Items, idx: np.ndarray, from_output: bool = False) -> Round:
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


def _coloured_rounds(n_dev: int, it: Items, from_output: bool, torus: Sequence[int]) -> list[Round]:
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


def _local_rounds(n_dev: int, it: Items) -> list[Round]:
    """The i-th local copy of every device in round i."""
    order = np.argsort(it.dst, kind="stable")
    d = it.dst[order]
    index = np.arange(len(d)) - np.searchsorted(d, d)
    return [_pack(n_dev, it, order[index == i]) for i in range(int(index.max()) + 1 if len(d) else 0)]


def pack_schedule(grid: CellGrid, n_dev: int, routed: Routed, torus: Sequence[int]) -> Schedule:
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

