"""NumPy simulator: runs a plan on a list of per-device arrays. The reference executor for tests.

It follows the step definitions literally (groups, chunk order, sums) and shares nothing with the
JAX executor except the point-to-point schedules, so agreement between the two is evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from redist.atoms import atoms_of, atoms_of_axes, dims_atoms, unreduced_atoms
from redist.exchange import schedule
from redist.groups import atoms_index, members
from redist.steps import (
    AllGather,
    AllReduce,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import ShardingType


def _chunk(x: np.ndarray, dim: int, n: int, i: int) -> np.ndarray:
    size = x.shape[dim] // n
    return np.take(x, np.arange(i * size, (i + 1) * size), axis=dim)


def run_step(step: Step, before: ShardingType, after: ShardingType, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    mesh = before.mesh
    n_dev = mesh.size
    if isinstance(step, (Permute, Exchange)):
        sch = schedule(before, after)
        out = [np.zeros(after.local_shape, dtype=xs[0].dtype) for _ in range(n_dev)]
        cell = sch.cell
        for r in sch.local_copies + sch.rounds:
            pairs = r.pairs if r.pairs else [(d, d) for d in range(n_dev) if r.recv_valid[d]]
            for s, d in pairs:
                src = tuple(slice(o, o + c) for o, c in zip(r.send_offset[s], cell))
                dst = tuple(slice(o, o + c) for o, c in zip(r.recv_offset[d], cell))
                out[d][dst] += (out[s] if r.from_output else xs[s])[src]
        return out
    atoms = atoms_of_axes(mesh, step.group_axes())
    g = 1
    for a in atoms:
        g *= a[2]
    idx = atoms_index(mesh, atoms)
    if isinstance(step, DynSlice):
        return [_chunk(xs[v], step.dim, g, int(idx[v])) for v in range(n_dev)]
    if isinstance(step, Discard):
        return [xs[v] if idx[v] == 0 else np.zeros_like(xs[v]) for v in range(n_dev)]
    if isinstance(step, PadUnreduced):
        out = []
        for v in range(n_dev):
            parts = [xs[v] if j == idx[v] else np.zeros_like(xs[v]) for j in range(g)]
            out.append(np.concatenate(parts, axis=step.dim))
        return out
    groups = members(mesh, atoms)
    if isinstance(step, AllGather):
        return [np.concatenate([xs[w] for w in groups[v]], axis=step.dim) for v in range(n_dev)]
    if isinstance(step, AllToAll):
        return [
            np.concatenate([_chunk(xs[w], step.dst_dim, g, int(idx[v])) for w in groups[v]], axis=step.src_dim)
            for v in range(n_dev)
        ]
    if isinstance(step, AllReduce):
        return [sum(xs[w] for w in groups[v]) for v in range(n_dev)]  # type: ignore[misc]
    if isinstance(step, ReduceScatter):
        return [_chunk(sum(xs[w] for w in groups[v]), step.dim, g, int(idx[v])) for v in range(n_dev)]  # type: ignore[arg-type]
    raise TypeError(f"the simulator has no rule for {step!r}")


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
    used = set(red_atoms) | {a for d in dims_atoms(t) for a in d}
    free = tuple(a for name, _ in mesh.axes for a in atoms_of(mesh, name) if a not in used)
    rep = atoms_index(mesh, free) if k > 1 else np.zeros(mesh.size, dtype=np.int64)
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
