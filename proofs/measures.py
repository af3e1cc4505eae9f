"""Symbolic byte counts of a plan: local sizes, received bytes and the transfer lower bound.

With global sizes ``n_d = L_d * m_d`` every quantity of docs/design.md section 4 is a rational constant
times ``itemsize * m_0 * ... * m_{r-1}`` (each local size, overlap, cell and schedule cell scales
with every ``m_d``). This module computes those constants *independently of* ``redist.measure`` and
``redist.bounds`` (from the step definitions, the schedule's real pairs and the bound's counting
rule), and ``proofs.certificate`` cross-checks them against the plan's own numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from proofs.model import shards, size_of, spans_of
from redist import exchange
from redist.atoms import primes
from redist.facets import FacetTable
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Mesh, ShardingType


def local_cells(t: ShardingType, L: Sequence[int]) -> int:
    """Local size of ``t`` in units of ``m_0*...*m_{r-1}`` elements."""
    return math.prod(L[d] // shards(t, d) for d in range(t.rank))


RecvCells = Callable[[Any, ShardingType, ShardingType, Sequence[int]], Fraction]
RECV: FacetTable[RecvCells] = FacetTable("symbolic recv", "proofs.measures.RECV")


def step_recv_cells(step: Step, before: ShardingType, after: ShardingType, L: Sequence[int]) -> Fraction:
    """Elements received per device (average) by ``step``, in units of ``prod m_d``.

    Ring algorithms over a group of ``p``: all-gather ``(p-1)/p`` of its output, reduce-scatter and
    all-to-all ``(p-1)/p`` of their input, all-reduce ``2(p-1)/p`` of its input; permutes and
    exchanges: the cells of the schedule's real (source != destination) pairs."""
    return RECV[type(step)](step, before, after, L)


@RECV.register(DynSlice, Discard, PadUnreduced)
def _local(step: Step, before: ShardingType, after: ShardingType, L: Sequence[int]) -> Fraction:
    return Fraction(0)


def _ring(phases: int, of_output: bool) -> RecvCells:
    def ring(step: Step, before: ShardingType, after: ShardingType, L: Sequence[int]) -> Fraction:
        p = size_of(spans_of(before.mesh, step.group_axes()))
        return phases * Fraction(p - 1, p) * local_cells(after if of_output else before, L)

    return ring


RECV.register(AllGather)(_ring(1, of_output=True))
RECV.register(ReduceScatter, AllToAll, MultiAllToAll)(_ring(1, of_output=False))
RECV.register(AllReduce, AllReduceSlice)(_ring(2, of_output=False))


@RECV.register(Permute, Exchange)
def _p2p(step: Step, before: ShardingType, after: ShardingType, L: Sequence[int]) -> Fraction:
    sch = exchange.schedule(before, after)
    unit = [n // c for n, c in zip(before.shape, L)]
    cell = math.prod(c // u for c, u in zip(sch.cell, unit))
    pairs = sum(sum(1 for s, d in r.pairs if s != d) for r in sch.rounds)
    return Fraction(pairs * cell, before.mesh.size)


# -- the lower bound, derived on the cell grid ----------------------------------------------------------
def _prime_digits(mesh: Mesh, axes: Sequence[object]) -> set[tuple[str, int, int]]:
    """The prime factors ``(name, pre, p)`` of the given (sub-)axes."""
    out = set()
    for a in axes:
        name, pre, size = mesh.span(a)  # type: ignore[arg-type]
        for p in primes(size):
            out.add((name, pre, p))
            pre *= p
    return out


def _digit(mesh: Mesh, coords: dict[str, int], f: tuple[str, int, int]) -> int:
    # Deliberately not spmd_types.mesh.subaxis_digit: the proofs re-derive the index math.
    name, pre, size = f
    n = mesh.axis_size(name)
    return (coords[name] // (n // (pre * size))) % size


def _block(t: ShardingType, coords: dict[str, int], d: int) -> int:
    b = 0
    for a in t.dims[d]:
        b = b * t.mesh.axis_size(a) + t.mesh.axis_coord(a, coords)
    return b


def lower_bound_cells(src: ShardingType, dst: ShardingType, L: Sequence[int]) -> Fraction:
    """The transfer lower bound per device (average), in units of ``prod m_d`` elements.

    Without unreduced axes: ``|dst block| - |dst block & src block|`` per device. With unreduced
    axes, the rule of docs/design.md section 4 / ``redist.bounds`` per element of each cell: the source
    holds ``k`` partials (one per coordinate of its unreduced axes); a destination group (devices
    differing only in the destination's unreduced axes) *covers* the partials its members hold;
    with ``I`` incomplete groups the bound is ``I`` if a group is complete, else
    ``min_G (k - cover(G)) + I - 1``.
    """
    mesh = src.mesh
    rank = src.rank
    devs = [mesh.coords(v) for v in range(mesh.size)]
    if not src.unreduced and not dst.unreduced:
        total = Fraction(0)
        es = [L[d] // shards(src, d) for d in range(rank)]
        ed = [L[d] // shards(dst, d) for d in range(rank)]
        for c in devs:
            ov = 1
            for d in range(rank):
                s0, d0 = _block(src, c, d) * es[d], _block(dst, c, d) * ed[d]
                ov *= max(0, min(s0 + es[d], d0 + ed[d]) - max(s0, d0))
            total += math.prod(ed) - ov
        return total / mesh.size
    us = sorted(_prime_digits(mesh, tuple(src.unreduced)))
    ud = sorted(_prime_digits(mesh, tuple(dst.unreduced)))
    k = math.prod(f[2] for f in us)
    counts = [math.lcm(shards(src, d), shards(dst, d)) for d in range(rank)]
    cell = math.prod(L[d] // counts[d] for d in range(rank))
    partial = [tuple(_digit(mesh, c, f) for f in us) for c in devs]
    gkey = []  # coordinates with the destination's unreduced digits zeroed
    for c in devs:
        cc = dict(c)
        for f in ud:
            name, pre, size = f
            cc[name] -= _digit(mesh, c, f) * (mesh.axis_size(name) // (pre * size))
        gkey.append(tuple(cc[n] for n in mesh.names))

    def holds(t: ShardingType, c: dict[str, int], cellidx: tuple[int, ...]) -> bool:
        return all(cellidx[d] // (counts[d] // shards(t, d)) == _block(t, c, d) for d in range(rank))

    total_msgs = 0
    for cellidx in itertools.product(*(range(n) for n in counts)):
        cover: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
        for v, c in enumerate(devs):
            if holds(dst, c, cellidx):
                cover.setdefault(gkey[v], set())
        if not cover:
            continue
        for v, c in enumerate(devs):
            if gkey[v] in cover and holds(src, c, cellidx):
                cover[gkey[v]].add(partial[v])
        incomplete = sum(1 for g in cover.values() if len(g) < k)
        if incomplete < len(cover):
            total_msgs += incomplete
        else:
            total_msgs += min(k - len(g) for g in cover.values()) + incomplete - 1
    return Fraction(total_msgs * cell, mesh.size)


def shares_unreduced(src: ShardingType, dst: ShardingType) -> bool:
    """Whether the types share an unreduced factor: there the bound is documented not tight."""
    return bool(_prime_digits(src.mesh, tuple(src.unreduced)) & _prime_digits(src.mesh, tuple(dst.unreduced)))


__all__ = ["RECV", "local_cells", "lower_bound_cells", "shares_unreduced", "step_recv_cells"]
