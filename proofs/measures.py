"""Symbolic byte counts of a plan: local sizes, received bytes and the transfer lower bound.

With global sizes ``n_d = L_d * m_d`` every quantity of docs/design.md section 4 is a rational constant
times ``itemsize * m_0 * ... * m_{r-1}`` (each local size, overlap, cell and schedule cell scales
with every ``m_d``). This module computes those constants *independently of* ``redist.measure`` and
``redist.bounds`` (from the step definitions, the schedule's real pairs and the bound's counting
rule), and ``proofs.certificate`` cross-checks them against the plan's own numbers.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from proofs.errors import VerificationError
from proofs.model import shards, size_of, spans_of
from proofs.tables import blocks, coord_table, device_ids, mixed_of, with_mixed
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
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Mesh, ShardingType
from spmd_types import axis_name as mesh_axis


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


@RECV.register(ExchangeAllToAll)
def _p2p_all_to_all(step: Step, before: ShardingType, after: ShardingType, L: Sequence[int]) -> Fraction:
    """Every device receives the busiest (sender, receiver) pair's cell count from each other
    member of its group (the mesh axes any message crosses): padding travels too."""
    sch = exchange.schedule(before, after)
    unit = [n // c for n, c in zip(before.shape, L)]
    cell = math.prod(c // u for c, u in zip(sch.cell, unit))
    pairs = collections.Counter(p for r in sch.rounds for p in r.pairs)
    for r in sch.local_copies:
        pairs.update((int(d), int(d)) for d in np.flatnonzero(r.recv_valid))
    coords = np.array(list(np.ndindex(*(n for _, n in before.mesh.axes))), dtype=np.int64)
    used = {mesh_axis(a) for axes in (*before.dims, tuple(before.unreduced)) for a in axes}
    crossed = {i for s, d in pairs if s != d for i in np.flatnonzero(coords[s] != coords[d]).tolist()
               if before.mesh.axes[i][0] in used}  # replicas of an old block are interchangeable
    g = math.prod(before.mesh.axes[i][1] for i in crossed)
    return Fraction((g - 1) * max(pairs.values()) * cell)


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


def _plain_bound(src: ShardingType, dst: ShardingType, L: Sequence[int], coords: np.ndarray) -> Fraction:
    """No unreduced axes: ``|dst block| - |dst block & src block|`` per device, summed."""
    es = np.array([L[d] // shards(src, d) for d in range(src.rank)], dtype=np.int64)
    ed = np.array([L[d] // shards(dst, d) for d in range(src.rank)], dtype=np.int64)
    s0, d0 = blocks(src, coords) * es, blocks(dst, coords) * ed
    overlap = np.clip(np.minimum(s0 + es, d0 + ed) - np.maximum(s0, d0), 0, None)
    ov = [math.prod(row) for row in overlap.tolist()]  # exact ints
    return Fraction(len(ov) * math.prod(ed.tolist()) - sum(ov), src.mesh.size)


class _CellClasses(NamedTuple):
    """The cells of the grid by the (dst block, src block) holding them, flat, and how many cells
    each class has: every cell of one class meets the same devices."""

    dst_block: np.ndarray  # [classes] flat dst block index
    src_block: np.ndarray  # [classes] flat src block index
    cells: list[int]       # [classes] cells in the class (exact ints)


def _cell_classes(src: ShardingType, dst: ShardingType, counts: Sequence[int]) -> _CellClasses:
    per_dim = []
    for d, n in enumerate(counts):
        c = np.arange(n, dtype=np.int64)
        pairs = np.stack([c // (n // shards(dst, d)), c // (n // shards(src, d))], axis=1)
        uniq, mult = np.unique(pairs, axis=0, return_counts=True)
        per_dim.append((uniq, mult))
    grid = np.meshgrid(*[np.arange(len(m)) for _, m in per_dim], indexing="ij")
    pick = [g.reshape(-1) for g in grid] if per_dim else []
    n_cls = len(pick[0]) if pick else 1
    dflat, sflat = np.zeros(n_cls, dtype=np.int64), np.zeros(n_cls, dtype=np.int64)
    cells = [1] * n_cls
    for d, ((uniq, mult), i) in enumerate(zip(per_dim, pick)):
        dflat = dflat * shards(dst, d) + uniq[i, 0]
        sflat = sflat * shards(src, d) + uniq[i, 1]
        cells = [a * b for a, b in zip(cells, mult[i].tolist())]
    return _CellClasses(dflat, sflat, cells)


def _flat(b: np.ndarray, t: ShardingType) -> np.ndarray:
    out = np.zeros(len(b), dtype=np.int64)
    for d in range(t.rank):
        out = out * shards(t, d) + b[:, d]
    return out


def _pending_bound(src: ShardingType, dst: ShardingType, L: Sequence[int], coords: np.ndarray) -> Fraction:
    """The unreduced rule (``lower_bound_cells``), per class of cells and per destination group:
    NumPy passes over devices, groups and cell classes, no loop over (cell, device)."""
    mesh, rank = src.mesh, src.rank
    us = sorted(_prime_digits(mesh, tuple(src.unreduced)))
    ud = sorted(_prime_digits(mesh, tuple(dst.unreduced)))
    k = math.prod(f[2] for f in us)
    counts = [math.lcm(shards(src, d), shards(dst, d)) for d in range(rank)]
    cell = math.prod(L[d] // counts[d] for d in range(rank))
    partial = mixed_of(mesh, coords, us)
    gkey = device_ids(mesh, with_mixed(mesh, coords, ud, 0))  # dst's unreduced digits zeroed
    gid = np.unique(gkey, return_inverse=True)[1].reshape(-1)
    n_groups = int(gid.max()) + 1
    dblk, sblk = _flat(blocks(dst, coords), dst), _flat(blocks(src, coords), src)
    gdst = np.zeros(n_groups, dtype=np.int64)
    gdst[gid] = dblk
    if (gdst[gid] != dblk).any():
        raise VerificationError("lower_bound", f"a group of {dst} (devices differing only in its unreduced axes) "
                                f"spans two blocks", {"types": f"{src} -> {dst}"})
    n_sb = math.prod(shards(src, d) for d in range(rank))
    if n_groups * n_sb * k >= 1 << 62:
        raise VerificationError("lower_bound", f"{src} -> {dst}: {n_groups} groups x {n_sb} source blocks x {k} "
                                f"partials exceed the int64 codes of the vectorised count", {"types": f"{src} -> {dst}"})
    # cover[g, sb]: distinct partials the members of group g hold of src block sb; confined[g, sb]:
    # those of them that no device outside g holds
    held, in_g = np.unique((gid * n_sb + sblk) * k + partial, return_counts=True)
    copies, everywhere = np.unique(sblk * k + partial, return_counts=True)
    whole = in_g == everywhere[np.searchsorted(copies, held % (n_sb * k))]
    cov_key, cov_n = np.unique(held // k, return_counts=True)
    conf_n = np.bincount(np.searchsorted(cov_key, held // k), weights=whole, minlength=len(cov_key)).astype(np.int64)
    cls = _cell_classes(src, dst, counts)
    order = np.argsort(gdst, kind="stable")
    n_dblk = math.prod(shards(dst, d) for d in range(rank))
    per_db = np.bincount(gdst, minlength=n_dblk)
    first = np.cumsum(per_db) - per_db
    size = per_db[cls.dst_block]  # groups present per class
    row_cls = np.repeat(np.arange(len(size)), size)
    row_g = order[first[cls.dst_block][row_cls] + np.arange(len(row_cls)) - np.repeat(np.cumsum(size) - size, size)]
    key = row_g * n_sb + cls.src_block[row_cls]
    pos = np.clip(np.searchsorted(cov_key, key), 0, max(len(cov_key) - 1, 0))
    found = cov_key[pos] == key if len(cov_key) else np.zeros(len(key), dtype=bool)
    cover = np.where(found, cov_n[pos] if len(cov_key) else 0, 0)
    confined = np.where(found, conf_n[pos] if len(cov_key) else 0, 0)
    incomplete = np.bincount(row_cls, weights=cover < k, minlength=len(size)).astype(np.int64)
    # per incomplete group G: its gap, plus (with another incomplete group) the sends its confined
    # partials need beyond one
    extra = np.where(incomplete[row_cls] >= 2, np.maximum(confined - 1, 0), 0)
    gap = np.full(len(size), k, dtype=np.int64)
    nz = np.flatnonzero(size)
    if len(nz):  # rows are contiguous per class: the least cost of each class's incomplete groups
        gap[nz] = np.minimum.reduceat(np.where(cover < k, k - cover + extra, k), (np.cumsum(size) - size)[nz])
    msgs = np.where(incomplete == 0, 0, gap + incomplete - 1)
    return Fraction(sum(a * b for a, b in zip(cls.cells, msgs.tolist())) * cell, mesh.size)


def lower_bound_cells(src: ShardingType, dst: ShardingType, L: Sequence[int]) -> Fraction:
    """The transfer lower bound per device (average), in units of ``prod m_d`` elements.

    Without unreduced axes: ``|dst block| - |dst block & src block|`` per device. With unreduced
    axes, the rule of docs/design.md section 4 / ``redist.bounds`` per element of each cell: the source
    holds ``k`` partials (one per coordinate of its unreduced axes); a destination group (devices
    differing only in the destination's unreduced axes) *covers* the partials its members hold;
    with ``I`` incomplete groups the bound is 0 if ``I == 0``, else
    ``min over incomplete G of (k - cover(G) + e(G)) + I - 1``, where ``e(G)`` (with ``I >= 2``)
    is one less than the partials only members of ``G`` hold, counted here from the devices.

    Counted with NumPy over the devices and over classes of cells (the cells one pair of a
    destination block and a source block share meet the same devices), never per (cell, device).
    """
    coords = coord_table(src.mesh)
    if not src.unreduced and not dst.unreduced:
        return _plain_bound(src, dst, L, coords)
    return _pending_bound(src, dst, L, coords)


def shares_unreduced(src: ShardingType, dst: ShardingType) -> bool:
    """Whether the types share an unreduced factor: there the bound is documented not tight."""
    return bool(_prime_digits(src.mesh, tuple(src.unreduced)) & _prime_digits(src.mesh, tuple(dst.unreduced)))


__all__ = ["RECV", "local_cells", "lower_bound_cells", "shares_unreduced", "step_recv_cells"]
