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
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from spmd_types.layout import flat_index

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


def degree(src: np.ndarray, dst: np.ndarray) -> int:
    """``max_degree`` of arrays of senders and receivers."""
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
        key = flat_index([(b - a) % n for a, b, n in zip(cs, cd, shape)], shape)  # (64-axis meshes too)
    else:
        key = dst - src
    pair = src.astype(np.int64) * (int(dst.max()) + 1) + dst
    order = np.argsort(pair, kind="stable")
    ps = pair[order]
    first = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    copy = np.empty(len(src), dtype=np.int64)
    copy[order] = np.arange(len(src)) - np.repeat(first, np.diff(np.r_[first, len(src)]))
    key = (key - int(key.min())) * (int(copy.max()) + 1) + copy
    return np.unique(key, return_inverse=True)[1].reshape(-1)


def colours(src: np.ndarray, dst: np.ndarray, torus: Sequence[int] | None = None) -> np.ndarray:
    """A colour in ``range(max degree)`` per edge (arrays of senders and receivers), no two edges
    at a vertex alike. When the largest ``max degree`` offset classes cover every edge they are the
    colours (largest first, the earliest edge on ties); up to ``MAX_FLIPPED`` edges outside them are
    inserted by alternating-path flips; beyond that the whole graph is coloured by ``_colour``."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    n_col = degree(src, dst)
    if not n_col:
        return np.zeros(0, dtype=np.int64)
    colour = _offset_colours(src, dst, torus)
    left = np.flatnonzero(colour >= n_col)
    if not len(left):
        return colour
    if len(left) > MAX_FLIPPED:
        return _colour(src, dst, n_col)
    colour[left] = -1
    return np.array(_complete(src, dst, colour, left, n_col), dtype=np.int64)


MAX_FLIPPED = 256
"""Leftover edges (outside the offset classes) still inserted by alternating-path flips, which keep
the offset classes as rounds; more are coloured by Euler splits instead (NumPy passes)."""


def _colour(src: np.ndarray, dst: np.ndarray, n_col: int) -> np.ndarray:
    """``colours`` by Euler splits alone, for a graph of max degree ``n_col``: an even degree is
    halved (``_euler_halves``) and each half coloured the same way, both at once (the half is
    folded into the vertex ids); an odd one is split into halves of degree ``(n_col + 1) / 2``,
    and the smallest of the ``n_col + 1`` colours that gives is re-coloured (``_drop_smallest``)."""
    if n_col == 1:
        return np.zeros(len(src), dtype=np.int64)
    half = _euler_halves(src, dst)
    n = int(max(src.max(), dst.max())) + 1
    sub = _colour(half * n + src, half * n + dst, (n_col + 1) // 2)
    colour = half * ((n_col + 1) // 2) + sub
    if n_col % 2 == 0:
        return colour
    return _drop_smallest(src, dst, colour, n_col)


def _offset_colours(src: np.ndarray, dst: np.ndarray, torus: Sequence[int] | None) -> np.ndarray:
    """The offset classes ranked largest first (the earliest edge on ties)."""
    cls = offset_classes(src, dst, torus)
    sizes = np.bincount(cls)
    first = np.full(len(sizes), len(src), dtype=np.int64)
    np.minimum.at(first, cls, np.arange(len(src)))
    rank = np.empty(len(sizes), dtype=np.int64)
    rank[np.lexsort((first, -sizes))] = np.arange(len(sizes))
    return rank[cls]


def _euler_halves(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """0 or 1 per edge such that every vertex of degree ``d`` has at most ``ceil(d / 2)`` edges of
    each: pair the edges at every sender and at every receiver (consecutive in id order); the pairs
    chain into paths and even cycles, coloured alternately. The alternation is read off the
    components of the double cover (edge ``e`` as ``(e, 0)`` and ``(e, 1)``, each pair joining
    opposite copies), one C pass for the whole graph: an even cycle lifts to two components, and
    ``e`` takes 0 where ``(e, 0)`` lies in the lower-numbered one."""
    n = len(src)
    links = [_pairs(src), _pairs(dst)]
    a = np.concatenate([p[0] for p in links])
    b = np.concatenate([p[1] for p in links])
    rows = np.concatenate([2 * a, 2 * a + 1])
    cols = np.concatenate([2 * b + 1, 2 * b])
    graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(2 * n, 2 * n))
    label = connected_components(graph, directed=False)[1]
    return (label[0::2] > label[1::2]).astype(np.int64)


def _pairs(vertex: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges paired at their vertex: the 1st with the 2nd, the 3rd with the 4th, ... in edge order."""
    order = np.argsort(vertex, kind="stable")
    v = vertex[order]
    rank = np.arange(len(v)) - np.searchsorted(v, v)
    first = np.flatnonzero((rank % 2 == 0)[:-1] & (v[1:] == v[:-1]))
    return order[first], order[first + 1]


def _drop_smallest(src: np.ndarray, dst: np.ndarray, colour: np.ndarray, n_col: int) -> np.ndarray:
    """A proper colouring with ``n_col + 1`` colours made one of ``n_col``: the smallest class is
    renamed last and its edges re-coloured. That class is a matching, so every edge of it whose
    ends share a free colour takes the lowest such colour at once (no two of them share a vertex);
    the others are inserted by alternating-path flips."""
    small = int(np.argmin(np.bincount(colour, minlength=n_col + 1)))
    colour = colour.copy()
    is_small, is_last = colour == small, colour == n_col
    colour[is_small], colour[is_last] = n_col, small
    left = np.flatnonzero(colour == n_col)
    rest = colour < n_col
    busy = [np.zeros((int(v.max()) + 1, n_col), dtype=bool) for v in (src, dst)]
    busy[0][src[rest], colour[rest]] = True
    busy[1][dst[rest], colour[rest]] = True
    common = ~busy[0][src[left]] & ~busy[1][dst[left]]
    ok = common.any(axis=1)
    colour[left[ok]] = common[ok].argmax(axis=1)
    left = left[~ok]
    if not len(left):
        return colour
    colour[left] = -1
    return np.array(_complete(src, dst, colour, left, n_col), dtype=np.int64)


def _complete(src: np.ndarray, dst: np.ndarray, colour: np.ndarray, left: np.ndarray, n_col: int) -> list[int]:
    """Insert the uncoloured edges ``left`` into the proper partial colouring ``colour``: per side a
    flat table ``vertex * n_col + colour -> edge`` (-1 free) over the vertices present, built in
    one NumPy pass; Python walks only the inserted edges and their alternating paths."""
    verts, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    if len(verts) * n_col > _MAX_TABLE:
        return _complete_sparse(src, dst, colour, left, n_col)
    ends = inv.reshape(2, -1)
    table = np.full((2, len(verts) * n_col), -1, dtype=np.int64)
    done = np.flatnonzero(colour >= 0)
    for side in (0, 1):
        table[side, ends[side, done] * n_col + colour[done]] = done
    at = (table[0].tolist(), table[1].tolist())
    end = (ends[0].tolist(), ends[1].tolist())
    out = colour.tolist()
    for e in left.tolist():
        _insert_flat(end, out, at, e, n_col)
    return out


_MAX_TABLE = 1 << 24
"""Largest ``vertices x colours`` table ``_complete`` builds; sparser graphs use per-vertex dicts."""

_Flat = tuple[list[int], list[int]]


def _insert_flat(end: _Flat, colour: list[int], at: _Flat, e: int, n_col: int) -> None:
    """``_insert`` on the flat tables of ``_complete`` (the flip as in ``_flip_path``)."""
    bs, bd = end[0][e] * n_col, end[1][e] * n_col
    a = next(c for c in range(n_col) if at[0][bs + c] < 0)
    if at[1][bd + a] >= 0:
        b = next(c for c in range(n_col) if at[1][bd + c] < 0)
        side, x, c, o = 1, end[1][e], a, b
        while True:
            base = x * n_col
            out, came = at[side][base + c], at[side][base + o]
            at[side][base + c], at[side][base + o] = came, out
            if out < 0:
                break
            colour[out] = o
            side ^= 1
            x = end[side][out]
            c, o = o, c
    colour[e] = a
    at[0][bs + a] = e
    at[1][bd + a] = e


def _complete_sparse(src: np.ndarray, dst: np.ndarray, colour: np.ndarray, left: np.ndarray,
                     n_col: int) -> list[int]:
    """``_complete`` with per-vertex dicts, for graphs too sparse for a dense table."""
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
