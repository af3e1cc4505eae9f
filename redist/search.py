"""Exhaustive reference search: Dijkstra over types, used by tests to show the synthesizer optimal.

States are types (within the memory bound); edges are every typed step on every (ordered group
of) whole mesh axes, a ``Permute`` to every type of the same local shape, and an ``Exchange``
straight to the destination. Costs are compared lexicographically as (received bytes, estimated
time, collectives) under the default objective (``Plan.key``; the time objective swaps the first
two): the synthesizer's order of preference. Each step class says which of its steps to try in the
``NEIGHBOURS`` facet table. It is exponential and meant for small
meshes only; on meshes whose axes have prime sizes (the test meshes) no sub-axis is ever useful to
a typed step, so searching whole axes is complete for them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import NamedTuple

from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.enumerate import all_types
from redist.errors import StepError
from redist.facets import FacetTable
from redist.measure import StepMeasure, measure
from redist.plan import Plan
from redist.steps import (
    ALL_STEPS,
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
from spmd_types import Axis, ShardingType

Cost = tuple[float, float, int]


class Context(NamedTuple):
    """What neighbour rules need besides the current type."""

    dst: ShardingType
    same_shape: dict[tuple[tuple[int, ...], frozenset[Axis]], list[ShardingType]]
    """Every type of the move's shape, by (local shape, unreduced axes): the permute targets."""


def _groups(axes: list[str], max_len: int = 3) -> Iterator[tuple[str, ...]]:
    for n in range(1, min(max_len, len(axes)) + 1):
        yield from itertools.permutations(axes, n)


def _free(t: ShardingType) -> list[str]:
    used = {a for axes in t.dims for a in axes} | set(t.unreduced)
    return [n for n in t.mesh.names if n not in used]


def _unreduced(t: ShardingType) -> list[str]:
    return [str(a) for a in sorted(t.unreduced, key=str)]


def _suffixes(t: ShardingType, d: int) -> Iterator[tuple[Axis, ...]]:
    axes = t.dims[d]
    for n in range(1, len(axes) + 1):
        yield axes[len(axes) - n:]


Neighbours = Callable[[ShardingType, Context], Iterator[Step]]
NEIGHBOURS: FacetTable[Neighbours] = FacetTable("search neighbours", "redist.search.NEIGHBOURS")
"""Every step of a class the reference search tries from a type."""


@NEIGHBOURS.register(DynSlice)
def _slices(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (DynSlice(d, g) for d in range(t.rank) for g in _groups(_free(t)))


@NEIGHBOURS.register(AllGather)
def _gathers(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (AllGather(d, s) for d in range(t.rank) for s in _suffixes(t, d))


@NEIGHBOURS.register(PadUnreduced)
def _pads(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (PadUnreduced(d, s) for d in range(t.rank) for s in _suffixes(t, d))


@NEIGHBOURS.register(AllToAll)
def _all_to_alls(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (AllToAll(d, e, s) for d in range(t.rank) for s in _suffixes(t, d) for e in range(t.rank) if e != d)


@NEIGHBOURS.register(MultiAllToAll)
def _multi_all_to_alls(t: ShardingType, ctx: Context) -> Iterator[Step]:
    """Pairs of all-to-all moves on distinct source and destination dimensions (typing rejects overlaps)."""
    moves = list(_all_to_alls(t, ctx))
    return (MultiAllToAll((a, b)) for i, a in enumerate(moves) for b in moves[i + 1:]  # type: ignore[arg-type]
            if a.src_dim != b.src_dim and a.dst_dim != b.dst_dim)  # type: ignore[attr-defined]


@NEIGHBOURS.register(ReduceScatter)
def _reduce_scatters(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (ReduceScatter(d, g) for d in range(t.rank) for g in _groups(_unreduced(t)))


@NEIGHBOURS.register(AllReduceSlice)
def _all_reduce_slices(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (AllReduceSlice(d, g) for d in range(t.rank) for g in _groups(_unreduced(t)))


@NEIGHBOURS.register(AllReduce)
def _all_reduces(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (AllReduce(g) for g in _groups(_unreduced(t)) if list(g) == sorted(g))


@NEIGHBOURS.register(Discard)
def _discards(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (Discard(g) for g in _groups(_free(t)) if list(g) == sorted(g))


@NEIGHBOURS.register(Permute)
def _permutes(t: ShardingType, ctx: Context) -> Iterator[Step]:
    return (Permute(o.dims) for o in ctx.same_shape.get((t.local_shape, t.unreduced), ()) if o != t)


@NEIGHBOURS.register(Exchange)
def _exchanges(t: ShardingType, ctx: Context) -> Iterator[Step]:
    yield Exchange(ctx.dst.dims, ctx.dst.sorted_unreduced() if ctx.dst.unreduced != t.unreduced else None)


@NEIGHBOURS.register(ExchangeAllToAll)
def _exchange_all_to_alls(t: ShardingType, ctx: Context) -> Iterator[Step]:
    """The exchange to the destination run as one all-to-all (refused when irregular)."""
    yield ExchangeAllToAll(ctx.dst.dims, ctx.dst.sorted_unreduced() if ctx.dst.unreduced != t.unreduced else None)


def neighbours(t: ShardingType, ctx: Context) -> Iterator[Step]:
    """Every step the search tries from ``t``: each class's rule, in ``ALL_STEPS`` order."""
    for cls in ALL_STEPS:
        yield from NEIGHBOURS[cls](t, ctx)


def search(src: ShardingType, dst: ShardingType, cm: CostModel = DEFAULT_COST_MODEL) -> Plan:
    """The optimal plan over the edges above (``Plan.key`` order), within the memory bound."""
    bound = max(src.local_bytes, dst.local_bytes)
    ctx = Context(dst, {})
    for t in all_types(src.mesh, src.shape, src.dtype):
        ctx.same_shape.setdefault((t.local_shape, t.unreduced), []).append(t)
    spent: dict[ShardingType, tuple[float, float, int]] = {src: (0.0, 0.0, 0)}  # bytes, time, collectives
    best: dict[ShardingType, Cost] = {src: (0.0, 0.0, 0)}
    prev: dict[ShardingType, tuple[ShardingType, Step]] = {}
    heap: list[tuple[Cost, int, ShardingType]] = [((0.0, 0.0, 0), 0, src)]
    tick = 0
    while heap:
        cost, _, t = heapq.heappop(heap)
        if cost > best[t]:
            continue
        if t == dst:
            break
        for step, nxt, m in _edges(t, ctx, cm, bound):
            b, s, c = spent[t]
            new = (b + m.recv_bytes, s + m.time_s, c + m.collectives)
            nc: Cost = (*cm.order(new[0], new[1]), new[2])
            if nxt not in best or nc < best[nxt]:
                best[nxt], spent[nxt], prev[nxt] = nc, new, (t, step)
                tick += 1
                heapq.heappush(heap, (nc, tick, nxt))
    steps: list[Step] = []
    cur = dst
    while cur != src:
        cur, step = prev[cur]
        steps.append(step)
    return Plan.build(src, tuple(reversed(steps)), cm)


def _edges(t: ShardingType, ctx: Context, cm: CostModel, bound: int) -> Iterator[tuple[Step, ShardingType, StepMeasure]]:
    """Typed neighbours of ``t`` within the memory bound, with their measures."""
    for step in neighbours(t, ctx):
        try:
            nxt = step.apply(t)
            if nxt.local_bytes > bound or nxt == t:
                continue
            yield step, nxt, measure(step, t, nxt, cm)
        except StepError:
            continue


def plan_key(p: Plan) -> Cost:
    """The cost the search minimises: the first three fields of ``Plan.key``."""
    k = p.key()
    return (k[0], k[1], k[2])
