"""Transfer lower bounds (DESIGN.md section 4), including sources with unreduced axes.

Without unreduced axes a device must receive every element of its destination block that its
source block lacks: ``|dst| - |dst & src|``, averaged over devices.

With unreduced axes we count messages per element ("value") on the cell grid (per dimension the
cells are the ``lcm`` of the two shard counts; all elements of a cell behave alike). Split the
unreduced axes into kept ``K`` (on both sides: each partial moves on its own), reduced ``R`` (source
only) and new ``N`` (destination only: within a group of devices differing only in ``N``
coordinates one member may hold the value and the others zeros, so each group counts as one
target ``T``). For each cell and kept coordinate, with ``k = |R|`` partials:

* ``k == 1``: every target group none of whose members holds the element receives it once.
* ``k >= 2``: at least ``(k - 1) + (|T| - 1)`` messages, plus one if no target holds any partial.
  Proof sketch: let ``r`` be the first device to know the full sum. Merging ``k`` partials that live
  on ``k`` different devices into ``r`` takes ``k - 1`` messages (``k`` if ``r`` held none), all in
  ``r``'s causal past. Every other target lacks at least one partial, so it must receive a message,
  and its last such message cannot be in ``r``'s causal past (it would then have known the sum
  first). Summing gives the bound; reduce-scatter then all-gather (or slice first, then all-reduce
  or reduce-scatter, then permute) attains it, which is how the synthesizer meets it.

Every bound is in bytes averaged over devices, so it is comparable with ``Plan.recv_bytes``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from redist.atoms import unreduced_atoms
from redist.groups import atoms_index, group_key
from spmd_types import ShardingType
from spmd_types.layout import block_indices, overlap_elements


@lru_cache(maxsize=4096)
def lower_bound_bytes(src: ShardingType, dst: ShardingType) -> float:
    if not src.unreduced and not dst.unreduced:
        missing = dst.local_size - overlap_elements(src, dst)
        return float(missing.mean()) * src.itemsize
    return _unreduced_bound(src, dst)


def _cells_held(t: ShardingType, counts: list[int]) -> list[np.ndarray]:
    """Per dim, bool ``[devices, cells_d]``: does the device's block of ``t`` contain the cell."""
    idx = block_indices(t)
    out = []
    for d, c in enumerate(counts):
        per_block = c // t.dim_shards(d)
        cell_block = np.arange(c) // per_block
        out.append(idx[:, d : d + 1] == cell_block[None, :])
    return out


def _unreduced_bound(src: ShardingType, dst: ShardingType) -> float:
    m = src.mesh
    us, ud = unreduced_atoms(src), unreduced_atoms(dst)
    keep = sorted(us & ud)
    red = sorted(us - ud)
    new = sorted(ud - us)
    counts = [math.lcm(src.dim_shards(d), dst.dim_shards(d)) for d in range(src.rank)]
    cell_elems = math.prod(n // c for n, c in zip(src.shape, counts))
    k = math.prod(a[2] for a in red)
    kappa = atoms_index(m, tuple(keep))
    # Target group of a destination device: all coordinates except the new unreduced atoms.
    group = group_key(m, tuple(new))
    hs, hd = _cells_held(src, counts), _cells_held(dst, counts)
    total = 0
    for cell in np.ndindex(*counts):
        held_s = np.ones(m.size, dtype=bool)
        held_d = np.ones(m.size, dtype=bool)
        for d, c in enumerate(cell):
            held_s &= hs[d][:, c]
            held_d &= hd[d][:, c]
        for kv in np.unique(kappa):
            sel = kappa == kv
            targets = np.nonzero(held_d & sel)[0]
            if targets.size == 0:
                continue
            holders = held_s & sel
            groups: dict[int, bool] = {}
            for v in targets:
                g = int(group[v])
                groups[g] = groups.get(g, False) or bool(holders[v])
            if k == 1:
                total += sum(1 for has in groups.values() if not has)
            else:
                total += (k - 1) + (len(groups) - 1) + (0 if any(groups.values()) else 1)
    return total * cell_elems * src.itemsize / m.size
