"""Bipartite edge colouring: the rounds of a point-to-point schedule.

Each edge is one message ``(sender, receiver)``; a colour is one ``ppermute`` round, in which a
device may send at most one message and receive at most one. Senders and receivers are separate
vertex sets (a device sending to itself is one edge between its two copies), so the graph is
bipartite and Konig's theorem gives exactly ``max degree`` colours: the fewest rounds possible.

Schedules on a mesh are nearly symmetric: the messages of one *offset* (the receiver's mesh
coordinates minus the sender's, per axis, modulo the axis size) form a matching, since the offset
fixes the receiver given the sender and the sender given the receiver. ``colour_classes`` takes
the largest ``max degree`` offset classes as rounds at once (vectorised) and inserts only the
messages left over with alternating-path flips, so its cost grows with the irregular part of the
graph, not with the number of messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Edge = tuple[int, int]
"""``(sender, receiver)``: device ids; parallel edges (the same pair twice) are allowed."""

_At = tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]]
"""Per side (0 senders, 1 receivers), per device: colour -> index of the edge holding it."""


def max_degree(edges: Sequence[Edge]) -> int:
    """Most messages any device sends, or receives: the number of rounds of an optimal colouring."""
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    for s, d in edges:
        sent[s] = sent.get(s, 0) + 1
        received[d] = received.get(d, 0) + 1
    return max([*sent.values(), *received.values()], default=0)


def edge_colours(edges: Sequence[Edge], n_col: int | None = None) -> list[int]:
    """A colour in ``range(max_degree(edges))`` per edge, no two edges at a vertex alike.

    Edges are coloured in order, each with the smallest colour ``a`` free at its sender; when
    ``a`` is busy at the receiver, the receiver's path alternating ``a`` and ``b`` (the smallest
    colour free there) is flipped first. The path cannot reach the sender in a bipartite graph,
    so the flip frees ``a`` at the receiver and keeps every other vertex proper. ``n_col``:
    ``max_degree(edges)`` when the caller has it already.
    """
    if n_col is None:
        n_col = max_degree(edges)
    colour = [-1] * len(edges)
    at: _At = ({}, {})
    for e in range(len(edges)):
        _insert(edges, colour, at, e, n_col)
    return colour


def _insert(edges: Sequence[Edge], colour: list[int], at: _At, e: int, n_col: int) -> None:
    """Colour edge ``e`` into the proper partial colouring ``colour`` (``at`` its index)."""
    s, d = edges[e]
    cs, cd = at[0].setdefault(s, {}), at[1].setdefault(d, {})
    a = next(c for c in range(n_col) if c not in cs)
    if a in cd:
        b = next(c for c in range(n_col) if c not in cd)
        _flip_path(edges, colour, at, d, a, b)
    colour[e] = a
    cs[a] = e
    cd[a] = e


def _flip_path(edges: Sequence[Edge], colour: list[int], at: _At, receiver: int, a: int, b: int) -> None:
    """Swap colours ``a`` and ``b`` on the path from ``receiver`` (where ``b`` is free) whose
    edges alternate ``a``, ``b``, ``a``, ... In a proper colouring that path is simple, so the
    swap is one exchange of the ``a`` and ``b`` entries at each of its vertices."""
    side, x, c, o = 1, receiver, a, b  # at x: leave by colour c, arrived by colour o
    while True:
        held = at[side][x]
        out, came = held.pop(c, None), held.pop(o, None)
        if came is not None:
            held[c] = came
        if out is None:
            return
        held[o] = out
        colour[out] = o
        side ^= 1
        x = edges[out][side]
        c, o = o, c


def _degree(src: np.ndarray, dst: np.ndarray) -> int:
    if not len(src):
        return 0
    return int(max(np.bincount(src).max(), np.bincount(dst).max()))


def offset_classes(src: np.ndarray, dst: np.ndarray, torus: Sequence[int] | None = None) -> np.ndarray:
    """A class id per edge such that each class is a matching: the receiver's offset from the
    sender (per axis of ``torus``, a mesh shape over row-major device ids, modulo its size; the
    plain id difference without one) and the edge's rank among its parallel copies."""
    if not len(src):
        return np.zeros(0, dtype=np.int64)
    if torus:
        shape = tuple(int(n) for n in torus)
        cs, cd = np.unravel_index(src, shape), np.unravel_index(dst, shape)
        key = np.ravel_multi_index(tuple((b - a) % n for a, b, n in zip(cs, cd, shape)), shape)
    else:
        key = dst - src
    pair = src.astype(np.int64) * (int(dst.max()) + 1) + dst
    order = np.argsort(pair, kind="stable")
    ps = pair[order]
    first = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    copy = np.empty(len(src), dtype=np.int64)
    copy[order] = np.arange(len(src)) - np.repeat(first, np.diff(np.r_[first, len(src)]))
    return np.unique(np.stack([key, copy], axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def colours(src: np.ndarray, dst: np.ndarray, torus: Sequence[int] | None = None) -> np.ndarray:
    """A colour in ``range(max degree)`` per edge (arrays of senders and receivers), no two edges
    at a vertex alike: the largest offset classes first, each one colour (largest first, the
    earliest edge on ties), then the remaining edges by alternating-path flips."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    n_col = _degree(src, dst)
    if not n_col:
        return np.zeros(0, dtype=np.int64)
    cls = offset_classes(src, dst, torus)
    sizes = np.bincount(cls)
    first = np.full(len(sizes), len(src), dtype=np.int64)
    np.minimum.at(first, cls, np.arange(len(src)))
    rank = np.empty(len(sizes), dtype=np.int64)
    rank[np.lexsort((first, -sizes))] = np.arange(len(sizes))
    colour = rank[cls]
    left = np.flatnonzero(colour >= n_col)
    if not len(left):
        return colour
    colour[left] = -1
    return np.array(_complete(src, dst, colour, left, n_col), dtype=np.int64)


def _complete(src: np.ndarray, dst: np.ndarray, colour: np.ndarray, left: np.ndarray, n_col: int) -> list[int]:
    """Insert the uncoloured edges ``left`` into the proper partial colouring ``colour``."""
    edges = list(zip(src.tolist(), dst.tolist()))
    out = colour.tolist()
    at: _At = ({}, {})
    for e, c in enumerate(out):
        if c >= 0:
            at[0].setdefault(edges[e][0], {})[c] = e
            at[1].setdefault(edges[e][1], {})[c] = e
    for e in left.tolist():
        _insert(edges, out, at, e, n_col)
    return out


def colour_classes(edges: Sequence[Edge], torus: Sequence[int] | None = None) -> list[list[int]]:
    """Indices of the edges of each round, in edge order; ``max_degree(edges)`` rounds (see
    ``colours``; ``torus``: the mesh shape, whose offsets make the best initial classes)."""
    arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
    col = colours(arr[:, 0], arr[:, 1], torus)
    order = np.argsort(col, kind="stable")
    bounds = np.flatnonzero(np.diff(col[order])) + 1
    return [c.tolist() for c in np.split(order, bounds)] if len(order) else []
