"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums. Rounds come from greedy bipartite edge colouring (each device sends
and receives at most one cell per round). Received traffic is therefore exactly the cells a device
lacks: the lower bound of docs/design.md section 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from redist.atoms import atoms_of, dims_atoms, unreduced_atoms
from redist.errors import StepError
from redist.groups import atoms_index, group_key
from spmd_types import ShardingType
from spmd_types.layout import block_bounds
from spmd_types.memo import Scope, memo

MAX_CELLS = 1 << 16
"""Exchanges finer than this many (device, cell) pairs are not offered: too many rounds to be useful."""


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


def _pack(
    n_dev: int, rank: int, items: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]], from_output: bool = False
) -> Round:
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
    return Round(tuple(pairs), send, recv, valid, from_output)


Item = tuple[int, int, tuple[int, ...], tuple[int, ...]]


def _colour(transfers: list[Item]) -> list[list[Item]]:
    """Bipartite edge colouring with the fewest rounds: max over devices of cells sent or
    received (Konig). Each transfer takes a colour free at both ends; when the sender's free
    colour ``a`` is busy at the receiver, the receiver's ``a``/``b`` alternating path is flipped
    first (it cannot reach the sender in a bipartite graph), which frees ``a`` there."""
    if not transfers:
        return []
    degree: dict[tuple[str, int], int] = {}
    for s, d, _, _ in transfers:
        degree[("s", s)] = degree.get(("s", s), 0) + 1
        degree[("r", d)] = degree.get(("r", d), 0) + 1
    n_col = max(degree.values())
    at: dict[tuple[str, int], dict[int, int]] = {}  # vertex -> colour -> transfer index
    colour = [-1] * len(transfers)
    for e, (s, d, _, _) in enumerate(transfers):
        u, v = ("s", s), ("r", d)
        cu, cv = at.setdefault(u, {}), at.setdefault(v, {})
        a = next(c for c in range(n_col) if c not in cu)
        if a in cv:
            b = next(c for c in range(n_col) if c not in cv)
            # flip the path from v alternating a, b
            path = []
            x, c = v, a
            while c in at.get(x, {}):
                f = at[x][c]
                path.append(f)
                fs, fd = transfers[f][0], transfers[f][1]
                x = ("r", fd) if x == ("s", fs) else ("s", fs)
                c = b if c == a else a
            for f in path:
                fs, fd = transfers[f][0], transfers[f][1]
                for w in (("s", fs), ("r", fd)):
                    if at[w].get(colour[f]) == f:
                        del at[w][colour[f]]
            for f in path:
                colour[f] = b if colour[f] == a else a
                fs, fd = transfers[f][0], transfers[f][1]
                at[("s", fs)][colour[f]] = f
                at[("r", fd)][colour[f]] = f
        colour[e] = a
        cu[a] = e
        cv[a] = e
    rounds: list[list[Item]] = [[] for _ in range(n_col)]
    for e, c in enumerate(colour):
        rounds[c].append(transfers[e])
    return [r for r in rounds if r]


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
    # An unreduced source promises only that each replica's partials sum to the value: replicas
    # (coordinates along the axes the source does not use) may hold different decompositions, so
    # every partial of one cell must come from one replica.
    used = set(ua) | {a for d in dims_atoms(old) for a in d}
    free = tuple(a for name, _ in mesh.axes for a in atoms_of(mesh, name) if a not in used)
    rep = atoms_index(mesh, free) if ua else np.zeros(n_dev, dtype=np.int64)
    holders: dict[tuple[int, ...], list[int]] = {}
    for v in range(n_dev):
        key = tuple((ob[v] // lo).tolist()) + (int(kap[v]), int(part[v]), int(rep[v]))
        holders.setdefault(key, []).append(v)
    cell_arr = np.array(cell, dtype=np.int64)
    # targets[(global cell, kappa)] = [(device, offset of the cell in its new block)]
    targets: dict[tuple[tuple[int, ...], int], list[tuple[int, np.ndarray]]] = {}
    for d in range(n_dev):
        for c in np.ndindex(*ncell):
            off = np.array(c, dtype=np.int64) * cell_arr
            g = nb[d] + off
            targets.setdefault((tuple((g // cell_arr).tolist()) if rank else (), int(kap[d])), []).append((d, off))
    load = np.zeros(n_dev, dtype=np.int64)
    copies: list[list[Item]] = [[] for _ in range(n_dev)]
    phase_a: list[Item] = []
    phase_b: list[Item] = []

    def src_off(v: int, g: np.ndarray) -> tuple[int, ...]:
        return tuple((g - ob[v]).tolist())

    by_cell: dict[tuple[int, ...], list[tuple[int, list[tuple[int, np.ndarray]]]]] = {}
    for (gcell, kv), tgts in targets.items():
        by_cell.setdefault(gcell, []).append((kv, tgts))
    replica: dict[tuple[int, ...], int] = {}  # per global cell: the replica partials come from
    for (gcell, kv), tgts in targets.items():
        g = np.array(gcell, dtype=np.int64) * cell_arr
        block = tuple((g // lo).tolist())
        if gcell not in replica:
            # the replica whose partials most targets already hold (all kept coordinates alike)
            hits = {
                f: sum(1 for kv2, ts in by_cell[gcell] for d, _ in ts for u in range(k)
                       if d in holders.get(block + (kv2, u, f), []))
                for f in sorted(set(rep.tolist()))
            }
            replica[gcell] = max(hits, key=lambda f: (hits[f], -f)) if ua else 0
        f = replica[gcell]
        hs_u = [holders.get(block + (kv, u, f), []) for u in range(k)]
        holding = {h for hs in hs_u for h in hs}
        if fresh:
            # one provider per group of devices that differ only along newly unreduced axes
            best: dict[int, tuple[int, int]] = {}
            for d, _ in tgts:
                rank_key = (0 if d in holding else 1, int(gidx[d]))
                if int(gkey[d]) not in best or rank_key < best[int(gkey[d])]:
                    best[int(gkey[d])] = rank_key
            tgts = [(d, o) for d, o in tgts if (0 if d in holding else 1, int(gidx[d])) == best[int(gkey[d])]]
        if k == 1:
            for d, off in tgts:
                if d in hs_u[0]:
                    copies[d].append((d, d, src_off(d, g), tuple(off.tolist())))
                else:
                    s = min(hs_u[0], key=lambda h: (load[h], (h - d) % n_dev))
                    load[s] += 1
                    phase_a.append((s, d, src_off(s, g), tuple(off.tolist())))
            continue
        root, root_off = min(tgts, key=lambda t: (0 if t[0] in holding else 1, t[0]))
        for u in range(k):
            if root in hs_u[u]:
                copies[root].append((root, root, src_off(root, g), tuple(root_off.tolist())))
            else:
                s = min(hs_u[u], key=lambda h: (load[h], (h - root) % n_dev))
                load[s] += 1
                phase_a.append((s, root, src_off(s, g), tuple(root_off.tolist())))
        for d, off in tgts:
            if d != root:
                phase_b.append((root, d, tuple(root_off.tolist()), tuple(off.tolist())))
    n_local = max((len(c) for c in copies), default=0)
    local = tuple(_pack(n_dev, rank, [c[i] for c in copies if i < len(c)]) for i in range(n_local))
    rounds = [_pack(n_dev, rank, r) for r in _colour(phase_a)]
    rounds += [_pack(n_dev, rank, r, from_output=True) for r in _colour(phase_b)]
    recv_cells = np.zeros(n_dev, dtype=np.int64)
    for _, d, _, _ in phase_a + phase_b:
        recv_cells[d] += 1
    return Schedule(cell, local, tuple(rounds), recv_cells)
