"""The pending-sum transfer bound counted from the devices, for sub-axis spellings that are not
products of the mesh's prime atoms.

Why: ``redist.bounds`` evaluates the bound of its docstring in closed form by set algebra on
prime atoms (``x=6`` has the atoms ``x:(1)2`` and ``x:(2)3``), which presumes that every sub-axis
of both types is a product of those atoms: then each atom is one digit of a device's index and
counting groups is multiplying digit sizes. A type may also cut an axis the other way round
(``x:(1)3``, ``x:(3)2`` on ``x=6``), and the digits of two factorisations are not independent:
the closed form then miscounts (``f32[6@(x:(1)2)]{U:(x:(2)3)} -> f32[6@(x:(3)2)]``: 24 B
claimed against 16 B, below a 17.3 B plan) or divides by zero. The rule itself is about groups
of devices and the partials they hold, not about digits, so here it is counted from the devices:
the same rule, per (destination block, source block) pair of cells, per destination group.

Enumerates the mesh (``Mesh.check_enumerable``) and loops in Python over block pairs and groups,
so it is only for these spellings, on the small meshes whose axes have two distinct primes.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from spmd_types import ShardingType
from spmd_types.errors import SizeLimitError
from spmd_types.layout import block_bounds, block_indices, coord_table, flat_index, reduction_group_coords

MAX_WORK = 1 << 22
"""The most (block pair, group) visits the count makes before it refuses (``SizeLimitError``)."""


def device_bound_bytes(src: ShardingType, dst: ShardingType) -> float:
    """``redist.bounds.lower_bound_bytes`` with pending sums, counted per device group."""
    m = src.mesh
    m.check_enumerable("the pending-sum bound of a sub-axis outside the mesh's prime atoms")
    k = math.prod(m.axis_size(a) for a in src.unreduced)
    partial = reduction_group_coords(src).tolist()
    group = _group_keys(dst).tolist()
    dblk, sblk = _flat_blocks(dst).tolist(), _flat_blocks(src).tolist()
    held: dict[tuple[int, int], set[int]] = defaultdict(set)  # (group, src block) -> partials
    holders: dict[tuple[int, int], set[int]] = defaultdict(set)  # (src block, partial) -> groups
    groups_of: dict[int, set[int]] = defaultdict(set)  # dst block -> groups
    for g, db, sb, p in zip(group, dblk, sblk, partial):
        held[g, sb].add(p)
        holders[sb, p].add(g)
        groups_of[db].add(g)
    total = 0
    for (db, sb), cells in _overlaps(src, dst, dblk, sblk).items():
        gs = groups_of[db]
        _check_work(src, dst, len(gs))
        cover = {g: held.get((g, sb), set()) for g in gs}
        incomplete = [g for g in gs if len(cover[g]) < k]
        if not incomplete:
            continue
        extra = {g: max(sum(holders[sb, p] == {g} for p in cover[g]) - 1, 0) if len(incomplete) >= 2 else 0
                 for g in incomplete}
        total += cells * (min(k - len(cover[g]) + extra[g] for g in incomplete) + len(incomplete) - 1)
    return total * src.itemsize / m.size


def _group_keys(t: ShardingType) -> np.ndarray:
    """Per device, the row-major id of its coordinates with ``t``'s unreduced digits zeroed: the
    devices whose partials of ``t`` sum to one value share it."""
    m = t.mesh
    coords = coord_table(m).copy()
    for a in t.unreduced:
        name, pre, size = m.span(a)
        pos, stride = m.position(name), m.axis_size(name) // (pre * size)
        coords[:, pos] -= (coords[:, pos] // stride % size) * stride
    return flat_index(list(coords.T), [n for _, n in m.axes])


def _flat_blocks(t: ShardingType) -> np.ndarray:
    return flat_index(list(block_indices(t).T), [n // b for n, b in zip(t.shape, t.local_shape)])


def _overlaps(src: ShardingType, dst: ShardingType, dblk: list[int], sblk: list[int]) -> dict[tuple[int, int], int]:
    """Elements each (dst block, src block) pair held by some device shares (exact ints)."""
    bd, bs = block_bounds(dst), block_bounds(src)
    first_d = {b: i for i, b in reversed(list(enumerate(dblk)))}
    first_s = {b: i for i, b in reversed(list(enumerate(sblk)))}
    out = {}
    for db, i in first_d.items():
        for sb, j in first_s.items():
            lo, hi = np.maximum(bd[i, :, 0], bs[j, :, 0]), np.minimum(bd[i, :, 1], bs[j, :, 1])
            n = math.prod(max(int(b) - int(a), 0) for a, b in zip(lo, hi))
            if n:
                out[db, sb] = n
    _check_work(src, dst, len(first_d) * len(first_s))
    return out


def _check_work(src: ShardingType, dst: ShardingType, n: int) -> None:
    if n > MAX_WORK:
        raise SizeLimitError(f"{src} -> {dst}: the pending-sum bound of sub-axes outside the mesh's prime atoms "
                             f"is counted per block pair and group ({n:,} > {MAX_WORK:,}); spell each axis's "
                             f"sub-axes with its prime factors, smallest most major (x:(1)2, x:(2)3 on x=6)")
