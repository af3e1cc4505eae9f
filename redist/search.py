"""Exhaustive reference search: Dijkstra over types, used by tests to show the synthesizer optimal.

States are types (within the memory bound); edges are every typed step on every (ordered group
of) whole mesh axes, a ``Permute`` to every type of the same local shape, and an ``Exchange``
straight to the destination. Costs are compared lexicographically as (received bytes, estimated
time, collectives): the synthesizer's order of preference. It is exponential and meant for small
meshes only; on meshes whose axes have prime sizes (the test meshes) no sub-axis is ever useful to
a typed step, so searching whole axes is complete for them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.enumerate import all_types
from redist.errors import StepError
from redist.measure import measure
from redist.plan import Plan
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

Cost = tuple[float, float, int]


def _groups(axes: list[str], max_len: int = 3) -> Iterator[tuple[str, ...]]:
    for n in range(1, min(max_len, len(axes)) + 1):
        yield from itertools.permutations(axes, n)


def neighbours(t: ShardingType, dst: ShardingType, same_shape: dict) -> Iterator[Step]:  # type: ignore[type-arg]
    mesh = t.mesh
    used = {a for axes in t.dims for a in axes} | set(t.unreduced)
    free = [n for n in mesh.names if n not in used]
    unred = sorted(t.unreduced, key=str)
    for d in range(t.rank):
        for g in _groups(free):
            yield DynSlice(d, g)
        axes = t.dims[d]
        for n in range(1, len(axes) + 1):
            suffix = axes[len(axes) - n:]
            yield AllGather(d, suffix)
            yield PadUnreduced(d, suffix)
            for e in range(t.rank):
                if e != d:
                    yield AllToAll(d, e, suffix)
        for g in _groups([str(a) for a in unred]):
            yield ReduceScatter(d, g)
    for g in _groups([str(a) for a in unred]):
        if list(g) == sorted(g):
            yield AllReduce(g)
    for g in _groups(free):
        if list(g) == sorted(g):
            yield Discard(g)
    for other in same_shape.get((t.local_shape, t.unreduced), ()):
        if other != t:
            yield Permute(other.dims)
    yield Exchange(dst.dims, dst.sorted_unreduced() if dst.unreduced != t.unreduced else None)


def search(src: ShardingType, dst: ShardingType, cm: CostModel = DEFAULT_COST_MODEL) -> Plan:
    """The optimal plan over the edges above (lexicographic cost), within the memory bound."""
    bound = max(src.local_bytes, dst.local_bytes)
    same_shape: dict = {}  # type: ignore[type-arg]
    for t in all_types(src.mesh, src.shape, src.dtype):
        same_shape.setdefault((t.local_shape, t.unreduced), []).append(t)
    best: dict[ShardingType, Cost] = {src: (0.0, 0.0, 0)}
    prev: dict[ShardingType, tuple[ShardingType, Step]] = {}
    heap: list[tuple[Cost, int, ShardingType]] = [((0.0, 0.0, 0), 0, src)]
    tick = 0
    while heap:
        cost, _, t = heapq.heappop(heap)
        if cost > best.get(t, cost):
            continue
        if t == dst:
            break
        for step in neighbours(t, dst, same_shape):
            try:
                nxt = step.apply(t)
                if nxt.local_bytes > bound or nxt == t:
                    continue
                m = measure(step, t, nxt, cm)
            except StepError:
                continue
            nc: Cost = (
                round(cost[0] + m.recv_bytes, 6),
                round(cost[1] + m.time_s, 15),
                cost[2] + _collectives(step, m.rounds),
            )
            if nc < best.get(nxt, (float("inf"), float("inf"), 1 << 30)):
                best[nxt] = nc
                prev[nxt] = (t, step)
                tick += 1
                heapq.heappush(heap, (nc, tick, nxt))
    steps: list[Step] = []
    cur = dst
    while cur != src:
        cur, step = prev[cur]
        steps.append(step)
    return Plan.build(src, tuple(reversed(steps)), cm)


def _collectives(step: Step, rounds: int) -> int:
    """As ``Plan.n_collectives`` counts them: one per typed collective, one per p2p round."""
    if not step.is_collective or rounds == 0:
        return 0
    return rounds if step.kind in ("exchange", "permute") else 1


def plan_key(p: Plan) -> tuple[float, float, int]:
    """The comparison key shared by the synthesizer and the search."""
    return (round(p.recv_bytes, 6), round(p.time_s, 15), p.n_collectives)
