"""NumPy simulator: runs a plan on a list of per-device arrays. The reference executor for tests.

It follows the step definitions literally (groups, chunk order, sums) and shares nothing with the
JAX executor except the point-to-point schedules, so agreement between the two is evidence. Each
step class has its rule in the ``SIMULATE`` facet table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from redist.atoms import atoms_of_axes, atoms_size, unreduced_atoms
from redist.exchange import schedule
from redist.facets import FacetTable
from redist.groups import atoms_index, members, replica_index
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
from spmd_types import ShardingType


def _chunk(x: np.ndarray, dim: int, n: int, i: int) -> np.ndarray:
    size = x.shape[dim] // n
    return np.take(x, np.arange(i * size, (i + 1) * size), axis=dim)


Simulate = Callable[[Any, ShardingType, ShardingType, Sequence[np.ndarray]], list[np.ndarray]]
SIMULATE: FacetTable[Simulate] = FacetTable("simulate", "redist.simulate.SIMULATE")


def run_step(step: Step, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return SIMULATE[type(step)](step, before, after, xs)


class _Group(NamedTuple):
    """A step's group: its size, each device's index in it and each device's members in order."""

    size: int
    position: np.ndarray
    members: list[list[int]]


def _group(step: Step, t: ShardingType) -> _Group:
    atoms = atoms_of_axes(t.mesh, step.group_axes())
    return _Group(atoms_size(atoms), atoms_index(t.mesh, atoms), members(t.mesh, atoms))


@SIMULATE.register(Permute, Exchange, ExchangeAllToAll)
def _p2p(step: Step, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    sch = schedule(before, after)
    n_dev = before.mesh.size
    out = [np.zeros(after.local_shape, dtype=xs[0].dtype) for _ in range(n_dev)]
    for r in sch.local_copies + sch.rounds:
        pairs = r.pairs if r.pairs else [(d, d) for d in range(n_dev) if r.recv_valid[d]]
        for s, d in pairs:
            src = tuple(slice(o, o + c) for o, c in zip(r.send_offset[s], sch.cell))
            dst = tuple(slice(o, o + c) for o, c in zip(r.recv_offset[d], sch.cell))
            out[d][dst] += (out[s] if r.from_output else xs[s])[src]
    return out


@SIMULATE.register(DynSlice)
def _slice(step: DynSlice, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [_chunk(x, step.dim, g.size, int(g.position[v])) for v, x in enumerate(xs)]


@SIMULATE.register(Discard)
def _discard(step: Step, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [x if g.position[v] == 0 else np.zeros_like(x) for v, x in enumerate(xs)]


@SIMULATE.register(PadUnreduced)
def _pad(step: PadUnreduced, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [np.concatenate([x if j == g.position[v] else np.zeros_like(x) for j in range(g.size)], axis=step.dim)
            for v, x in enumerate(xs)]


@SIMULATE.register(AllGather)
def _gather(step: AllGather, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [np.concatenate([xs[w] for w in g.members[v]], axis=step.dim) for v in range(len(xs))]


@SIMULATE.register(AllToAll)
def _all_to_all(step: AllToAll, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [np.concatenate([_chunk(xs[w], step.dst_dim, g.size, int(g.position[v])) for w in g.members[v]],
                           axis=step.src_dim) for v in range(len(xs))]


@SIMULATE.register(MultiAllToAll)
def _multi_all_to_all(step: MultiAllToAll, before: ShardingType, after: ShardingType,
                      xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Literally: member ``w`` sends ``v`` the chunk of each move's destination dimension at ``v``'s
    index in that move's group; ``v`` places it at ``w``'s index along the move's source dimension."""
    mesh = before.mesh
    moves = [(m, atoms_of_axes(mesh, m.axes)) for m in step.moves]
    union = tuple(a for _, atoms in moves for a in atoms)
    pos = [atoms_index(mesh, atoms) for _, atoms in moves]
    out = []
    for v in range(len(xs)):
        y = np.zeros(after.local_shape, dtype=xs[0].dtype)
        for w in members(mesh, union)[v]:
            piece = xs[w]
            for (m, atoms), p in zip(moves, pos):
                piece = _chunk(piece, m.dst_dim, atoms_size(atoms), int(p[v]))
            box = [slice(None)] * y.ndim
            for (m, _), p in zip(moves, pos):
                e = piece.shape[m.src_dim]
                box[m.src_dim] = slice(int(p[w]) * e, (int(p[w]) + 1) * e)
            y[tuple(box)] = piece
        out.append(y)
    return out


def _sum(xs: Sequence[np.ndarray], group: list[int]) -> np.ndarray:
    out = np.array(xs[group[0]])
    for w in group[1:]:
        out = out + xs[w]
    return out


@SIMULATE.register(AllReduce)
def _all_reduce(step: Step, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [_sum(xs, g.members[v]) for v in range(len(xs))]


@SIMULATE.register(ReduceScatter, AllReduceSlice)
def _reduce_scatter(step: ReduceScatter, before: ShardingType, after: ShardingType,
                    xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    g = _group(step, before)
    return [_chunk(_sum(xs, g.members[v]), step.dim, g.size, int(g.position[v])) for v in range(len(xs))]


def simulate(steps: Sequence[Step], types: Sequence[ShardingType], xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``steps``; ``types`` are the source type followed by the type after each step."""
    cur = list(xs)
    for i, step in enumerate(steps):
        cur = run_step(step, types[i], types[i + 1], cur)
    return cur


def scatter(x: np.ndarray, t: ShardingType, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Per-device locals of global ``x`` laid out as ``t``.

    Unreduced axes get random partials, and *each replica* (each coordinate of the axes the type
    does not use) gets its own decomposition: the type only promises that every replica's partials
    sum to the value, so executors must never mix partials of different replicas."""
    mesh = t.mesh
    red_atoms = tuple(sorted(unreduced_atoms(t)))
    red = atoms_index(mesh, red_atoms)
    k = int(red.max()) + 1 if red_atoms else 1
    rep = replica_index(t)
    rng = rng or np.random.default_rng(0)
    decomps: dict[int, list[np.ndarray]] = {}
    for f in sorted(set(rep.tolist())):
        parts = [x]
        if k > 1:
            parts = [rng.integers(-50, 50, size=x.shape).astype(x.dtype) for _ in range(k - 1)]
            parts.append(x - sum(parts))
        decomps[f] = parts
    out = []
    for v in range(mesh.size):
        box = tuple(slice(a, b) for a, b in t.block(v))
        out.append(np.array(decomps[int(rep[v])][int(red[v])][box]))
    return out


def check(xs: Sequence[np.ndarray], t: ShardingType, x: np.ndarray) -> None:
    """Assert the locals hold ``x`` as ``t`` says: each device's block, summed over unreduced axes."""
    mesh = t.mesh
    atoms = tuple(a for ax in t.sorted_unreduced() for a in atoms_of_axes(mesh, (ax,)))
    groups = members(mesh, atoms)
    for v in range(mesh.size):
        box = tuple(slice(a, b) for a, b in t.block(v))
        got = sum(xs[w] for w in groups[v]) if atoms else xs[v]
        want = x[box]
        if np.shape(got) != want.shape or not np.array_equal(got, want):
            raise AssertionError(f"device {v} {mesh.coords(v)} holds the wrong values for {t}")
