"""Cells routed as transfer items: ``route`` chooses the direct exchange, the reducing one (phase A
merges partials at a root, phase B forwards merged sums) or the merging one, and spreads requests
evenly over each cell's holders (``sent_load``: the busiest sender's load is known from the holder
groups alone, so routing for planning skips choosing senders).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from redist.colouring import degree
from redist.exchange.cells import (
    CellGrid,
    DeviceTables,
    Offset,
    by_group,
    cell_grid,
    check_grid_size,
    device_tables,
    partial_axes,
)
from redist.exchange.rows import (
    Codes,
    Holders,
    NeedRows,
    Needs,
    cell_needs,
    fresh_providers,
    need_rows,
    provider_rows,
)
from redist.groups import (
    run_starts,
    stable_order,
)
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo


def _senders(h: Holders, grp: np.ndarray, dst: np.ndarray) -> np.ndarray:
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


def _items(src: np.ndarray, dst: np.ndarray, src_offset: np.ndarray, dst_offset: np.ndarray) -> Items:
    """Fancy-indexed arrays are fresh already: convert, never copy, int64 ones (planning reads these)."""
    return Items(*(np.asarray(a, dtype=np.int64) for a in (src, dst, src_offset, dst_offset)))


class Routed(NamedTuple):
    local: Items    # src == dst, in the order each device adds them
    merge: Items    # phase A: old blocks -> targets / roots; counting only, ``src`` is empty
    forward: Items  # phase B: roots -> other targets
    level: np.ndarray  # [forward] phase-B level: the rounds of level l follow those of level l-1
    send_load: int   # the most phase-A cells one device sends (``sent_load``)


def sent_load(h: Holders, grp: np.ndarray, dst: np.ndarray, offsets: bool) -> tuple[np.ndarray, int]:
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


def _route_direct(dev: DeviceTables, rows: NeedRows, needs: Needs, sel: np.ndarray, h: Holders) -> Routed:
    """Without reduced axes: each target adds its cell from its own old block when it holds it,
    else receives it from a holder (``_senders``). Needs in order, targets in device order."""
    sel = sel[stable_order(rows.need[sel])]  # row order is device order
    held = needs.holds[sel]
    mine = sel[held]
    local = _items(rows.device[mine], rows.device[mine],
                   rows.src_offset(needs.start, rows.need[mine], dev.old_start, rows.device[mine]), rows.offset(mine))
    far = sel[~held]
    s, load = sent_load(h, h.find(needs.code[rows.need[far]]), rows.device[far], rows.offsets)
    merge = _items(s, rows.device[far], rows.src_offset(needs.start, rows.need[far], dev.old_start, s), rows.offset(far))
    return Routed(local, merge, Items.of([], len(dev.old_local)), np.zeros(0, dtype=np.int64), load)


def _route_reduced(dev: DeviceTables, rows: NeedRows, needs: Needs, sel: np.ndarray, h: Holders,
                   n_red: int, n_rep: int) -> Routed:
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
    s, load = sent_load(h, h.find(code[far]), root[need[far]], rows.offsets)
    merge = _items(s, root[need[far]], rows.src_offset(needs.start, need[far], dev.old_start, s), root_off[need[far]])
    not_root = np.ones(len(rows.need), dtype=bool)
    not_root[root_row] = False
    rest = sel[not_root[sel]]
    rest = rest[stable_order(rows.need[rest])]  # need-major, then device order
    if not len(rest):
        return Routed(local, merge, Items.of([], rank), np.zeros(0, dtype=np.int64), load)
    fwd, level = _forwarding(rows, rest, root, root_off)
    return Routed(local, merge, fwd, level, load)


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


def _cover(dev: DeviceTables, rows: NeedRows, hold: np.ndarray) -> _Cover:
    n_dev, n_rep = dev.n_devices, int(dev.replica.max()) + 1
    hr = np.flatnonzero(hold)
    d = rows.device[hr]
    key3 = (rows.need[hr] * n_dev + dev.group[d]) * n_rep + dev.replica[d]
    u, first, count = np.unique(key3, return_index=True, return_counts=True)
    key2, rep = u // n_rep, u % n_rep
    order = np.lexsort((rep, -count, key2))  # per pair: most partials, then the least replica
    best = order[np.r_[True, key2[order][1:] != key2[order][:-1]]] if len(order) else order
    return _Cover(key2[best], rep[best], count[best], hr[first[best]])


def _route_merged(dev: DeviceTables, rows: NeedRows, needs: Needs, sel: np.ndarray, h: Holders,
                  codes: Codes) -> Routed:
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
        return Routed(local, merge, Items.of([], len(dev.old_local)), np.zeros(0, dtype=np.int64), load)
    fwd, level = _forwarding(rows, rest, root, rows.offset(root_row))
    return Routed(local, merge, fwd, level, load)


_KEEP, _SOLE, _FORWARD = 0, 1, 2
"""Per need of the merging exchange: every group complete (each keeps); one incomplete group and
no complete one (its holders keep, the root completes it); a root forwards the sum."""


def _merged_roots(rows: NeedRows, needs: Needs, sel: np.ndarray, complete: np.ndarray, cov: _Cover,
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


def _merged_gather(dev: DeviceTables, rows: NeedRows, needs: Needs, mine: np.ndarray, root: np.ndarray,
                   root_row: np.ndarray, root_rep: np.ndarray, root_grp: np.ndarray, mode: np.ndarray,
                   h: Holders, k: int, n_rep: int) -> tuple[Items, int]:
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
    s, load = sent_load(h, h.find(code), root[need], rows.offsets)
    return _items(s, root[need], rows.src_offset(needs.start, need, dev.old_start, s), rows.offset(root_row[need])), load


def _forwarding(rows: NeedRows, rest: np.ndarray, root: np.ndarray, root_off: np.ndarray) -> tuple[Items, np.ndarray]:
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
    tree_rounds = phased_degree(tree.src, tree.dst, level)
    if tree_rounds < star_rounds:
        return tree, level
    return star, np.zeros(len(rest), dtype=np.int64)


def phased_degree(src: np.ndarray, dst: np.ndarray, level: np.ndarray) -> int:
    """The sum over levels of each level's max degree (its rounds, each level coloured apart): one
    count over (level, device) pairs instead of a masked pass per level."""
    if not len(src):
        return 0
    n = int(max(src.max(), dst.max())) + 1
    n_lv = int(level.max()) + 1
    per = [np.bincount(level * n + v, minlength=n_lv * n).reshape(n_lv, n).max(axis=1) for v in (src, dst)]
    return int(np.maximum(*per).sum())


def _device_group(h: Holders, n_dev: int) -> np.ndarray:
    """The holder group of each device."""
    out = np.empty(n_dev, dtype=np.int64)
    out[h.members] = np.repeat(np.arange(len(h.code)), h.n)
    return out


class Items(NamedTuple):
    """Transfers as arrays: ``[n]`` senders and receivers, ``[n, rank]`` offsets."""

    src: np.ndarray
    dst: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray

    @staticmethod
    def of(items: Sequence[tuple[int, int, Offset, Offset]], rank: int) -> Items:
        if not items:
            z = np.zeros(0, dtype=np.int64)
            return Items(z, z, np.zeros((0, rank), np.int64), np.zeros((0, rank), np.int64))
        src, dst, so, do = zip(*items)
        return Items(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                      np.array(so, dtype=np.int64).reshape(len(items), rank),
                      np.array(do, dtype=np.int64).reshape(len(items), rank))

    def take(self, idx: np.ndarray) -> Items:
        return Items(self.src[idx], self.dst[idx], self.src_offset[idx], self.dst_offset[idx])


@memo(Scope.TYPE)
def route(old: ShardingType, new: ShardingType, offsets: bool = True, merged: bool = False
           ) -> tuple[CellGrid, int, Routed]:
    """Every phase of ``schedule`` before the rounds: who sends which cell to whom, and (with
    ``offsets``, which only the packed rounds read) from and to where in the local blocks;
    ``merged``: the merging exchange (``_route_merged``)."""
    axes = partial_axes(old, new, merged)
    grid = cell_grid(old, new)
    check_grid_size(old, new, grid, axes, merged)
    dev = device_tables(old, new, axes)
    codes = Codes(tuple(n // b for n, b in zip(old.shape, old.local_shape)), int(dev.kept.max()) + 1,
                   axes.n_reduced, int(dev.replica.max()) + 1)
    grouped = not merged and by_group(old, axes)
    if grouped:
        rows = provider_rows(grid, dev, codes.blocks, old.shape, offsets)
    else:
        rows = need_rows(grid, dev, old.shape, offsets)
    needs = cell_needs(grid, dev, rows, codes)
    h = Holders.of(codes.of(dev.old_block, dev.kept, dev.partial, dev.replica))
    sel = fresh_providers(dev, rows, needs.holds) if axes.fresh and not grouped else np.arange(len(rows.need))
    if merged:
        routed = _route_merged(dev, rows, needs, sel, h, codes)
    elif axes.n_reduced == 1:
        routed = _route_direct(dev, rows, needs, sel, h)
    else:
        routed = _route_reduced(dev, rows, needs, sel, h, axes.n_reduced, codes.n_rep)
    return grid, dev.n_devices, routed

