"""Transfer lower bounds (docs/design.md section 4), including sources with unreduced axes.

Without unreduced axes a device must receive every element of its destination block that its
source block lacks: ``|dst| - |dst & src|``, averaged over devices.

With unreduced axes we count messages per element on the cell grid (per dimension the cells are
the ``lcm`` of the two shard counts; all elements of a cell behave alike). The source holds ``k``
partials (one per coordinate of its unreduced axes, possibly replicated). A destination *group*
is a set of devices that differ only along the destination's unreduced axes: only the sum over a
group matters, so members' partials add for free. A group *covers* the partials its members
already hold; it is complete when it covers all ``k``. Per element, with ``I`` incomplete groups::

    LB = I                                   if some group is complete (or k == 1)
    LB = min over groups G (k - cov(G)) + I - 1   otherwise

Proof sketch: let ``G*`` be the first group to become complete. Each partial it lacks lives on a
device outside it, and every such device must send at least one message in ``G*``'s causal past
(a merge tree rooted in ``G*`` has one edge per non-root holder): ``k - cov(G*)`` messages. Every
other incomplete group must receive a message that completes it; that message is not in ``G*``'s
causal past, or that group would have been complete first. Summing gives the bound.

It is attained by the exchange schedule (merge at one root, forward the sum) whenever each group
holds at most one partial, i.e. the two types share no unreduced axis. When they do share one,
a complete group can exist only as a pending sum spread over its members, and forwarding it as one
value first needs a merge the bound does not count: e.g. ``s32[12@y,6]{U:x} -> s32[12,6]{U:x}`` on
``{x=2,y=3}`` has bound 96 B and optimum 144 B (reduce-scatter, gather, re-pad; the exhaustive
search agrees). There the synthesizer meets the search's optimum instead.

Every bound is in bytes averaged over devices, so it is comparable with ``Plan.recv_bytes``.
"""

from __future__ import annotations

import math

import numpy as np

from redist.atoms import unreduced_atoms
from redist.groups import atoms_index, group_key
from spmd_types import ShardingType
from spmd_types.layout import block_indices, overlap_elements
from spmd_types.memo import Scope, memo


@memo(Scope.TYPE)
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
    counts = [math.lcm(src.dim_shards(d), dst.dim_shards(d)) for d in range(src.rank)]
    cell_elems = math.prod(n // c for n, c in zip(src.shape, counts))
    k = math.prod(a.size for a in us)
    part = atoms_index(m, tuple(sorted(us)))
    group = group_key(m, tuple(sorted(ud)))
    hs, hd = _cells_held(src, counts), _cells_held(dst, counts)
    total = 0
    for cell in np.ndindex(*counts):
        held_s = np.ones(m.size, dtype=bool)
        held_d = np.ones(m.size, dtype=bool)
        for d, c in enumerate(cell):
            held_s &= hs[d][:, c]
            held_d &= hd[d][:, c]
        cover: dict[int, set[int]] = {}
        for v in np.nonzero(held_d)[0]:
            cover.setdefault(int(group[v]), set())
        for v in np.nonzero(held_s)[0]:
            if int(group[v]) in cover:
                cover[int(group[v])].add(int(part[v]))
        if not cover:
            continue
        incomplete = sum(1 for c in cover.values() if len(c) < k)
        if incomplete == len(cover):
            total += min(k - len(c) for c in cover.values()) + incomplete - 1
        else:
            total += incomplete
    return total * cell_elems * src.itemsize / m.size
