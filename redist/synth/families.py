"""The candidate families (``BUILDERS``): each builds typed plans the greedy pass alone misses, from
the greedy pass, fusion and each other; ``typed_candidates`` runs them all and mirrors candidates
that open with a relabelling permute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import Enum
from types import MappingProxyType

from redist.atoms import (
    Atom,
    atoms_of,
    atoms_of_axes,
    axes_of_atoms,
    dims_atoms,
    from_atoms,
    unreduced_atoms,
)
from redist.bounds import on_prime_atoms
from redist.cost import CostModel
from redist.errors import RedistError, StepError
from redist.facets import FacetTable
from redist.plan import Plan, apply_step
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from redist.synth.fusion import merge
from redist.synth.greedy import Greedy
from spmd_types import Mesh, ShardingType, SubAxis
from spmd_types.mesh import Axis


class Role(Enum):
    """What the candidate families read off a step."""

    RELABEL = "relabel"  # a relabelling permute: a candidate opening with one is also tried mirrored
    SLICE = "slice"  # a free slice: a pass of slices alone adds no candidate
    OTHER = "other"


ROLE: FacetTable[Role] = FacetTable("family role", "redist.synth.ROLE")
"""A step's role in the candidate families (``Role``)."""
ROLE.register(Permute)(Role.RELABEL)
ROLE.register(DynSlice)(Role.SLICE)
ROLE.register(AllGather, AllToAll, MultiAllToAll, ReduceScatter, AllReduceSlice, AllReduce, Discard, PadUnreduced,
              Exchange, ExchangeAllToAll)(Role.OTHER)


def _axes_dims(mesh, dims: list[list[Atom]]) -> tuple:  # type: ignore[no-untyped-def]
    return tuple(axes_of_atoms(mesh, tuple(d)) for d in dims)


def typed_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Every typed candidate that type-checks. The greedy pass reasons on the mesh's prime atoms;
    a type spelled with other factors of an axis (``x:(1)3`` on ``x=6``) can make a candidate
    reuse part of an axis, which its typing rule rejects: such a candidate is dropped (the
    other candidates and the exchanges remain)."""
    out: list[tuple[Step, ...]] = []
    for build in BUILDERS.values():
        try:
            out.extend(build(src, dst, cm))
        except (StepError, RedistError):
            continue
    return out + _permute_last_candidates(src, dst, cm, out)


def _permute_last_candidates(src: ShardingType, dst: ShardingType, cm: CostModel,
                             candidates: list[tuple[Step, ...]]) -> list[tuple[Step, ...]]:
    """Each candidate that opens with a relabelling ``Permute`` (a bijection of equal-size atoms),
    mirrored: the greedy pass to the destination relabelled back, then the permute. The same
    collectives over the relabelled groups, with the point-to-point step last instead of first,
    as XLA's partitioner orders ``tp2d_transpose_2x4`` (an all-to-all inside each process, then a
    permute across processes). Where the groups are priced alike the two orders tie on the model;
    ``Best.choice`` then puts steps that span processes last (``crossing_order``). A mirror that
    receives more than its candidate (a gather before the permute: the permute then moves the
    gathered block) is dropped: the model overprices it (docs/design.md 6.2)."""
    if src.unreduced or dst.unreduced:
        return []
    out = []
    for steps in candidates:
        if not steps or ROLE[type(steps[0])] is not Role.RELABEL:
            continue
        try:
            inverse = _relabelling(src, apply_step(steps[0], src), inverse=True)
            if inverse is None or any(a not in inverse for d in dims_atoms(dst) for a in d):
                continue  # (a sub-axis outside the mesh's prime atoms has no relabelling)
            mid = apply_step(Permute(_axes_dims(src.mesh, [[inverse[a] for a in d] for d in dims_atoms(dst)])), dst)
            mirror = merge(src, [*Greedy(src, mid).run(), Permute(dst.dims)], cm)
            if Plan.build(src, mirror, cm).recv_bytes <= Plan.build(src, steps, cm).recv_bytes:
                out.append(mirror)
        except (StepError, RedistError):
            continue
    return out


def _relabelling(a: ShardingType, b: ShardingType, inverse: bool = False) -> dict[Atom, Atom] | None:
    """The bijection of the mesh's atoms that takes type ``a`` to ``b`` position by position
    (atoms neither type uses paired by size, in order), or ``None`` where positions differ in
    size; ``inverse``: from ``b``'s atoms to ``a``'s."""
    da, db = dims_atoms(a), dims_atoms(b)
    if [[x.size for x in d] for d in da] != [[x.size for x in d] for d in db]:
        return None
    sigma = {x: y for d, e in zip(da, db) for x, y in zip(d, e)}
    every = atoms_of_axes(a.mesh, a.mesh.names)
    free_a = sorted((x for x in every if x not in sigma), key=lambda x: x.size)
    free_b = sorted((x for x in every if x not in sigma.values()), key=lambda x: x.size)
    if [x.size for x in free_a] != [x.size for x in free_b]:  # pragma: no cover - sizes of one mesh
        return None
    sigma.update(zip(free_a, free_b))
    return {y: x for x, y in sigma.items()} if inverse else sigma


def greedy_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    return [merge(src, Greedy(src, dst).run(), cm)]


def _spelled_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Only where a type cuts an axis off the mesh's prime atoms (``x:(1)3`` on ``x=6``): the
    greedy pass names pieces of axes by prime atoms and cannot name such a piece, so one local
    step spelled with the mesh's own sub-axes is tried first (a pad of a dimension's minor axes into
    pending sums, a discard or a slice of one sub-axis), then the greedy pass from there.
    ``s32[6@(b:(3)2)]{U:(b:(1)3)} -> s32[6]{U:b}`` is one pad, no message (2.7 B without it)."""
    if on_prime_atoms(src) and on_prime_atoms(dst):
        return []
    steps: list[Step] = [PadUnreduced(d, axes[k:]) for d, axes in enumerate(src.dims) for k in range(len(axes))]
    for a in _sub_axes(src.mesh):
        steps += [Discard((a,)), *(DynSlice(d, (a,)) for d in range(src.rank))]
    out = []
    for step in steps:
        try:
            out.append(merge(src, [step, *Greedy(apply_step(step, src), dst).run()], cm))
        except (StepError, RedistError):
            continue
    return out


def _sub_axes(mesh: Mesh) -> list[Axis]:
    """Every axis of ``mesh`` and every proper piece of one (``x:(pre)size``, ``pre * size`` dividing it)."""
    out: list[Axis] = []
    for name, n in mesh.axes:
        out.append(name)
        out += [SubAxis(name, pre, size) for pre in range(1, n) for size in range(2, n)
                if n % (pre * size) == 0 and pre * size <= n]
    return out


def _relabel_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """A relabelling ``Permute`` at the start or after the free slices, then the greedy pass."""
    out = []
    for after_slices in (False, True):
        g = Greedy(src, dst)
        if after_slices:
            g.slices()
        prefix = list(g.steps)
        new = g.relabel()
        if new is None:
            continue
        try:
            perm = Permute(_axes_dims(src.mesh, new))
            cur = Plan.build(src, tuple(prefix) + (perm,), cm).dst
            out.append(merge(src, prefix + [perm] + Greedy(cur, dst).run(), cm))
        except StepError:
            continue
    return out


def _reorder_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """A ``Permute`` that reorders each dimension's atoms so those the destination wants there come
    first (in its order) and the rest stay minor, then the greedy pass: one permute and plain
    collectives where the wanted atoms sit minor, as XLA's partitioner does for
    ``f32[768@(data,model)] -> f32[768@model]`` on ``{data=2, model=3}``. ``relabel`` cannot
    express it when the atoms' sizes differ; the same local shape is kept, so it is a permute.
    Also with the free atoms each dimension wants sliced onto its minor end first: the permute
    then moves the smaller block (``s32[262144@y] -> s32[262144@(x,y)]``: slice ``x``, permute
    half the bytes, as XLA does), and then also with the wanted atoms that sit on the minor end of
    another dimension moved over by all-to-alls (``s32[64@x,64,64@y] -> s32[64@(y,x),64,64]``:
    an all-to-all of ``y`` into dimension 0, then one permute swapping the order, as XLA does);
    and that with the last dimension's atoms moved first: the two orders move the same bytes
    through blocks of other shapes, whose local passes cost differently (docs/design.md 4.2,
    "Short rows")."""
    out = []
    for pre in (0, 1, 2, 3):
        g = Greedy(src, dst)
        if pre and not (_slice_free_wanted(g) if pre == 1 else _move_wanted(g, last_first=pre == 3)):
            continue
        new = []
        for d, want in zip(g.dims, g.wanted_dims):
            front = [a for a in want if a in d]
            new.append(front + [a for a in d if a not in front])
        if new == g.dims:
            continue
        try:
            perm = Permute(_axes_dims(src.mesh, new))
            cur = Plan.build(src, (*g.steps, perm), cm).dst
            out.append(merge(src, [*g.steps, perm, *Greedy(cur, dst).run()], cm))
        except (StepError, RedistError):
            continue
    return out


def _move_wanted(g: Greedy, last_first: bool = False) -> bool:
    """``_slice_free_wanted``, then each wanted atom found on the removable minor end of another
    dimension moved into the dimension that wants it by an all-to-all, until none is, dimensions
    taken first to last (or last to first); whether any all-to-all was added."""
    _slice_free_wanted(g)
    moved = False
    changed = True
    while changed:
        changed = False
        order = list(enumerate(g.dims))
        for i, d in reversed(order) if last_first else order:
            want = g.needed_at.get(d[-1]) if g.removable(i) else None
            if want is None or want == i:
                continue
            n = 1  # the longest removable tail wanted there, moved at once (atoms keep their order)
            while n < len(d) - g.prefix_length(i) and g.needed_at.get(d[-n - 1]) == want:
                n += 1
            run = d[-n:]
            del d[-n:]
            g.dims[want].extend(run)
            g.steps.append(AllToAll(i, want, axes_of_atoms(g.t.mesh, tuple(run))))
            moved = changed = True
    return moved


def _slice_free_wanted(g: Greedy) -> bool:
    """Slice every atom no layout uses onto the minor end of the dimension the destination wants
    it in; whether any was."""
    used = g.used()
    for j, want in enumerate(g.wanted_dims):
        for a in want:
            if a not in used:
                g.dims[j].append(a)
                used.add(a)
                g.steps.append(DynSlice(j, g.ax(a)))
    return bool(g.steps)


def _split_reduction_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Reductions over a replicated array repeat on every replica; slicing the free (replicated)
    axes into one dimension first lets each replica reduce a part, and a gather restores it:
    ``(k-1)/k + (q-1)/(kq)`` of the data instead of ``(k-1)/k``. Likewise an axis the destination
    wants unreduced can be sliced before the gathers and padded back into a pending sum for free."""
    g0 = Greedy(src, dst)
    wants_new = set(g0.wanted_unreduced) - g0.unred - g0.used()
    if not (g0.unred - set(g0.wanted_unreduced)) and not wants_new:
        return []
    free = _free_after_slices(g0)
    out = []
    for chosen in {free, tuple(a for a in free if a in wants_new)}:
        if chosen:
            out.extend(_park(src, dst, cm, chosen, reduce=frozenset()))
    return out


def _free_after_slices(g: Greedy) -> tuple[Atom, ...]:
    """The atoms (of size > 1) neither layout uses once ``g`` has taken its free slices."""
    g.slices()
    used = g.used()
    return tuple(a for name in g.t.mesh.names for a in atoms_of(g.t.mesh, name) if a not in used and a.size > 1)


def _reduce_early_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Reduce-scatter every unreduced axis first, into one dimension, while the array is small:
    axes the destination drops are then done, and axes it keeps unreduced become a pending sum
    again at the end for free (cheaper than moving them partial by partial). Where the types
    share an unreduced axis, also (into the source's widest dimension they divide only, to keep
    planning fast) the shared axes alone, so the others reduce on the smaller array
    (``s32[12]{U:(x,y,z)} -> s32[12]{U:x}``: 60 B, not 72 B), and the shared axes after slicing
    the free ones, so each replica reduces its own part before the gathers (or the exchange)
    restore it (``f32[16384@(data,fsdp),16384@pod,512]{U:seq} -> f32[16384,16384@(data,fsdp),
    512]{U:(pod,seq)}`` on 65,536 devices: 159 MB per device, not 535 MB)."""
    g0 = Greedy(src, dst)
    kept = sorted(g0.unred)
    if not kept:
        return []
    out = _park(src, dst, cm, tuple(kept), reduce=frozenset(kept))
    shared = tuple(a for a in kept if a in g0.wanted_unreduced)
    if not shared:
        return out
    if shared != tuple(kept):
        out += _park(src, dst, cm, shared, reduce=frozenset(shared), dims=_widest(src, shared))
    free = _free_after_slices(g0)
    if free:
        out += _park(src, dst, cm, free + shared, reduce=frozenset(shared), dims=_widest(src, free + shared))
    return out


def reduce_shared_first_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """All-reduce the unreduced axes both types share on the source block (after the free
    slices), move the summed array to the destination with those axes sharded on the minor end of
    one dimension (the greedy, relabelling and reordering passes to that "parked" type), then pad
    them back into a pending sum for free. Where the source block is small and the destination
    gathers, the all-reduce of the small block plus a gather of ``1/|shared|`` of the array
    receives less than gathering every partial: ``s32[12@(x,y)]{U:z} -> s32[12]{U:z}`` on
    ``{x=2,y=2,z=2}``: all-reduce ``z`` (12 B), permute ``x`` to ``z`` (6 B), gather ``y``
    (12 B), pad ``z``: 30 B, not 36 B. ``_reduce_early_candidates`` reduce-scatters the shared
    axes instead, which needs them to divide the source block; the all-reduce does not. Parked in
    the destination's widest dimension they divide only (one sub-plan per builder). Only where
    the shared axes divide no dimension of the source block: elsewhere the reduce-scatter does
    the same reduction receiving half as much, and these sub-plans cost planning time
    (docs/design.md 6.2)."""
    g = Greedy(src, dst)
    shared = tuple(sorted(g.unred & set(g.wanted_unreduced)))
    if not shared:
        return []
    n = math.prod(a.size for a in shared)
    if any(b % n == 0 for b in src.local_shape):
        return []
    fits = [j for j in range(dst.rank) if dst.local_shape[j] % n == 0]
    if not fits:
        return []
    j = max(fits, key=lambda i: dst.local_shape[i])
    g.slices()
    head = [*g.steps, AllReduce(axes_of_atoms(src.mesh, shared))]
    cur = Plan.build(src, tuple(head), cm).dst
    dims = [list(d) for d in dims_atoms(dst)]
    dims[j] += shared
    parked = from_atoms(dst, tuple(tuple(d) for d in dims), frozenset(unreduced_atoms(dst)) - set(shared))
    pad = PadUnreduced(j, axes_of_atoms(src.mesh, shared))
    return [merge(src, [*head, *mid, pad], cm) for mid in _passes(cur, parked, cm)]


def _passes(cur: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """The greedy, relabelling and reordering candidates from ``cur``: how the builders that
    first change the array (reduce it, slice it) finish the move."""
    return [mid for build in (greedy_candidates, _relabel_candidates, _reorder_candidates) for mid in build(cur, dst, cm)]


def _all_reduce_first_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Time objective only: after the free slices (with, or without, also slicing the free atoms
    the destination shards: ``_wanted_slices``), all-reduce the pending sums the destination
    drops (on the block as it is, so within the memory bound), then ``_passes``, as XLA's
    partitioner orders such moves. It receives more than reduce-scattering first, but the
    all-reduce is one fast collective and what follows moves a plain array (docs/design.md 6.2,
    *all-reduce first*). Not under the bytes objective, which it never wins and whose planning time
    the extra sub-plans would cost; nor where only slices follow (that is ``AllReduceSlice``, a
    variant of every reduce-scatter already)."""
    if not cm.time_first:
        return []
    g = Greedy(src, dst)
    dropped = tuple(sorted(g.unred - set(g.wanted_unreduced)))
    if not dropped:
        return []
    free = _free_after_slices(g)
    reduce = AllReduce(axes_of_atoms(src.mesh, dropped))
    out = []
    for head in dict.fromkeys(((*g.steps, reduce), (*g.steps, *_wanted_slices(dst, free), reduce))):
        mids = _passes(Plan.build(src, head, cm).dst, dst, cm)
        out += [merge(src, [*head, *mid], cm) for mid in mids if not all(ROLE[type(s)] is Role.SLICE for s in mid)]
    return out


def _wanted_slices(dst: ShardingType, free: tuple[Atom, ...]) -> tuple[Step, ...]:
    """The free atoms ``dst`` shards, each sliced onto the minor end of the dimension ``dst`` puts
    it in, so what follows moves the smaller block (docs/design.md 6.2)."""
    where = {a: j for j, d in enumerate(dims_atoms(dst)) for a in d}
    return tuple(DynSlice(j, axes_of_atoms(dst.mesh, tuple(a for a in free if where.get(a) == j)))
                 for j in sorted({where[a] for a in free if a in where}))


def _widest(src: ShardingType, atoms: tuple[Atom, ...]) -> tuple[int]:
    """The source's widest dimension that ``atoms`` divide (else its widest)."""
    n = math.prod(a.size for a in atoms)
    return (max(range(src.rank), key=lambda j: (src.local_shape[j] % n == 0, src.local_shape[j])),)


def _park(
    src: ShardingType, dst: ShardingType, cm: CostModel, atoms: tuple[Atom, ...], reduce: frozenset[Atom],
    dims: tuple[int, ...] | None = None,
) -> list[tuple[Step, ...]]:
    """After the free slices, put ``atoms`` on the minor end of one dimension (each dimension in
    turn, or each of ``dims``), by reduce-scattering those in ``reduce`` (unreduced axes) and
    slicing the others (free axes), and let the greedy pass finish from there. Under the time
    objective, where the destination shards one of ``atoms`` in that dimension, also the
    relabelling and reordering passes (``_passes``): one permute of the reduced block where the
    greedy finish gathers the whole array back. Only there: in every dimension they cost more
    planning time than the plans they win are worth (docs/design.md 6.2, *reduce early*)."""
    wanted = {j for j, d in enumerate(dims_atoms(dst)) for a in d if a in atoms} if cm.time_first else set()
    out = []
    for dim in range(src.rank) if dims is None else dims:
        g = Greedy(src, dst)
        g.slices()
        for a in atoms:
            if a in reduce:
                g.unred.discard(a)
                g.steps.append(ReduceScatter(dim, g.ax(a)))
            else:
                g.steps.append(DynSlice(dim, g.ax(a)))
            g.dims[dim].append(a)
        try:
            if dim not in wanted:
                out.append(merge(src, g.run(), cm))
                continue
            head = tuple(g.steps)
            out += [merge(src, [*head, *mid], cm) for mid in _passes(Plan.build(src, head, cm).dst, dst, cm)]
        except (StepError, RedistError):
            continue
    return out


Builder = Callable[[ShardingType, ShardingType, CostModel], list[tuple[Step, ...]]]


BUILDERS: Mapping[str, Builder] = MappingProxyType({
    "greedy": greedy_candidates,
    "split_reduction": _split_reduction_candidates,
    "reduce_early": _reduce_early_candidates,
    "relabel": _relabel_candidates,
    "reorder": _reorder_candidates,
    "reduce_shared_first": reduce_shared_first_candidates,
    "all_reduce_first": _all_reduce_first_candidates,
    "spelled": _spelled_candidates,
})
"""The families of typed candidates, built in this order (``typed_candidates``; each candidate
that opens with a relabelling permute is then mirrored, ``_permute_last_candidates``). Every
family wins plans the others miss: ``benchmarks.studies.families`` drops each in turn and reports the
plans that change and the planning time it costs."""

