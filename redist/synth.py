"""The constructive synthesizer: any type mismatch -> a memory-bounded plan of minimal traffic.

It reasons on prime sub-axes ("atoms", ``redist.atoms``) with each dimension as a stack whose
minor end is where every step acts. For each dimension, the common prefix of the current and
destination axes is final; the rest must be removed (minor first) and the destination's remaining
axes added (major first). A greedy pass then takes, in order of preference:

1. ``DynSlice`` of a destination axis the array does not use yet (free, shrinks memory);
2. ``ReduceScatter`` of an unreduced axis into the dimension that wants it next;
3. ``AllToAll`` of a minor-most axis that another dimension wants next ((p-1)/p of the local size,
   instead of the p-1 times of a gather followed by a slice);
4. ``AllReduce`` of unreduced axes the destination does not shard over (after slicing: smallest);
5. ``AllGather`` of axes the destination does not use, then ``PadUnreduced``/``Discard`` for axes the
   destination wants unreduced (free), last because they grow memory;
6. only when stuck (an axis is needed but buried): gather it and slice it again later.

Slices first and gathers last keep every intermediate within ``max(src, dst)`` local bytes.
Candidates add a *relabelling* ``Permute`` (swap axes of equal size in place, e.g. ``[8@x,8@y] ->
[8@y,8@x]``, or the major half of ``y`` for ``x``), at the start or after the free slices, and an
``Exchange`` of exactly the missing cells, alone or after any prefix of a typed plan; each
candidate that opens with a relabelling permute is also tried mirrored, the permute last (XLA's
order for ``tp2d_transpose_2x4``; a permute-then-slice candidate becomes slice-then-permute). Each
candidate is measured; the plan returned meets the memory bound and has the least received bytes,
then the least estimated time, then the fewest collectives (a typed collective wins ties). Under
the time objective, time comes first; a measured profile's ``CostModel.tie_tolerance`` makes plans
within its measured error of the fastest ties, won by the fewest collective ops, then by steps
that span processes coming last (``_Best.choice``, ``_crossing_order``).
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import NamedTuple

from redist.atoms import (
    Atom,
    atom_axis,
    atoms_of,
    atoms_of_axes,
    axes_of_atoms,
    dims_atoms,
    from_atoms,
    unreduced_atoms,
)
from redist.bounds import lower_bound_bytes, on_prime_atoms, unreduced_bound_floor
from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.errors import RedistError, StepError
from redist.exchange import (
    cell_shape,
    check_schedule,
    group_missing_total,
    provider_cells,
    reduced_cells,
    rooted_rounds,
    routing,
    sampled_provider_cells,
)
from redist.exchange_a2a import offered as a2a_offered
from redist.facets import FacetTable
from redist.measure import StepMeasure, closed_form, moved_kind, p2p_axes
from redist.plan import Plan, apply_step, measure_step
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
from spmd_types import Mesh, ShardingType, SubAxis
from spmd_types.memo import Scope, memo
from spmd_types.mesh import Axis
from spmd_types.types import canonical_axes

Dims = list[list[Atom]]


class _Greedy:
    """The stack pass on atoms; emits one-atom steps (merged afterwards)."""

    def __init__(self, t: ShardingType, dst: ShardingType) -> None:
        self.t = t
        self.dims: Dims = [list(d) for d in dims_atoms(t)]
        self.unred: set[Atom] = set(unreduced_atoms(t))
        self.D = dims_atoms(dst)
        self.UD = unreduced_atoms(dst)
        self.needed_at = {a: j for j, d in enumerate(self.D) for a in d}
        self.steps: list[Step] = []

    def ax(self, a: Atom) -> tuple:
        return (atom_axis(self.t.mesh, a),)

    def plen(self, i: int) -> int:
        d, t = self.dims[i], self.D[i]
        for k, (a, b) in enumerate(zip(d, t)):
            if a != b:
                return k
        return min(len(d), len(t))

    def ready(self, j: int) -> bool:
        return self.plen(j) == len(self.dims[j]) < len(self.D[j])

    def removable(self, i: int) -> bool:
        return len(self.dims[i]) > self.plen(i)

    def used(self) -> set[Atom]:
        return {a for d in self.dims for a in d} | self.unred

    def prefix_lengths(self) -> list[int]:
        return [self.plen(j) for j in range(len(self.dims))]

    def slices(self, pl: list[int] | None = None) -> None:
        """Slice every free destination atom that is next on its dimension. One pass: a slice only
        lengthens its own dimension and uses one more atom, so it never readies another one.
        ``pl``: the current ``prefix_lengths``, kept current (a slice of the next destination atom
        lengthens its dimension's common prefix by one)."""
        pl = self.prefix_lengths() if pl is None else pl
        used = self.used()
        for j, (d, want) in enumerate(zip(self.dims, self.D)):
            # exhaust one dimension before the next, so its slices fuse into one step
            while pl[j] == len(d) < len(want) and want[len(d)] not in used:
                a = want[len(d)]
                d.append(a)
                used.add(a)
                pl[j] += 1
                self.steps.append(DynSlice(j, self.ax(a)))

    def step_once(self, pl: list[int] | None = None) -> bool:
        """One non-slice step; False when done. Each branch returns as soon as it changes the
        stacks, so every dimension's common prefix (``plen``) is read once up front (``pl``, the
        current ``prefix_lengths``, where the caller has them)."""
        rank = len(self.dims)
        pl = self.prefix_lengths() if pl is None else pl
        ready = [pl[j] == len(self.dims[j]) < len(self.D[j]) for j in range(rank)]
        for j in range(rank):
            if ready[j] and self.D[j][len(self.dims[j])] in self.unred:
                a = self.D[j][len(self.dims[j])]
                self.unred.discard(a)
                self.dims[j].append(a)
                self.steps.append(ReduceScatter(j, self.ax(a)))
                return True
        for i in range(rank):
            # the longest minor-most run of dimension i that dimension j wants next, moved at once
            for n in range(len(self.dims[i]) - pl[i], 0, -1):
                run = self.dims[i][-n:]
                want = self.needed_at.get(run[0])
                if want is None or want == i or not ready[want]:
                    continue
                at = len(self.dims[want])
                if list(self.D[want][at : at + n]) == run:
                    del self.dims[i][-n:]
                    self.dims[want].extend(run)
                    self.steps.append(AllToAll(i, want, axes_of_atoms(self.t.mesh, tuple(run))))
                    return True
        for a in sorted(self.unred - self.UD):
            if a not in self.needed_at:
                self.unred.discard(a)
                self.steps.append(AllReduce(self.ax(a)))
                return True
        for i in range(rank):
            if len(self.dims[i]) > pl[i] and self.dims[i][-1] not in self.needed_at and self.dims[i][-1] not in self.UD:
                self.steps.append(AllGather(i, self.ax(self.dims[i].pop())))
                return True
        for i in range(rank):
            if len(self.dims[i]) > pl[i] and self.dims[i][-1] in self.UD:
                a = self.dims[i].pop()
                self.unred.add(a)
                self.steps.append(PadUnreduced(i, self.ax(a)))
                return True
        used = self.used()
        for a in sorted(self.UD - self.unred):
            if a not in used:
                self.unred.add(a)
                self.steps.append(Discard(self.ax(a)))
                return True
        if [tuple(d) for d in self.dims] == list(self.D) and self.unred == set(self.UD):
            return False
        # Stuck: a needed axis is unreduced or buried under axes that cannot move yet.
        for a in sorted(self.unred - self.UD):
            self.unred.discard(a)
            self.steps.append(AllReduce(self.ax(a)))
            return True
        for i in range(rank):
            if len(self.dims[i]) > pl[i]:
                self.steps.append(AllGather(i, self.ax(self.dims[i].pop())))
                return True
        raise RedistError(f"synthesizer made no progress from {self.t}")  # pragma: no cover

    def run(self) -> list[Step]:
        for _ in range(64 * (len(self.dims) + 1) * (len(self.t.mesh.axes) + 1)):
            pl = self.prefix_lengths()  # read once per round: slices keep them current
            self.slices(pl)
            if not self.step_once(pl):
                return self.steps
        raise RedistError(f"synthesizer did not converge from {self.t}")  # pragma: no cover

    def relabel(self) -> list[list[Atom]] | None:
        """Replace atoms to be removed by wanted atoms of equal size, in place (a ``Permute``).

        A wanted atom may still sit in another dimension's removable tail; that spot takes an
        atom displaced by the replacement instead (it is going to be removed anyway)."""
        new = [list(d) for d in self.dims]
        placed: set[Atom] = set()
        displaced: list[Atom] = []
        for i, d in enumerate(self.dims):
            k = self.plen(i)
            while k < len(d) and k < len(self.D[i]) and d[k].size == self.D[i][k].size:
                if d[k] != self.D[i][k]:
                    displaced.append(d[k])
                    placed.add(self.D[i][k])
                new[i][k] = self.D[i][k]
                k += 1
        if new == self.dims:
            return None
        fixed = set()
        for i, d in enumerate(new):
            for k in range(len(d)):
                if d[k] in placed and self.dims[i][k] == d[k] and k >= self.plen(i):
                    # a removable spot still holding an atom that now sits where it is wanted: it
                    # takes a displaced atom of equal size, preferably one not placed elsewhere
                    held = {a for e in new for a in e}
                    fits = [a for a in displaced if a.size == d[k].size and a not in fixed]
                    swap = next((a for a in fits if a not in held), fits[0] if fits else None)
                    if swap is None:
                        return None
                    fixed.add(swap)
                    d[k] = swap
        flat = [a for d in new for a in d]
        if len(flat) != len(set(flat)) or set(flat) & self.unred:
            return None
        return new


def _merge(src: ShardingType, steps: list[Step], cm: CostModel) -> tuple[Step, ...]:
    """Fuse adjacent steps of one kind into one collective over the flattened group when the result
    is the same type and the estimate is not slower. Memoised: families of candidates reach the
    same steps (on 13 axes of 2, one merge in seven repeats one of the same plan)."""
    return _merged(src, tuple(steps), cm)


@memo(Scope.TYPE)
def _merged(src: ShardingType, steps: tuple[Step, ...], cm: CostModel) -> tuple[Step, ...]:
    out: list[Step] = []
    types = [src]
    for s in steps:
        after = apply_step(s, types[-1])
        if out:
            prev, before = out[-1], types[-2]
            fused = _fuse(prev, s, before.mesh)
            if fused is not None:
                try:
                    ok = apply_step(fused, before) == after
                except StepError:
                    ok = False
                if ok and type(s) in _LOCAL:  # a local pass writes the fused block once, not twice
                    out[-1] = fused
                    types[-1] = after
                    continue
                if ok:
                    mid = types[-1]
                    split = measure_step(prev, before, mid, cm).time_s + measure_step(s, mid, after, cm).time_s
                    if measure_step(fused, before, after, cm).time_s <= split * (1 + 1e-12) + 1e-18:
                        out[-1] = fused
                        types[-1] = after
                        continue
        out.append(s)
        types.append(after)
    return tuple(out)


_LOCAL = (DynSlice, Discard, PadUnreduced)
"""Steps measured as one local pass writing the new block (``redist.measure._local``): fused, the
pass over the last block costs no more than the passes over both (``CostModel.copy_time`` is never
negative), so ``_merged`` fuses them wherever they type the same, without measuring."""

Fuse = Callable[[Step, Step, Mesh], "Step | None"]
FUSE: FacetTable[Fuse] = FacetTable("fuse", "redist.synth.FUSE")
"""Two adjacent steps of one class as one step over the flattened group, or ``None``."""


def _fuse(a: Step, b: Step, mesh: Mesh) -> Step | None:
    if type(a) is not type(b):
        return None
    return FUSE[type(a)](a, b, mesh)


def _same_dim_fusion(order: str) -> Fuse:
    """Fuse steps on the same dimension(s); ``order`` says whose axes come first in the group."""

    def fuse(a: Step, b: Step, mesh: Mesh) -> Step | None:
        fields = {k: v for k, v in vars(a).items() if k != "axes"}
        if fields != {k: v for k, v in vars(b).items() if k != "axes"}:
            return None
        first, second = (a, b) if order == "ab" else (b, a)
        return type(a)(**fields, axes=canonical_axes(mesh, first.axes + second.axes))  # type: ignore[call-arg,attr-defined]

    return fuse


# Slices and reductions append to the minor end (a's axes stay major); gathers, moves and pads
# remove from the minor end, so the step applied second removed the more-major axes.
FUSE.register(DynSlice, ReduceScatter, AllReduceSlice, AllReduce, Discard)(_same_dim_fusion("ab"))
FUSE.register(AllGather, PadUnreduced)(_same_dim_fusion("ba"))
_same_dims_all_to_all = _same_dim_fusion("ba")


@FUSE.register(AllToAll)
def _all_to_all_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    """On the same dimensions, one move over both groups; on other dimensions, both moves as one
    all-to-all over the union group (``_merge`` keeps it only where it types the same)."""
    return _same_dims_all_to_all(a, b, mesh) or MultiAllToAll((a, b))  # type: ignore[arg-type]


@FUSE.register(MultiAllToAll)
def _multi_all_to_all_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    return MultiAllToAll(a.moves + b.moves)  # type: ignore[attr-defined]


@FUSE.register(Permute, Exchange, ExchangeAllToAll)
def _no_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    """Two point-to-point schedules are not one schedule."""
    return None


def _axes_dims(mesh, dims: list[list[Atom]]) -> tuple:  # type: ignore[no-untyped-def]
    return tuple(axes_of_atoms(mesh, tuple(d)) for d in dims)


def _typed_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
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
    ``_Best.choice`` then puts steps that span processes last (``_crossing_order``). A mirror that
    receives more than its candidate (a gather before the permute: the permute then moves the
    gathered block) is dropped: ``fsdp_gather_data`` over 4 Gloo processes priced such a mirror
    20% faster and it ran 6% slower (paired, 95% interval 1.00-1.14)."""
    if src.unreduced or dst.unreduced:
        return []
    out = []
    for steps in candidates:
        if not steps or type(steps[0]) is not Permute:
            continue
        try:
            inverse = _relabelling(src, apply_step(steps[0], src), inverse=True)
            if inverse is None or any(a not in inverse for d in dims_atoms(dst) for a in d):
                continue  # (a sub-axis outside the mesh's prime atoms has no relabelling)
            mid = apply_step(Permute(_axes_dims(src.mesh, [[inverse[a] for a in d] for d in dims_atoms(dst)])), dst)
            mirror = _merge(src, [*_Greedy(src, mid).run(), Permute(dst.dims)], cm)
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


def _greedy_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    return [_merge(src, _Greedy(src, dst).run(), cm)]


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
            out.append(_merge(src, [step, *_Greedy(apply_step(step, src), dst).run()], cm))
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
        g = _Greedy(src, dst)
        if after_slices:
            g.slices()
        prefix = list(g.steps)
        new = g.relabel()
        if new is None:
            continue
        try:
            perm = Permute(_axes_dims(src.mesh, new))
            cur = Plan.build(src, tuple(prefix) + (perm,), cm).dst
            out.append(_merge(src, prefix + [perm] + _Greedy(cur, dst).run(), cm))
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
    through blocks of other shapes, whose local passes cost differently (``size3_transpose``:
    moving ``y`` first keeps the middle block in long rows, 7-11% faster)."""
    out = []
    for pre in (0, 1, 2, 3):
        g = _Greedy(src, dst)
        if pre and not (_slice_free_wanted(g) if pre == 1 else _move_wanted(g, last_first=pre == 3)):
            continue
        new = []
        for d, want in zip(g.dims, g.D):
            front = [a for a in want if a in d]
            new.append(front + [a for a in d if a not in front])
        if new == g.dims:
            continue
        try:
            perm = Permute(_axes_dims(src.mesh, new))
            cur = Plan.build(src, (*g.steps, perm), cm).dst
            out.append(_merge(src, [*g.steps, perm, *_Greedy(cur, dst).run()], cm))
        except (StepError, RedistError):
            continue
    return out


def _move_wanted(g: _Greedy, last_first: bool = False) -> bool:
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
            while n < len(d) - g.plen(i) and g.needed_at.get(d[-n - 1]) == want:
                n += 1
            run = d[-n:]
            del d[-n:]
            g.dims[want].extend(run)
            g.steps.append(AllToAll(i, want, axes_of_atoms(g.t.mesh, tuple(run))))
            moved = changed = True
    return moved


def _slice_free_wanted(g: _Greedy) -> bool:
    """Slice every atom no layout uses onto the minor end of the dimension the destination wants
    it in; whether any was."""
    used = g.used()
    for j, want in enumerate(g.D):
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
    g0 = _Greedy(src, dst)
    wants_new = set(g0.UD) - g0.unred - g0.used()
    if not (g0.unred - set(g0.UD)) and not wants_new:
        return []
    free = _free_after_slices(g0)
    out = []
    for chosen in {free, tuple(a for a in free if a in wants_new)}:
        if chosen:
            out.extend(_park(src, dst, cm, chosen, reduce=frozenset()))
    return out


def _free_after_slices(g: _Greedy) -> tuple[Atom, ...]:
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
    g0 = _Greedy(src, dst)
    kept = sorted(g0.unred)
    if not kept:
        return []
    out = _park(src, dst, cm, tuple(kept), reduce=frozenset(kept))
    shared = tuple(a for a in kept if a in g0.UD)
    if not shared:
        return out
    if shared != tuple(kept):
        out += _park(src, dst, cm, shared, reduce=frozenset(shared), dims=_widest(src, shared))
    free = _free_after_slices(g0)
    if free:
        out += _park(src, dst, cm, free + shared, reduce=frozenset(shared), dims=_widest(src, free + shared))
    return out


def _reduce_shared_first_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
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
    the same reduction receiving half as much, and these three sub-plans per pair cost planning
    time (the 8-axis ladder rung's pending-sum pairs 11 -> 24 ms)."""
    g = _Greedy(src, dst)
    shared = tuple(sorted(g.unred & set(g.UD)))
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
    return [_merge(src, [*head, *mid, pad], cm) for mid in _passes(cur, parked, cm)]


def _passes(cur: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """The greedy, relabelling and reordering candidates from ``cur``: how the builders that
    first change the array (reduce it, slice it) finish the move."""
    return [mid for build in (_greedy_candidates, _relabel_candidates, _reorder_candidates) for mid in build(cur, dst, cm)]


def _all_reduce_first_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> list[tuple[Step, ...]]:
    """Time objective only: after the free slices (with, or without, also slicing the free atoms
    the destination shards: ``_wanted_slices``), all-reduce the pending sums the destination
    drops (on the block as it is, so within the memory bound), then ``_passes``, as XLA's
    partitioner orders such moves. It receives more than reduce-scattering first, but the
    all-reduce is one fast collective and what follows moves a plain array: ``f32[32,32,256@x]
    {U:y} -> f32[32,32,256@y]`` on ``{x=2,y=2,z=2}`` (``rand188``) is an all-reduce and a permute
    (priced 794 us, 0.59 ms measured), where reduce-scatter + exchange was priced 1,620 us and
    ran 1.01 ms. Not under the bytes objective, which it never wins and whose planning time
    the extra sub-plans would cost; nor where only slices follow (that is ``AllReduceSlice``, a
    variant of every reduce-scatter already)."""
    if not cm.time_first:
        return []
    g = _Greedy(src, dst)
    dropped = tuple(sorted(g.unred - set(g.UD)))
    if not dropped:
        return []
    free = _free_after_slices(g)
    reduce = AllReduce(axes_of_atoms(src.mesh, dropped))
    out = []
    for head in dict.fromkeys(((*g.steps, reduce), (*g.steps, *_wanted_slices(dst, free), reduce))):
        mids = _passes(Plan.build(src, head, cm).dst, dst, cm)
        out += [_merge(src, [*head, *mid], cm) for mid in mids if not all(type(s) is DynSlice for s in mid)]
    return out


def _wanted_slices(dst: ShardingType, free: tuple[Atom, ...]) -> tuple[Step, ...]:
    """The free atoms ``dst`` shards, each sliced onto the minor end of the dimension ``dst`` puts
    it in, so what follows moves the smaller block (``rand031``: the permute after the all-reduce
    then moves half of it)."""
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
    relabelling and reordering passes (``_passes``): ``f32[262144@(z,y)]{U:x} ->
    f32[262144@(y,z,x)]`` on ``{x=2,y=2,z=2}`` (``rand120``) is a reduce-scatter and a permute of
    the reduced block (priced 453 us, 0.55 ms measured), where the greedy finish gathers the whole
    array back and the best plan without it permuted the partials first (516 us, 0.74 ms; XLA
    0.62 ms). Only there: in every dimension they took the time objective's planning on 8 and 12
    axes of 2 from 16 and 52 ms a pair to 31 and 130 ms (18 and 62 ms as here), for four more
    faster plans in 440 random pairs, by 2-10%."""
    wanted = {j for j, d in enumerate(dims_atoms(dst)) for a in d if a in atoms} if cm.time_first else set()
    out = []
    for dim in range(src.rank) if dims is None else dims:
        g = _Greedy(src, dst)
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
                out.append(_merge(src, g.run(), cm))
                continue
            head = tuple(g.steps)
            out += [_merge(src, [*head, *mid], cm) for mid in _passes(Plan.build(src, head, cm).dst, dst, cm)]
        except (StepError, RedistError):
            continue
    return out


Builder = Callable[[ShardingType, ShardingType, CostModel], list[tuple[Step, ...]]]

BUILDERS: Mapping[str, Builder] = MappingProxyType({
    "greedy": _greedy_candidates,
    "split_reduction": _split_reduction_candidates,
    "reduce_early": _reduce_early_candidates,
    "relabel": _relabel_candidates,
    "reorder": _reorder_candidates,
    "reduce_shared_first": _reduce_shared_first_candidates,
    "all_reduce_first": _all_reduce_first_candidates,
    "spelled": _spelled_candidates,
})
"""The families of typed candidates, built in this order (``_typed_candidates``; each candidate
that opens with a relabelling permute is then mirrored, ``_permute_last_candidates``). Every
family wins plans the others miss: ``benchmarks.families`` drops each in turn and reports the
plans that change and the planning time it costs."""


TIME_SLACK = 1 - 1e-9
"""Time floors are shrunk by this factor: they sum per-round terms in another order than the
measure does, so float rounding must not lift one above the figure it bounds. Byte floors need no
slack: bound and measure are each one correctly rounded division of an exact integer."""


class _Floor(NamedTuple):
    """What an exchange ``cur -> dst`` needs at least, read without building its schedule."""
    recv: float      # bytes a device receives, averaged
    rounds: int      # rounds (one collective-permute each)
    cell_bytes: int  # bytes of the cell each round moves


@memo(Scope.TYPE)
def _exchange_rounds_floor(cur: ShardingType, dst: ShardingType, rooted: bool = True) -> _Floor:
    """Optimistic bytes and rounds of an exchange ``cur -> dst`` without building its schedule: it
    receives at least the lower bound, and its busiest device needs one round per missing cell
    (``_pending_sum_rounds`` with pending sums). Without ``rooted``, the cheaper floor
    ``_by_floor`` keys a prefix by first. No cost model: each prices it (``_exchange_floor``)."""
    if not (cur.unreduced or dst.unreduced):
        cf = closed_form(cur, dst)
        return _Floor(cf.mean_missing * cur.itemsize, cf.rounds, cf.cell * cur.itemsize)
    cell = math.prod(cell_shape(cur, dst))
    cells = max(group_missing_total(cur, dst) // cell, reduced_cells(cur, dst))
    recv = max(lower_bound_bytes(cur, dst), cells * (cell * cur.itemsize) / cur.mesh.size)
    rounds = _pending_sum_rounds(cur, dst, cell, recv / (cell * cur.itemsize), rooted)
    return _Floor(recv, rounds, cell * cur.itemsize)


@memo(Scope.TYPE)
def _exchange_floor(cur: ShardingType, dst: ShardingType, cm: CostModel, rooted: bool = True) -> tuple[float, float]:
    """Optimistic (recv, time) of an exchange ``cur -> dst`` (``_exchange_rounds_floor``), each
    round costing at least its least price (``_rounds_time_floor``)."""
    f = _exchange_rounds_floor(cur, dst, rooted)
    return (f.recv, _rounds_time_floor(cur, f.rounds, f.cell_bytes, cm))


def _rounds_time_floor(cur: ShardingType, rounds: int, cell_bytes: int, cm: CostModel) -> float:
    """Least time of ``rounds`` exchange rounds moving one ``cell_bytes`` cell each: every round
    at its least price (``CostModel.least_round``)."""
    lat, inv_bw = cm.least_round(moved_kind("exchange", cur))
    return rounds * (lat + cell_bytes * inv_bw) * TIME_SLACK


def _or_one_all_to_all(cur: ShardingType, recv: float, time: float, cm: CostModel) -> float:
    """``time`` (the exchange in rounds) or, where the one-all-to-all form (``ExchangeAllToAll``)
    is offered, the least time of one all-to-all of ``recv``, whichever is less."""
    if not a2a_offered(cur):
        return time
    return min(time, _one_all_to_all(cur, recv, cm))


def _any_exchange_floor(cur: ShardingType, dst: ShardingType, cm: CostModel,
                        rooted: bool = True) -> tuple[float, float]:
    """The floor of an exchange run either way (``VARIANTS``): in rounds (``_exchange_floor``) or
    as one all-to-all (``ExchangeAllToAll``), which receives at least as many bytes (its padding
    counts) and costs at least one all-to-all of them (``_one_all_to_all``)."""
    recv, time = _exchange_floor(cur, dst, cm, rooted)
    return recv, _or_one_all_to_all(cur, recv, time, cm)


def _one_all_to_all(cur: ShardingType, recv: float, cm: CostModel) -> float:
    """Least time of an all-to-all receiving ``recv`` bytes: one latency term (groups of 2 or
    more), no slow axis (they only scale costs up)."""
    return cm.kind_time(moved_kind("all_to_all", cur), (), 1, recv) * TIME_SLACK


def _pending_sum_rounds(cur: ShardingType, dst: ShardingType, cell: int, mean_cells: float,
                        rooted: bool = True) -> int:
    """Rounds the exchange schedule (``redist.exchange``) needs at least, moving one cell per device
    and round: the average receipt (``mean_cells``, from the bound) and, without pending sums in
    ``dst``, every device's missing cells; where partials are summed (``k > 1`` of them per element),
    the root receives ``k - 1`` cells in the merge phase and then the sum reaches each other target
    of the element (one per group of devices that differ only along ``dst``'s unreduced axes) in a
    separately coloured phase: at least ``ceil(log2 targets)`` rounds, since the devices holding
    the sum at most double per round (the exchange forwards along a doubling tree where that
    beats a star). And at least the cells of the busiest receiver: one device per group of
    devices receives every cell the group lacks (``redist.exchange.provider_cells``), and the
    rounds of the device the routing makes root of every cell its new block's devices all lack
    (``redist.exchange.rooted_rounds``: 112 rounds where the rest give 16 on 13 axes of 2, so the
    direct exchange is pruned once a reduce-scatter + exchange is routed, not routed itself;
    only with ``rooted``: it builds a class quotient, so ``_by_floor`` asks for it last)."""
    rounds = math.ceil(mean_cells * TIME_SLACK)
    if not dst.unreduced:
        rounds = max(rounds, closed_form(cur, dst).rounds)  # its cell is ``cell``
    return max(rounds, provider_cells(cur, dst), rooted_rounds(cur, dst) if rooted else 0,
               _summing_rounds(cur, dst))


@memo(Scope.TYPE)
def _summing_rounds(cur: ShardingType, dst: ShardingType) -> int:
    """The rounds of summing ``k > 1`` partials and spreading the sum (``_pending_sum_rounds``),
    from the types' atoms alone: ``k - 1`` into the root, then ``ceil(log2 targets)``."""
    us, ud = unreduced_atoms(cur), unreduced_atoms(dst)
    k = math.prod(a.size for a in us - ud)
    if k == 1:
        return 0
    sharded = {a for d in dims_atoms(dst) for a in d}
    targets = cur.mesh.size // math.prod(a.size for a in sharded | ud)
    return k - 1 + (targets - 1).bit_length()


def _bytes_floor(cur: ShardingType, dst: ShardingType, recv: float, cm: CostModel,
                 sampled: bool = False) -> tuple[tuple[float, float], int]:
    """The floor of a pending-sum exchange ``cur -> dst`` that receives at least ``recv`` bytes
    per device on average, read off no per-device table, and its rounds: its busiest device
    receives at least that mean, one cell a round, and it sums partials in ``_summing_rounds``;
    or it runs as one all-to-all of ``recv`` (as ``_any_exchange_floor``, of which this is a
    lower edition). Under a time objective the bytes alone hardly order prefixes: time leads the
    key. The rounds are at most ``_exchange_rounds_floor``'s (each term is one of theirs or below
    it), so they give an ops floor at every tier of ``_by_floor``."""
    cell = math.prod(cell_shape(cur, dst)) * cur.itemsize
    rounds = max(math.ceil(recv / cell * TIME_SLACK), _summing_rounds(cur, dst),
                 sampled_provider_cells(cur, dst) if sampled else 0)
    return (recv, _or_one_all_to_all(cur, recv, _rounds_time_floor(cur, rounds, cell, cm), cm)), rounds


class _Best:
    """The best plan so far that reaches ``dst`` within the memory bound."""

    def __init__(self, src: ShardingType, dst: ShardingType, keep_slower: bool = False) -> None:
        self.dst = dst
        self.keep_slower = keep_slower
        """Keep plans of as many ops as a faster feasible plan (``outranked``): ``ranked`` offers
        them to a measurement, which may rank them first (``redist.autotune``)."""
        self.bound = max(src.local_bytes, dst.local_bytes)
        self.plan: Plan | None = None
        self.feasible: list[Plan] = []
        """Every plan considered that reaches ``dst`` within the bound (for ``choice``'s ties)."""
        self.fastest_by_ops: dict[int, float] = {}
        """Least estimated time of a feasible plan per count of collective ops (``outranked``)."""
        self.threshold: tuple[float, float] = (math.inf, math.inf)
        """The key above which nothing can win (``beaten``): the best plan's, its time widened to
        the tie window; kept here because planning asks thousands of times a pair."""

    def consider(self, p: Plan) -> None:
        if p.dst == self.dst and p.peak_bytes <= self.bound:
            self.feasible.append(p)
            if self.plan is None or p.key() < self.plan.key():
                self.plan = p
                cm = p.cost_model
                self.threshold = cm.order(p.recv_bytes, cm.tie_window(p.time_s))
            t = round(p.time_s, 15)
            if t < self.fastest_by_ops.get(p.n_collectives, math.inf):
                self.fastest_by_ops[p.n_collectives] = t

    def outranked(self, time_floor: float, ops_floor: int, cm: CostModel) -> bool:
        """No plan of at least ``time_floor`` and ``ops_floor`` collective ops can be ``choice``'s,
        though it may fall in the tie window: a feasible plan with fewer ops and no more time, or
        as many ops and less time (unless ``keep_slower``), is tied with it in every window that
        holds it, and ``choice`` prefers fewer ops, then less time. So once a plan is fastest,
        nothing slower with as many ops is kept. Only under a tie tolerance (with none,
        ``beaten`` says all there is)."""
        if not cm.time_first or not cm.tie_tolerance:
            return False
        t = round(time_floor, 15)
        return any((n < ops_floor and s <= t) or (n == ops_floor and s < t and not self.keep_slower)
                   for n, s in self.fastest_by_ops.items())

    def beaten(self, floor: tuple[float, float]) -> bool:
        """No plan above ``floor`` can win: not even a tie (``CostModel.tie_tolerance``)."""
        return floor > self.threshold

    def choice(self, best: Plan) -> Plan:
        """``best`` (the best plan); under a tie tolerance, the tied plan (estimated time within
        the window of the fastest) with the fewest collective ops, then ``Plan.key`` (least time,
        then bytes: a tie on ops is no license to pick a slower plan for its bytes)."""
        window = round(best.cost_model.tie_window(best.time_s), 15)
        if window == round(best.time_s, 15):
            tied = [p for p in self.feasible if p.key() == best.key()]
        else:
            tied = [p for p in self.feasible if round(p.time_s, 15) <= window]
        return min(tied, key=lambda p: (p.n_collectives, p.key()[:2], _crossing_order(p), p.key()))


def _crossing_order(p: Plan) -> tuple[bool, ...]:
    """Per collective step of ``p``, whether it spans processes (``CostModel.cross_axes``, over
    the axes the model prices it by): smaller when such steps come later. Between plans of the
    same collectives, time and bytes (``_permute_last_candidates``' mirrors), the one that crosses
    processes last ran faster across 4 Gloo processes (``tp2d_transpose_2x4``: ~3%, XLA's order),
    and it lets every process start with local work instead of waiting at a rendezvous for the
    slowest peer. Without cross axes every entry is False: no effect."""
    cm = p.cost_model
    if not cm.cross_axes:
        return ()
    ts = p.all_types
    return tuple(cm.crosses_any(s.group_axes() or p2p_axes(ts[i], ts[i + 1]))
                 for i, (s, m) in enumerate(zip(p.steps, p.measures)) if m.collectives)



def _typed_plans(src: ShardingType, dst: ShardingType, cm: CostModel, best: _Best, every: bool = False) -> list[Plan]:
    """Consider every typed candidate; return their distinct proper prefixes (exchange starts).
    Candidates the best plan so far beats are cut short (``_unbeaten``), unless ``every``: ``ranked``
    offers plans outside the tie window too (``redist.autotune`` measures them)."""
    prefixes: list[Plan] = [Plan(src, src, (), (), cm)]  # an exchange straight from the source
    seen: set[tuple[Step, ...]] = {()}
    for steps in dict.fromkeys(_typed_candidates(src, dst, cm)):  # distinct, in order
        full = Plan.build(src, steps, cm)
        head = full if every else _unbeaten(full, best)
        if head is full:
            best.consider(full)
            _step_variants(full, best)
        for k in range(len(head.steps) + 1):
            if (head.types[k - 1] if k else src) == dst:
                continue
            for start in _variant_heads(head.prefix(k)):
                if start.steps in seen:
                    continue
                seen.add(start.steps)
                prefixes.append(start)
    return prefixes


def _unbeaten(full: Plan, best: _Best) -> Plan:
    """``full``, measured step by step, or its first proper prefix that the best plan so far
    beats (or outranks, ``_Best.outranked``) with each step at the least of its own and its
    variants' bytes, times and ops (``_variant_heads`` runs a prefix with one step run another
    way): every longer prefix, and every plan through one, costs at least as much, so their steps
    are not measured and they start no exchange. On the 13-axis ladder rung, timed alone in
    separate processes, it took the mean from about 22.8 to 20.4 ms."""
    cm = full.cost_model
    ts = full.all_types
    recv = time = 0.0
    ops = 0
    for i, s in enumerate(full.steps[:-1]):
        least = [measure_step(s, ts[i], ts[i + 1], cm), *_variant_measures(s, ts[i], ts[i + 1], cm)]
        recv += min(x.recv_bytes for x in least)
        time += min(x.time_s for x in least)
        ops += min(x.collectives for x in least)
        key = cm.order(recv, time)
        if best.beaten(key) or best.outranked(cm.key_time(key), ops, cm):
            return full.prefix(i + 1)  # its measures are memoised (``measure_step``)
    _ = full.measures  # measured once here; every prefix shares them
    return full


def _variant_measures(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> Iterator[StepMeasure]:
    """The measures of ``step``'s variants (``VARIANTS``) between the same types, but those that
    refuse them (``ExchangeAllToAll`` of an irregular exchange)."""
    for v in VARIANTS[type(step)](step):
        try:
            yield measure_step(v, before, after, cm)
        except StepError:
            continue


def _variant_heads(head: Plan) -> Iterator[Plan]:
    """``head`` and each copy of it with one step run another way (``VARIANTS``; same types, so
    only that step is measured again). Each is an exchange start of its own: the floor that
    prunes an exchange after ``head`` counts ``head``'s own time, so it bounds neither the
    exchange after a faster variant of ``head`` nor, therefore, the variants ``_step_variants``
    would try on that exchange (golden ``seed10_rand034``: reduce-scatter + exchange pruned at
    419 us hid all-reduce-slice + exchange at 272 us)."""
    yield head
    for i, step in enumerate(head.steps):
        for v in VARIANTS[type(step)](step):
            yield head.with_step(i, v)


def _exchange_plans(src: ShardingType, dst: ShardingType, cm: CostModel, prefixes: list[Plan], best: _Best) -> None:
    """An ``Exchange`` to ``dst`` after each prefix, pruned by floors, cheapest first: any plan
    receives at least the source's lower bound, and an exchange costs at least one latency; then
    the exchange's own optimistic (bytes, time), in the order of ``_by_floor``."""
    floor_all = lower_bound_bytes(src, dst)
    ranked = [prefix for prefix in prefixes if _worth_an_exchange(prefix, dst, floor_all, cm, best)]
    for prefix in _by_floor(ranked, dst, cm, best):
        if not _exact_floor_open(prefix, dst, cm, best):
            continue
        new_u = dst.sorted_unreduced() if dst.unreduced != prefix.dst.unreduced else None
        try:
            p = Plan.build(src, prefix.steps + (Exchange(dst.dims, new_u),), cm)
            _ = p.measures
        except StepError:
            continue
        best.consider(p)
        recv = p.recv_bytes - prefix.recv_bytes  # run as one all-to-all it receives no less
        if a2a_offered(src) and not best.beaten(_add(prefix, (recv, _one_all_to_all(prefix.dst, recv, cm)), cm)):
            _step_variants(p, best)


LB_SLACK = 1 - 1e-12
"""``_by_floor``'s middle key is the prefix plus the transfer bound of the rest, shrunk by this
factor: the closed-form floor of a plain exchange is a float mean of the same integers, which may
round a few ulps below the bound."""


def _by_floor(prefixes: list[Plan], dst: ShardingType, cm: CostModel, best: _Best) -> Iterator[Plan]:
    """``prefixes`` in order of their exchange floors (``_any_exchange_floor``; ties in list
    order) until the best plan so far beats the next floor. A heap holds each prefix under the
    cheapest of six keys, each at or below the next: the prefix's own cost, plus (only with
    pending sums, where the floor costs more than the bound) a floor on the transfer bound that
    reads no per-device table (``unreduced_bound_floor``: on 13 axes of 2 it spares 60% of the
    bounds), plus the transfer bound of its exchange (``lower_bound_bytes``), both with the
    rounds that many bytes take at least (``_bytes_floor``: under a time objective time leads
    the key, so a bytes-only key would send every prefix on to the per-device floors), then
    (pending sums only) also the rounds the first or last device must receive
    (``sampled_provider_cells``, no per-device table), plus its exchange floor without, then
    (only with pending sums) with ``rooted_rounds``, which routes a class quotient
    (``redist.exchange_classes``): only prefixes reaching the top pay it. A prefix at the top is
    re-keyed by its next key; one at the top under its floor is at or below every other key,
    hence every other floor, so the order and the stopping point are those of sorting every
    floor, and most floors (and bounds) are never computed: the first exchanges built beat them.
    Each key carries the ops its rounds take at least (``_exchange_ops``), so a prefix is also
    dropped at the first key ``_Best.outranked`` refuses: no later key has less time or fewer ops
    (on the 13-axis rung's slowest pair, 38 prefixes reached the last key before, 11 now)."""
    heap = [(cm.order(p.recv_bytes, p.time_s), i, 0, 0, p) for i, p in enumerate(prefixes)]
    heapq.heapify(heap)
    while heap:
        key, i, tier, ops, prefix = heapq.heappop(heap)
        if best.beaten(key):
            return  # every remaining floor is at or above this key
        if best.outranked(cm.key_time(key), prefix.n_collectives + ops, cm):
            continue  # so is every later tier: no less time, no fewer ops
        pending = bool(prefix.dst.unreduced or dst.unreduced)
        if tier == 5 or (tier == 4 and not pending):
            yield prefix
            continue
        bound = unreduced_bound_floor(prefix.dst, dst) if tier == 0 and pending else None
        if bound is not None or (tier < 3 and pending):
            if bound is not None:
                recv, tier = bound * LB_SLACK, 1
            else:  # the transfer bound, then with the sampled providers' rounds
                recv, tier = lower_bound_bytes(prefix.dst, dst) * LB_SLACK, 3 if tier == 2 else 2
            floor, rounds = _bytes_floor(prefix.dst, dst, recv, cm, sampled=tier == 3)
            ops = _exchange_ops(prefix.dst, rounds)
        else:  # tier 4 (without pending sums the bound's own closed form: no cheaper key), then 5
            tier = 5 if tier == 4 else 4
            floor = _any_exchange_floor(prefix.dst, dst, cm, tier == 5)
            ops = _exchange_ops_floor(prefix.dst, dst, tier == 5)
        heapq.heappush(heap, (_add(prefix, floor, cm), i, tier, ops, prefix))


def _exchange_ops_floor(cur: ShardingType, dst: ShardingType, rooted: bool) -> int:
    """Collective ops an exchange ``cur -> dst`` runs at least: its rounds, or one where it may
    run as one all-to-all (``ExchangeAllToAll``), none where it moves nothing."""
    return _exchange_ops(cur, _exchange_rounds_floor(cur, dst, rooted).rounds)


def _exchange_ops(cur: ShardingType, rounds: int) -> int:
    """Collective ops of an exchange from ``cur`` of at least ``rounds`` rounds: one where it may
    run as one all-to-all (``ExchangeAllToAll``)."""
    return min(rounds, 1) if a2a_offered(cur) else rounds


def _worth_an_exchange(prefix: Plan, dst: ShardingType, floor_all: float, cm: CostModel, best: _Best) -> bool:
    """Whether an exchange after ``prefix`` may still win: the plan receives at least the
    source's transfer bound (``floor_all``), and an exchange that must receive anything runs at
    least one round (``CostModel.least_round``), unless it may run as one all-to-all (``ExchangeAllToAll``,
    whose measured latency may be below a round's). An exchange with nothing to receive has no
    round (a local pass, often cheaper than one): the bound of the rest, memoised, is read only
    where the round decides."""
    def beaten(time_s: float) -> bool:
        return best.beaten(cm.order(max(prefix.recv_bytes, floor_all), time_s))

    if beaten(prefix.time_s):
        return False
    if a2a_offered(prefix.src):
        return True
    lat = cm.least_round(moved_kind("exchange", prefix.dst))[0] * TIME_SLACK
    return not beaten(prefix.time_s + lat) or lower_bound_bytes(prefix.dst, dst) == 0


def _exact_floor_open(prefix: Plan, dst: ShardingType, cm: CostModel, best: _Best) -> bool:
    """With pending sums the floor of an exchange (transfer bound, fewest rounds) is not always
    met, so read its exact bytes and rounds off the routing (``redist.exchange.routing``, no rounds
    built) and skip it if the best plan so far beats that, each round at its least price
    (``CostModel.least_round``) or the whole as one all-to-all, whichever is less. False also when the exchange
    is refused (``check_schedule``)."""
    cur = prefix.dst
    if not (cur.unreduced or dst.unreduced):
        return True  # the closed-form floor is exact already
    try:
        check_schedule(cur, dst)  # what could not be lowered, by its round floor before any routing
        r = routing(cur, dst)
    except StepError:
        return False
    cell_bytes = math.prod(r.cell) * cur.itemsize
    recv = r.cells * cell_bytes / cur.mesh.size  # run as one all-to-all (a variant), no fewer bytes
    time = _or_one_all_to_all(cur, recv, _rounds_time_floor(cur, r.rounds, cell_bytes, cm), cm)
    return not best.beaten(_add(prefix, (recv, time), cm))


Variants = Callable[[Step], tuple[Step, ...]]
VARIANTS: FacetTable[Variants] = FacetTable("variants", "redist.synth.VARIANTS")
"""Other steps with the same typing effect (other ways to run the step), tried on the chosen plan."""


@VARIANTS.register(DynSlice, AllGather, AllToAll, MultiAllToAll, AllReduce, Discard, PadUnreduced, Permute)
def _no_variants(step: Step) -> tuple[Step, ...]:
    return ()


@VARIANTS.register(ReduceScatter, AllReduceSlice)
def _reduce_scatter_variants(step: Step) -> tuple[Step, ...]:
    other = AllReduceSlice if type(step) is ReduceScatter else ReduceScatter
    return (other(step.dim, step.axes),)  # type: ignore[attr-defined]


@VARIANTS.register(Exchange, ExchangeAllToAll)
def _exchange_variants(step: Step) -> tuple[Step, ...]:
    """The same cells in ``ppermute`` rounds or as one all-to-all (``redist.exchange_a2a``)."""
    other = ExchangeAllToAll if type(step) is Exchange else Exchange
    return (other(step.dims, step.unreduced),)  # type: ignore[attr-defined]


def _step_variants(plan: Plan, best: _Best) -> None:
    """Each candidate with one step swapped for a variant: a candidate that loses as written may
    win run another way (``unreduced_to_hidden``: reduce-scatter onto hidden loses to a
    reduce-scatter + exchange, all-reduce + slice onto hidden beats both)."""
    for i, step in enumerate(plan.steps):
        for v in VARIANTS[type(step)](step):
            _consider_variant(best, plan, i, v)


def _consider_variant(best: _Best, plan: Plan, i: int, v: Step) -> None:
    """``plan`` with step ``i`` run as ``v``: where ``v`` types as the step did (a variant does),
    the other steps' types and measures are ``plan``'s own, so only ``v`` is measured. A variant
    may refuse the types it is given (``ExchangeAllToAll`` of an irregular exchange)."""
    ts = plan.all_types
    try:
        if apply_step(v, ts[i]) == ts[i + 1]:
            best.consider(plan.with_step(i, v))
        else:  # pragma: no cover - variants type alike; kept so a new variant cannot go wrong silently
            best.consider(Plan.build(plan.src, plan.steps[:i] + (v,) + plan.steps[i + 1:], plan.cost_model))
    except StepError:
        pass


def _with_variants(plan: Plan, best: _Best) -> None:
    """Swap each step for a variant where that is better under the cost model (same types)."""
    for i, step in enumerate(plan.steps):
        for v in VARIANTS[type(step)](step):
            _consider_variant(best, best.plan or plan, i, v)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was before, after it). Planning
    allocates many short-lived objects, which reference counting frees, and each allocation burst
    may start a collection that walks every live object: the memo tables of a large mesh make
    that tens of milliseconds, charged to whichever plan happened to trigger it. Measured with
    the ladder rungs run in one process (8,192 devices, 13 axes of 2): one pair took 104 ms
    instead of 52 ms, the rung's mean 25.0 ms instead of 20.5 ms."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def synthesize(src: ShardingType, dst: ShardingType, cm: CostModel = DEFAULT_COST_MODEL) -> Plan:
    """The best candidate plan (see the module docstring for the order of preference)."""
    if src == dst:
        return Plan(src, dst, (), (), cm)
    best = _search(src, dst, cm)
    assert best.plan is not None  # _search raises otherwise
    return best.choice(best.plan)


def _search(src: ShardingType, dst: ShardingType, cm: CostModel, every: bool = False) -> _Best:
    best = _Best(src, dst, keep_slower=every)
    with gc_paused():
        _exchange_plans(src, dst, cm, _typed_plans(src, dst, cm, best, every), best)
        if best.plan is None:  # pragma: no cover - the greedy plan or an exchange keeps within it
            raise RedistError(f"no plan within the memory bound for {src} -> {dst}")
        _with_variants(best.plan, best)
    return best


def ranked(src: ShardingType, dst: ShardingType, cm: CostModel, top: int) -> tuple[Plan, ...]:
    """``synthesize``'s plan, then the other plans the search kept that reach ``dst`` within the
    memory bound, by ``Plan.key`` (distinct steps), ``top`` in all: the near-ties a measurement
    may rank better than the model (``redist.autotune``). Under the bytes objective only plans
    receiving as little as the best, so a choice among them keeps the transfer guarantee. Pruned
    candidates are not here: the model could not choose them (``_Best.beaten``, ``_Best.outranked``;
    a plan of as many ops as a faster one is kept, ``keep_slower``)."""
    if src == dst:
        return (Plan(src, dst, (), (), cm),)
    best = _search(src, dst, cm, every=True)
    assert best.plan is not None
    chosen = best.choice(best.plan)
    out = {chosen.steps: chosen}
    for p in sorted(best.feasible, key=Plan.key):
        if len(out) >= top:
            break
        if cm.objective == "bytes" and round(p.recv_bytes, 6) > round(chosen.recv_bytes, 6):
            continue
        out.setdefault(p.steps, p)
    return tuple(out.values())


def _add(prefix: Plan, floor: tuple[float, float], cm: CostModel) -> tuple[float, float]:
    return cm.order(prefix.recv_bytes + floor[0], prefix.time_s + floor[1])


@memo(Scope.TYPE)
def cached_synthesize(src: ShardingType, dst: ShardingType, cm: CostModel) -> Plan:
    return synthesize(src, dst, cm)
