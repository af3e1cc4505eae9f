"""Soundness of the step typing rules over a range of meshes: for a (type, step) instance, every
state meeting the input type becomes, by the step's index-level semantics, a state meeting
``step.apply(type)`` - for all devices, local indices and dimension sizes (``proofs.link``).

``sweep`` covers every mesh of 1-3 axes (named x, y, z) with sizes 1-4 (84 meshes), ranks 1-3 and
every step kind, drawing per (mesh, rank, kind) up to ``per_kind`` valid instances from random
types that use whole axes and, for axes of size 4, their two halves as sub-axes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from proofs.link import DEFAULT_TIMEOUT_MS, prove_link
from redist.errors import StepError
from redist.facets import FacetTable
from redist.steps import (
    ALL_STEPS,
    KINDS,
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
from spmd_types import Axis, Mesh, ShardingType, ShardingTypeError, SubAxis


def all_meshes(max_axes: int = 3, sizes: Sequence[int] = (1, 2, 3, 4)) -> Iterator[Mesh]:
    names = ("x", "y", "z")
    for n in range(1, max_axes + 1):
        for ss in itertools.product(sizes, repeat=n):
            yield Mesh(list(zip(names, ss)))


def _units(mesh: Mesh, rng: random.Random) -> list[Axis]:
    out: list[Axis] = []
    for name, n in mesh.axes:
        if n == 4 and rng.random() < 0.5:
            out += [SubAxis(name, 1, 2), SubAxis(name, 2, 2)]
        else:
            out.append(name)
    return out


def random_type(mesh: Mesh, rank: int, rng: random.Random, dtype: str = "f32") -> ShardingType:
    dims: list[list[Axis]] = [[] for _ in range(rank)]
    unred: list[Axis] = []
    for u in _units(mesh, rng):
        place = rng.randrange(rank + 2)
        if place < rank:
            dims[place].insert(rng.randrange(len(dims[place]) + 1), u)
        elif place == rank:
            unred.append(u)
    return ShardingType((mesh.size,) * rank, dtype, [tuple(d) for d in dims], mesh, unred)


def _unused(t: ShardingType, rng: random.Random) -> list[Axis]:
    used = {a if isinstance(a, str) else a.name for a in t.used_axes()}
    return [u for u in _units(t.mesh, rng) if (u if isinstance(u, str) else u.name) not in used]


def _suffixes(axes: tuple[Axis, ...]) -> list[tuple[Axis, ...]]:
    return [axes[i:] for i in range(len(axes))]


Candidates = Callable[[ShardingType, list[tuple[Axis, ...]], random.Random], list[Step]]
CANDIDATES: FacetTable[Candidates] = FacetTable("soundness candidates", "proofs.soundness.CANDIDATES")
"""Steps of a class that may apply to a type (the typing rule has the last word)."""

_BY_KIND: dict[str, type[Step]] = {cls.kind: cls for cls in ALL_STEPS}


def candidate_steps(t: ShardingType, kind: str, rng: random.Random) -> list[Step]:
    """Steps of ``kind`` that may apply to ``t`` (the typing rule has the last word). The groups of
    unused axes are drawn first for every kind, so each kind sees the same random sequence."""
    free = _unused(t, rng)
    groups = [tuple(p) for n in (1, 2) for p in itertools.permutations(free, n)]
    return CANDIDATES[_BY_KIND[kind]](t, groups, rng)


def _unreduced_groups(t: ShardingType) -> list[tuple[Axis, ...]]:
    unred = list(t.sorted_unreduced())
    return [tuple(p) for n in range(1, len(unred) + 1) for p in itertools.permutations(unred, n)]


@CANDIDATES.register(DynSlice)
def _slices(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [DynSlice(d, s) for d in range(t.rank) for s in free]


@CANDIDATES.register(Discard)
def _discards(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [Discard(s) for s in free]


@CANDIDATES.register(AllGather)
def _gathers(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [AllGather(d, s) for d in range(t.rank) for s in _suffixes(t.dims[d])]


@CANDIDATES.register(PadUnreduced)
def _pads(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [PadUnreduced(d, s) for d in range(t.rank) for s in _suffixes(t.dims[d])]


@CANDIDATES.register(AllToAll)
def _all_to_alls(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    r = t.rank
    return [AllToAll(a, b, s) for a in range(r) for b in range(r) if a != b for s in _suffixes(t.dims[a])]


@CANDIDATES.register(MultiAllToAll)
def _multi_all_to_alls(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    moves = _all_to_alls(t, free, rng)
    return [MultiAllToAll((a, b)) for i, a in enumerate(moves) for b in moves[i + 1:]  # type: ignore[arg-type]
            if a.src_dim != b.src_dim and a.dst_dim != b.dst_dim]  # type: ignore[attr-defined]


@CANDIDATES.register(ReduceScatter)
def _reduce_scatters(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [ReduceScatter(d, s) for d in range(t.rank) for s in _unreduced_groups(t)]


@CANDIDATES.register(AllReduceSlice)
def _all_reduce_slices(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [AllReduceSlice(d, s) for d in range(t.rank) for s in _unreduced_groups(t)]


@CANDIDATES.register(AllReduce)
def _all_reduces(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [AllReduce(s) for s in _unreduced_groups(t)]


def _random_targets(t: ShardingType, rng: random.Random) -> list[ShardingType]:
    out = []
    for _ in range(12):
        t2 = random_type(t.mesh, t.rank, rng, t.dtype)
        if t2 != t:
            out.append(t2)
    return out


@CANDIDATES.register(Permute)
def _permutes(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [Permute(t2.dims) for t2 in _random_targets(t, rng)
            if t2.local_shape == t.local_shape and t2.unreduced == t.unreduced]


@CANDIDATES.register(Exchange)
def _exchanges(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [Exchange(t2.dims, t2.sorted_unreduced()) for t2 in _random_targets(t, rng)]


@CANDIDATES.register(ExchangeAllToAll)
def _exchange_all_to_alls(t: ShardingType, free: list[tuple[Axis, ...]], rng: random.Random) -> list[Step]:
    return [ExchangeAllToAll(t2.dims, t2.sorted_unreduced()) for t2 in _random_targets(t, rng)]


MIN_RANK: dict[str, int] = {"multi_all_to_all": 4}
"""Kinds with no instance below some rank (two moves on four distinct dimensions, over two axes):
swept once per mesh at that rank; a one-axis mesh has none."""


def instances(mesh: Mesh, rank: int, kind: str, count: int, seed: int = 0,
              tries: int = 60) -> list[tuple[Step, ShardingType, ShardingType]]:
    """Up to ``count`` distinct valid ``(step, before, after)`` of ``kind`` (deterministic)."""
    rng = random.Random(f"{seed}-{mesh}-{rank}-{kind}")
    seen: set[tuple[Step, ShardingType]] = set()
    out = []
    for _ in range(tries):
        try:
            t = random_type(mesh, rank, rng)
        except ShardingTypeError:
            continue
        cands = candidate_steps(t, kind, rng)
        rng.shuffle(cands)
        for s in cands:
            if (s, t) in seen:
                continue
            try:
                after = s.apply(t)
            except StepError:
                continue
            seen.add((s, t))
            out.append((s, t, after))
            break
        if len(out) >= count:
            break
    return out


@dataclass
class SweepResult:
    proved: int = 0
    undecided: list[str] = field(default_factory=list)
    refuted: list[str] = field(default_factory=list)
    known_bug: list[str] = field(default_factory=list)  # refuted, but sound if replicas agree (exchange.py)
    by_kind: dict[str, int] = field(default_factory=dict)
    meshes: int = 0
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)  # (mesh, rank, kind) with no valid instance

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {self.by_kind.get(k, 0)}" for k in KINDS)
        return (f"{self.proved} step instances proved sound on {self.meshes} meshes ({kinds}); "
                f"undecided {len(self.undecided)}, refuted {len(self.refuted)} (of which {len(self.known_bug)} "
                f"sound only if replicas hold equal partials); solver {self.seconds:.1f} s; "
                f"{len(self.missing)} (mesh, rank, kind) without a valid instance")


def sweep(meshes: Sequence[Mesh] | None = None, ranks: Sequence[int] = (1, 2, 3), per_kind: int = 1,
          kinds: Sequence[str] = KINDS, timeout_ms: int = DEFAULT_TIMEOUT_MS, seed: int = 0) -> SweepResult:
    res = SweepResult()
    ms = list(all_meshes()) if meshes is None else list(meshes)
    res.meshes = len(ms)
    for mesh in ms:
        for rank in ranks:
            for kind in kinds:
                if rank < MIN_RANK.get(kind, 0) and rank != max(ranks):
                    continue  # swept once, at its minimum rank
                rank = max(rank, MIN_RANK.get(kind, rank))  # noqa: PLW2901
                got = instances(mesh, rank, kind, per_kind, seed)
                if not got and not (kind == "all_to_all" and rank == 1) and not (
                        kind in MIN_RANK and len(mesh.names) < 2):
                    res.missing.append(f"{mesh} rank {rank} {kind}")
                for step, before, after in got:
                    o = prove_link(step, before, after, timeout_ms)
                    res.seconds += o.seconds
                    what = f"{step} on {before} -> {after} (mesh {mesh})"
                    if o.status == "proved":
                        res.proved += 1
                        res.by_kind[kind] = res.by_kind.get(kind, 0) + 1
                    elif o.status == "undecided":
                        res.undecided.append(f"{what}: {o.reason}")
                    else:
                        res.refuted.append(f"{what}: {o.reason} {o.counterexample}")
                        if prove_link(step, before, after, timeout_ms, replicas_agree=True).status == "proved":
                            res.known_bug.append(what)
    return res


__all__ = ["CANDIDATES", "KINDS", "SweepResult", "all_meshes", "candidate_steps", "instances", "random_type", "sweep"]
