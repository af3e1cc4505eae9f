"""Bipartite edge colouring: the rounds of a point-to-point schedule.

Each edge is one message ``(sender, receiver)``; a colour is one ``ppermute`` round, in which a
device may send at most one message and receive at most one. Senders and receivers are separate
vertex sets (a device sending to itself is one edge between its two copies), so the graph is
bipartite and Konig's theorem gives exactly ``max degree`` colours: the fewest rounds possible.
"""

from __future__ import annotations

from collections.abc import Sequence

Edge = tuple[int, int]
"""``(sender, receiver)``: device ids; parallel edges (the same pair twice) are allowed."""


def max_degree(edges: Sequence[Edge]) -> int:
    """Most messages any device sends, or receives: the number of rounds of an optimal colouring."""
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    for s, d in edges:
        sent[s] = sent.get(s, 0) + 1
        received[d] = received.get(d, 0) + 1
    return max([*sent.values(), *received.values()], default=0)


def edge_colours(edges: Sequence[Edge]) -> list[int]:
    """A colour in ``range(max_degree(edges))`` per edge, no two edges at a vertex alike.

    Edges are coloured in order, each with the smallest colour ``a`` free at its sender; when
    ``a`` is busy at the receiver, the receiver's path alternating ``a`` and ``b`` (the smallest
    colour free there) is flipped first. The path cannot reach the sender in a bipartite graph,
    so the flip frees ``a`` at the receiver and keeps every other vertex proper.
    """
    n_col = max_degree(edges)
    # per side (0 senders, 1 receivers), per device: colour -> index of the edge holding it
    at: tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]] = ({}, {})
    colour = [-1] * len(edges)
    for e, (s, d) in enumerate(edges):
        cs, cd = at[0].setdefault(s, {}), at[1].setdefault(d, {})
        a = next(c for c in range(n_col) if c not in cs)
        if a in cd:
            b = next(c for c in range(n_col) if c not in cd)
            _flip(edges, colour, at, _alternating_path(edges, at, d, a, b), a, b)
        colour[e] = a
        cs[a] = e
        cd[a] = e
    return colour


def _alternating_path(
    edges: Sequence[Edge], at: tuple[dict[int, dict[int, int]], ...], receiver: int, a: int, b: int
) -> list[int]:
    """Edges of the path from ``receiver`` whose colours alternate ``a``, ``b``, ``a``, ..."""
    path: list[int] = []
    side, x, c = 1, receiver, a
    while c in at[side].get(x, {}):
        f = at[side][x][c]
        path.append(f)
        side = 1 - side
        x = edges[f][side]
        c = b if c == a else a
    return path


def _flip(
    edges: Sequence[Edge], colour: list[int], at: tuple[dict[int, dict[int, int]], ...],
    path: list[int], a: int, b: int,
) -> None:
    """Swap colours ``a`` and ``b`` along ``path`` (all removed first, then all re-added)."""
    for f in path:
        for side in (0, 1):
            held = at[side][edges[f][side]]
            if held.get(colour[f]) == f:
                del held[colour[f]]
    for f in path:
        colour[f] = b if colour[f] == a else a
        for side in (0, 1):
            at[side][edges[f][side]][colour[f]] = f


def colour_classes(edges: Sequence[Edge]) -> list[list[int]]:
    """Indices of the edges of each round, in edge order; ``max_degree(edges)`` rounds."""
    rounds: list[list[int]] = [[] for _ in range(max_degree(edges))]
    for e, c in enumerate(edge_colours(edges)):
        rounds[c].append(e)
    return [r for r in rounds if r]
