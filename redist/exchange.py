"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums. Rounds come from greedy bipartite edge colouring (each device sends
and receives at most one cell per round). Received traffic is therefore exactly the cells a device
lacks: the lower bound of DESIGN.md section 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from redist.atoms import unreduced_atoms
from redist.errors import StepError
from redist.groups import atoms_index, group_key
from spmd_types import ShardingType
from spmd_types.layout import block_bounds

MAX_CELLS = 1 << 16
"""Exchanges finer than this many (device, cell) pairs are not offered: too many rounds to be useful."""


@dataclass(frozen=True, eq=False)
class Round:
    """One ``ppermute``: ``pairs`` (src, dst); offsets are cell starts in the local arrays."""

    pairs: tuple[tuple[int, int], ...]
    send_offset: np.ndarray  # [devices, rank], rows of non-senders are zero
    recv_offset: np.ndarray  # [devices, rank]
    recv_valid: np.ndarray   # [devices] bool


@dataclass(frozen=True, eq=False)
class Schedule:
    cell: tuple[int, ...]
    local_copies: tuple[Round, ...]  # pairs empty; send_offset = source, recv_offset = destination
    rounds: tuple[Round, ...]
    recv_cells: np.ndarray           # [devices] cells received by each device

    @property
    def n_transfers(self) -> int:
        return int(self.recv_cells.sum())


def _pack(n_dev: int, rank: int, items: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]) -> Round:
    send = np.zeros((n_dev, rank), dtype=np.int64)
    recv = np.zeros((n_dev, rank), dtype=np.int64)
    valid = np.zeros(n_dev, dtype=bool)
    pairs = []
    for s, d, so, do in items:
        send[s] = so
        recv[d] = do
        valid[d] = True
        if s != d:
            pairs.append((s, d))
    return Round(tuple(pairs), send, recv, valid)


@lru_cache(maxsize=4096)
def schedule(old: ShardingType, new: ShardingType) -> Schedule:
    """Cells each device adds into its new block, locally or from a peer.

    Unreduced axes of ``old`` that ``new`` keeps move partial by partial; those ``new`` drops are
    summed (the target receives one cell per partial it lacks: ``k-1`` messages per element when
    it holds a partial, which meets the bound when each element has one target); those ``new``
    adds are provided by one member of each group, the others keeping zeros.
    """
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    kept, reduced, fresh = tuple(sorted(ua & ub)), tuple(sorted(ua - ub)), tuple(sorted(ub - ua))
    mesh = old.mesh
    rank, n_dev = old.rank, mesh.size
    lo, ln = np.array(old.local_shape), np.array(new.local_shape)
    cell = tuple(math.gcd(int(a), int(b)) for a, b in zip(lo, ln)) if rank else ()
    ncell = tuple(int(n) // c for n, c in zip(ln, cell))
    k = math.prod(a[2] for a in reduced)
    if math.prod(ncell) * n_dev * k > MAX_CELLS:
        raise StepError(f"exchange {old} -> {new} needs {math.prod(ncell)} cells per device; too fine")
    ob, nb = block_bounds(old)[..., 0], block_bounds(new)[..., 0]
    kap, part = atoms_index(mesh, kept), atoms_index(mesh, reduced)
    gkey, gidx = group_key(mesh, fresh), atoms_index(mesh, fresh)
    holders: dict[tuple[int, ...], list[int]] = {}
    for v in range(n_dev):
        holders.setdefault(tuple((ob[v] // lo).tolist()) + (int(kap[v]), int(part[v])), []).append(v)
    load = np.zeros(n_dev, dtype=np.int64)
    Item = tuple[int, int, tuple[int, ...], tuple[int, ...]]
    copies: list[list[Item]] = [[] for _ in range(n_dev)]
    transfers: list[Item] = []
    cell_arr = np.array(cell, dtype=np.int64)
    for d in range(n_dev):
        for c in np.ndindex(*ncell):
            off = np.array(c, dtype=np.int64) * cell_arr
            g = nb[d] + off
            block = tuple((g // lo).tolist())
            dst_off = tuple(off.tolist())
            if fresh:
                # One member of the group of devices differing only along new unreduced axes
                # provides the cell: the first holding a partial, else the group's first.
                mates = [
                    h for u in range(k) for h in holders.get(block + (int(kap[d]), u), []) if gkey[h] == gkey[d]
                ]
                if int(gidx[d]) != min((int(gidx[h]) for h in mates), default=0):
                    continue
            for u in range(k):
                hs = holders[block + (int(kap[d]), u)]
                if d in hs:
                    copies[d].append((d, d, tuple((g - ob[d]).tolist()), dst_off))
                    continue
                s = min(hs, key=lambda h: (load[h], (h - d) % n_dev))
                load[s] += 1
                transfers.append((s, d, tuple((g - ob[s]).tolist()), dst_off))
    # Greedy edge colouring into rounds.
    rounds: list[tuple[set[int], set[int], list[Item]]] = []
    for tr in transfers:
        s, d = tr[0], tr[1]
        for senders, receivers, items in rounds:
            if s not in senders and d not in receivers:
                senders.add(s)
                receivers.add(d)
                items.append(tr)
                break
        else:
            rounds.append(({s}, {d}, [tr]))
    n_local = max((len(c) for c in copies), default=0)
    local = tuple(_pack(n_dev, rank, [c[i] for c in copies if i < len(c)]) for i in range(n_local))
    recv_cells = np.zeros(n_dev, dtype=np.int64)
    for _, d, _, _ in transfers:
        recv_cells[d] += 1
    return Schedule(cell, local, tuple(_pack(n_dev, rank, items) for _, _, items in rounds), recv_cells)
