"""The least point-to-point program per cell, by exhaustive search, against the transfer bound.

The bound (``redist.bounds``) holds for every program of point-to-point messages; where our plans
stay above it (pairs whose types share an unreduced axis, docs/design.md 13.2) the question is
whether the bound is loose or our programs are. This answers it on small meshes: per cell of the
cell grid, an iterative-deepening search over programs whose messages each carry a sum of
partials the sender can form (coefficients in {0, 1}, or {-1, 0, 1} with ``--signed``), until
every destination group can split the whole sum among its members. Messages that do not depend on
each other are tried in one canonical order only (a later message whose sender is not the earlier
one's receiver could run first), so the search is exact for that alphabet.

``python -m benchmarks.studies.bound_optimum`` classifies the pairs of ``benchmarks.proofs_bench`` on
``{x=2,y=2,z=2}`` whose bytes plan is above the bound: *exact* (a program attains the bound: the
slack is ours) or *bound slack* (the least program is above the bound).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from benchmarks.harness import suite_parser
from proofs.model import shards
from spmd_types import Mesh, ShardingType

Digit = tuple[str, int, int]  # (axis name, size of the more-major part, size): one prime digit
Coords = dict[str, int]


class CellProblem(NamedTuple):
    """One cell: ``k`` partials, the source holders' partial and group, the destination groups."""

    k: int
    partial: dict[int, int]           # source holder (device) -> its partial
    group_of: dict[int, tuple]        # every device -> its destination group key
    groups: dict[tuple, list[int]]    # destination groups holding the cell -> members


def digit(mesh: Mesh, c: Coords, sp: Digit) -> int:
    name, pre, size = sp
    return (c[name] // (mesh.axis_size(name) // (pre * size))) % size


def block(t: ShardingType, c: Coords, d: int) -> int:
    b = 0
    for a in t.dims[d]:
        b = b * t.mesh.axis_size(a) + digit(t.mesh, c, t.mesh.span(a))
    return b


def prime_digits(mesh: Mesh, axes: Iterable[object]) -> list[Digit]:
    out = set()
    for a in axes:
        name, pre, size = mesh.span(a)  # type: ignore[arg-type]
        p = 2
        while size > 1:
            while size % p == 0:
                out.add((name, pre, p))
                pre, size = pre * p, size // p
            p += 1
    return sorted(out)


def cell_counts(src: ShardingType, dst: ShardingType) -> list[int]:
    return [math.lcm(shards(src, d), shards(dst, d)) for d in range(src.rank)]


def cell_problems(src: ShardingType, dst: ShardingType) -> Iterator[CellProblem]:
    """Per cell (device by device, no closed form: the reference the bound is checked against)."""
    mesh, rank = src.mesh, src.rank
    devs = [mesh.coords(v) for v in range(mesh.size)]
    us, ud = prime_digits(mesh, src.unreduced), prime_digits(mesh, dst.unreduced)
    counts = cell_counts(src, dst)
    index = {p: i for i, p in enumerate(itertools.product(*(range(f[2]) for f in us)))}

    def gkey(c: Coords) -> tuple:
        cc = dict(c)
        for f in ud:
            cc[f[0]] -= digit(mesh, c, f) * (mesh.axis_size(f[0]) // (f[1] * f[2]))
        return tuple(cc[n] for n in mesh.names)

    def holds(t: ShardingType, c: Coords, q: tuple[int, ...]) -> bool:
        return all(q[d] // (counts[d] // shards(t, d)) == block(t, c, d) for d in range(rank))

    group_of = {v: gkey(c) for v, c in enumerate(devs)}
    for q in itertools.product(*(range(n) for n in counts)):
        groups: dict[tuple, list[int]] = {}
        for v, c in enumerate(devs):
            if holds(dst, c, q):
                groups.setdefault(group_of[v], []).append(v)
        partial = {v: index[tuple(digit(mesh, c, f) for f in us)] for v, c in enumerate(devs) if holds(src, c, q)}
        yield CellProblem(len(index), partial, group_of, groups)


def _rank(vs: list[np.ndarray]) -> int:
    return int(np.linalg.matrix_rank(np.array(vs))) if vs else 0


def _in_span(v: np.ndarray, vs: list[np.ndarray]) -> bool:
    return bool(vs) and _rank([*vs, v]) == _rank(vs)


def min_messages(p: CellProblem, limit: int, signed: bool = False) -> int | None:
    """The least number of messages that leaves every destination group able to split the whole
    sum among its members (the all-ones vector in the span of what they know), or ``None`` above
    ``limit``."""
    n = 1 + max([*p.partial, *(v for g in p.groups.values() for v in g)])
    coef = (-1.0, 0.0, 1.0) if signed else (0.0, 1.0)
    alphabet = [np.array(b) for b in itertools.product(coef, repeat=p.k) if any(b)]
    ones = np.ones(p.k)
    groups = list(p.groups.values())

    def unsatisfied(known: list[list[np.ndarray]]) -> int:
        return sum(not _in_span(ones, [v for d in g for v in known[d]]) for g in groups)

    def search(known: list[list[np.ndarray]], depth: int, last: tuple[int, int, int] | None) -> bool:
        u = unsatisfied(known)
        if u == 0 or u > depth:  # each unsatisfied group still needs a message into it
            return u == 0
        for s in range(n):
            sendable = [(i, v) for i, v in enumerate(alphabet) if _in_span(v, known[s])]
            for r, (i, v) in itertools.product(range(n), sendable):
                key = (s, r, i)
                if r == s or (last is not None and s != last[1] and key <= last) or _in_span(v, known[r]):
                    continue
                known[r].append(v)
                found = search(known, depth - 1, key)
                known[r].pop()
                if found:
                    return True
        return False

    start = [[np.eye(p.k)[p.partial[d]]] if d in p.partial else [] for d in range(n)]
    return next((d for d in range(limit + 1) if search([list(x) for x in start], d, None)), None)


def least_program_bytes(src: ShardingType, dst: ShardingType, limit: int = 10, signed: bool = False) -> float | None:
    """Received bytes per device of the least program, cell by cell (``None``: a cell above ``limit``)."""
    counts = cell_counts(src, dst)
    elements = math.prod(n // c for n, c in zip(src.shape, counts))
    total = 0
    for p in cell_problems(src, dst):
        m = min_messages(p, limit, signed)
        if m is None:
            return None
        total += m
    return total * elements * src.itemsize / src.mesh.size


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.proofs_bench import exhaustive_pairs
    from redist import CostModel
    from redist.bounds import lower_bound_bytes
    from redist.synth import synthesize

    ap = suite_parser("studies.bound_optimum", __doc__)
    ap.add_argument("--signed", action="store_true", help="messages may also subtract partials")
    a = ap.parse_args(argv)
    by = CostModel(objective="bytes")
    rows = {"exact": 0, "bound slack": 0}
    for s, d in exhaustive_pairs(meshes=({"x": 2, "y": 2, "z": 2},)):
        if not set(s.unreduced) & set(d.unreduced):
            continue
        plan, bound = synthesize(s, d, by).recv_bytes, lower_bound_bytes(s, d)
        if plan <= bound * (1 + 1e-9):
            continue
        least = least_program_bytes(s, d, signed=a.signed)
        kind = "exact" if least == bound else "bound slack"
        rows[kind] += 1
        print(f"{kind:12s} {s} -> {d}: plan {plan:g} B, least program {least:g} B, bound {bound:g} B", flush=True)
    print(f"above the bound: {sum(rows.values())}; " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    print(f"command: python -m benchmarks.studies.bound_optimum{' --signed' if a.signed else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
