"""Transfer lower bounds (docs/design.md section 4), including sources with unreduced axes.

Without unreduced axes a device must receive every element of its destination block that its
source block lacks: ``|dst| - |dst & src|``, averaged over devices.

With unreduced axes we count messages per element on the cell grid (per dimension the cells are
the ``lcm`` of the two shard counts; all elements of a cell behave alike). The source holds ``k``
partials (one per coordinate of its unreduced axes, possibly replicated). A destination *group*
is a set of devices that differ only along the destination's unreduced axes: only the sum over a
group matters, so members' partials add for free. A group *covers* the partials its members
already hold; it is complete when it covers all ``k``. A partial is *confined* to ``G`` when every
device holding it (all its replicas) lies in ``G``; ``X(G)`` counts them. Per element, with ``I``
incomplete groups among those that hold it in the destination::

    LB = 0                                                                  if I == 0
    LB = min over incomplete groups G of (k - cov(G) + e(G)) + I - 1        otherwise
    e(G) = max(X(G) - 1, 0) if I >= 2 else 0

Proof (for any program of point-to-point messages, each carrying what its sender knows; fix one
order of the deliveries): let ``G*`` be the first *incomplete* group to become complete (groups
complete from the start need nothing), at delivery ``t*``, and ``P`` the messages in its causal
past. A device holds one partial, so the ``k - cov(G*)`` partials ``G*`` lacks start on as many
distinct devices outside it; each reaches ``G*`` along a path of ``P`` whose messages, up to its
first entry into ``G*``, are all *sent from outside* ``G*``: with ``G*`` contracted to one node
they connect those devices to it, so ``P`` holds at least ``k - cov(G*)`` messages sent from
outside ``G*`` (set ``P'``). The rest, ``R`` (messages not in ``P'``), holds (a) for every other
incomplete group the message that completes it: not in ``P``, or that group would have completed
first, and distinct, their receivers lying in distinct groups; so ``|R| >= I - 1``; and (b) for
each partial confined to ``G*`` (another incomplete group lacks it, as no copy lies outside
``G*``) a message sent by one of its holders, all inside ``G*``, so not in ``P'``; distinct
partials have distinct holders. At most one confined partial's holders send *only* messages of
(a): of two such partials, take the first delivered message any of their holders sends, from a
holder of the one, completing some ``G``; ``G`` then knows the other too, which left its holders
in a message delivered still earlier, a contradiction. So ``|R| >= (I - 1) + X(G*) - 1`` when
``X(G*) >= 1`` and ``I >= 2``, and ``|P'| + |R|`` gives the bound.

A group complete from the start does not shorten this: its sum is spread over its members, so
forwarding it as one value needs the same merge (before 2026-11-24 the bound was ``I`` there,
not tight: ``s32[12@y,6]{U:x} -> s32[12,6]{U:x}`` on ``{x=2,y=3}`` had bound 96 B against the
optimum 144 B that it now gives). Without ``e`` (before the second 2026-11-24 change) it missed
the partials a complete group must still send on: ``s32[12]{U:(x,y)} -> s32[12]{U:x}`` on
``{x=2,y=2}`` had bound 36 B against the optimum 48 B (one all-reduce) that it now gives.

It is attained by the exchange schedule (merge at one root, forward the sum) whenever each group
holds at most one partial, i.e. the two types share no unreduced axis. Where they share one the
partial-by-partial exchange stayed above it on 186 of the 18,580 exhaustive pairs. On 96 of them the
bound is still *exact*: a program that, per cell, lets complete groups keep their partials, merges
the partials at one device and sends the sum to each incomplete group, meets it; the merging
exchange (``redist.exchange.routes``) is that program, and plans reach the bound there. ``s32[12@(x,y)]{U:z} -> s32[12@y]{U:z}`` on ``{x=2,y=2,z=2}``: 15 B by such a
program, 18 B by the exchange (``tests/test_bounds_witness.py`` checks two such programs); no
sound term can lift the bound on these. The other 90 are where the partials a group holds also
have replicas outside it (the source leaves an axis free that the destination does not sum
over): a replica may send them inside ``G*``'s causal past, so ``e`` does not count them, and no
program of that family reaches the bound. ``s32[12]{U:(x,y)} -> s32[12]{U:x}`` on
``{x=2,y=2,z=2}``: bound 30 B, our optimum 36 B, yet a relay chain (a device forwards a running
sum it does not output) attains 30 B, so the bound is exact there and the slack is ours
(docs/design.md 13.2).

Per cell, the figure depends only on whether the cell's source holders and destination holders
agree on the atoms both types shard over ("consistent"): the source block fixes a device's
coordinates on the source's sharded atoms, the destination block those on the destination's. The
groups that hold a cell in the destination are the coordinates along the atoms the destination
neither shards nor sums over (``Fd``); a group holds a source copy only where it agrees with the
source block on ``Fd`` atoms the source shards, and it then covers exactly the partials along the
atoms unreduced in both. A partial's replicas differ along the atoms the source neither shards
nor sums over: they are all confined to the holding group exactly when each of those atoms is
summed over in the destination; then ``X = cov`` and, with ``I >= 2``, the least cost is
``k + I - 2``. So the bound is two closed forms weighted by how many elements are consistent, and
that count is the summed per-device overlap (``spmd_types.layout``) divided by how many devices
share each block pair: the cost grows with the devices' NumPy rows, never with cells, and every
count is an exact Python integer.

Every bound is in bytes averaged over devices, so it is comparable with ``Plan.recv_bytes``.
"""

from __future__ import annotations

import math

from redist.atoms import Atom, atoms_of, dims_atoms, unreduced_atoms
from redist.bounds_devices import device_bound_bytes
from spmd_types import Mesh, ShardingType
from spmd_types.layout import overlap_summary
from spmd_types.memo import Scope, memo


@memo(Scope.TYPE)
def lower_bound_bytes(src: ShardingType, dst: ShardingType) -> float:
    if src == dst:  # nothing to move; no table either (an identity plan of any size has a bound)
        return 0.0
    if not src.unreduced and not dst.unreduced:
        missing = dst.local_size * src.mesh.size - overlap_total(src, dst)
        return missing * src.itemsize / src.mesh.size
    if not (on_prime_atoms(src) and on_prime_atoms(dst)):
        return device_bound_bytes(src, dst)
    return _unreduced_bound(src, dst)


def overlap_total(src: ShardingType, dst: ShardingType) -> int:
    """Elements summed over devices that a device's ``src`` block shares with its ``dst`` block
    (an exact Python integer; ``overlap_figures``)."""
    return overlap_figures(src, dst)[0]


@memo(Scope.TYPE)
def overlap_figures(a: ShardingType, b: ShardingType) -> tuple[int, int]:
    """The sum over devices and the least of ``overlap_elements(a, b)``, exact, multiplying only
    the dimensions whose overlap varies: where one type's atoms along a dimension extend the
    other's, each block of the finer cut lies in one of the coarser, so the overlap there is the
    smaller block on every device. Where they only agree in size position by position (nested
    cuts), it is the smaller block on the devices whose coordinates agree digit by digit and 0
    elsewhere, counted without a table (``_nested_figures``). The rest is summed per class of
    devices (``spmd_types.layout.overlap_summary``). Memoised: a move's bound, the closed form
    of its exchange (``redist.exchange.closed_form``) and the reducing floor
    (``redist.exchange.reduced_cells``) all read it; the planner's floors compare prefixes that
    slice or gather a few axes with their destination (on 13 axes of 2, per-device tables of
    every dimension were a fifth of planning)."""
    const, varying = 1, []
    for d, (la, lb, x, y) in enumerate(zip(a.local_shape, b.local_shape, dims_atoms(a), dims_atoms(b))):
        if x[: len(y)] == y or y[: len(x)] == x:
            const *= min(la, lb)
        else:
            varying.append(d)
    nested = _nested_figures(a, b, varying)
    if nested is not None:
        return nested[0] * const, nested[1] * const
    total, least = overlap_summary(a, b, tuple(varying))  # checks the sizes and the mesh
    return total * const, least * const


def _nested_figures(a: ShardingType, b: ShardingType, dims: list[int]) -> tuple[int, int] | None:
    """``overlap_summary(a, b, dims)`` in closed form where every one of ``dims`` is cut into
    atoms of the same sizes, position by position, on their common length (mixed-radix block
    numbers with equal radices): the finer block then lies in one block of the coarser, the one
    whose digits are its first digits, so the overlap is the smaller block where the devices'
    coordinates along the paired atoms agree and 0 elsewhere. Those equalities join atoms (of one
    size ``s``) into classes, and the devices meeting them all number ``mesh.size`` divided by
    ``s ** (len(class) - 1)`` per class: the mesh's prime atoms are independent digits of the
    device coordinates (so both types must be spelled on them, ``on_prime_atoms``). ``None``
    where that does not hold: the per-class tables decide."""
    if not dims:
        return a.mesh.size, 1
    if not (on_prime_atoms(a) and on_prime_atoms(b)):
        return None
    xs, ys = dims_atoms(a), dims_atoms(b)
    parent: dict[Atom, Atom] = {}

    def root(u: Atom) -> Atom:
        while parent.get(u, u) != u:
            u = parent[u]
        return u

    block = lost = 1  # lost: the digit values the equalities fix, one atom's size per join
    for d in dims:
        x, y = xs[d], ys[d]
        if any(p.size != q.size for p, q in zip(x, y)):
            return None
        block *= min(a.local_shape[d], b.local_shape[d])
        for p, q in zip(x, y):
            rp, rq = root(p), root(q)
            if rp != rq:
                parent[rp] = rq
                lost *= p.size
    return block * (a.mesh.size // lost), (block if lost == 1 else 0)


@memo(Scope.MESH, maxsize=256)
def _all_atoms(m: Mesh) -> frozenset[Atom]:
    """Every prime atom of the mesh."""
    return frozenset(a for name in m.names for a in atoms_of(m, name))


@memo(Scope.TYPE, maxsize=65536)
def on_prime_atoms(t: ShardingType) -> bool:
    """Whether every sub-axis of ``t`` is a product of the mesh's prime atoms (``x:(1)2``,
    ``x:(2)3`` on ``x=6``; not ``x:(1)3``): the closed forms here count groups by multiplying atom
    sizes, which holds only then (``redist.bounds_devices`` counts the rest from the devices).
    Memoised: the bounds and the exchange's closed forms ask it of each type many times a pair."""
    every = _all_atoms(t.mesh)
    return unreduced_atoms(t) <= every and all(a in every for d in dims_atoms(t) for a in d)


def _size(atoms: set[Atom] | frozenset[Atom]) -> int:
    return math.prod(a.size for a in atoms)


def _unreduced_bound(src: ShardingType, dst: ShardingType) -> float:
    consistent_messages, other_messages = _messages(src, dst)
    m = src.mesh
    s_dim = {a for d in dims_atoms(src) for a in d}
    d_dim = {a for d in dims_atoms(dst) for a in d}
    # every (S u D)-coordinate pair occurs on m.size / |S u D| devices
    consistent = overlap_total(src, dst) // (m.size // _size(s_dim | d_dim))
    total = math.prod(src.shape)
    return (consistent * consistent_messages + (total - consistent) * other_messages) * src.itemsize / m.size


@memo(Scope.TYPE)
def unreduced_bound_floor(src: ShardingType, dst: ShardingType) -> float | None:
    """A floor on ``lower_bound_bytes(src, dst)`` with pending sums, without the per-device
    overlaps: every element counted as consistent, which needs no more messages than an
    inconsistent one (``_messages``). The synthesizer keys prefixes by it before paying for the
    bound (``redist.synth.exchanges.by_floor``). ``None`` where a type uses a sub-axis that is not a product
    of the mesh's prime atoms (``x:(3)2`` on ``x=6``): the consistent count is not one of elements
    there, so no floor is claimed."""
    m = src.mesh
    if not (on_prime_atoms(src) and on_prime_atoms(dst)):
        return None
    return math.prod(src.shape) * _messages(src, dst)[0] * src.itemsize / m.size


@memo(Scope.TYPE)
def _messages(src: ShardingType, dst: ShardingType) -> tuple[int, int]:
    """Per element, the bound of the module docstring for a consistent and for an inconsistent
    cell; the first is never the larger (each branch is at most ``k + groups - 1``)."""
    m = src.mesh
    us, ud = unreduced_atoms(src), unreduced_atoms(dst)
    s_dim = {a for d in dims_atoms(src) for a in d}
    d_dim = {a for d in dims_atoms(dst) for a in d}
    fd = _all_atoms(m) - d_dim - ud
    k, covered = _size(us), _size(us & ud)
    groups = _size(fd)
    agreeing = groups // _size(fd & s_dim)  # groups of a consistent cell holding a source copy
    # a partial's copies differ only along the atoms the source neither shards nor sums over: all
    # lie in the holding group when those atoms are all summed over in the destination
    # (a size-1 axis's atom distinguishes no devices)
    confined = all(a.size == 1 for a in _all_atoms(m) - s_dim - us - ud)

    def messages(consistent: bool) -> int:
        """Per element: the bound of the module docstring for a (non-)consistent cell."""
        holding = agreeing if consistent else 0
        if covered == k and holding:  # the holding groups are complete, the others cover nothing
            incomplete = groups - holding
            return k + incomplete - 1 if incomplete else 0
        if holding and confined and groups >= 2:  # X(G*) = cover(G*): min(k-c + c-1, k) + I - 1
            return k + groups - 2
        return (k - covered if holding else k) + groups - 1

    return messages(True), messages(False)
