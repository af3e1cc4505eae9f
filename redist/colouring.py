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
    # per side (0 senders, 1 receivers), per device: colour -> index of the edge holding it
    at: tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]] = ({}, {})
    colour = [-1] * len(edges)
    for e, (s, d) in enumerate(edges):
        cs, cd = at[0].setdefault(s, {}), at[1].setdefault(d, {})
        a = next(c for c in range(n_col) if c not in cs)
        if a in cd:
            b = next(c for c in range(n_col) if c not in cd)
            _flip_path(edges, colour, at, d, a, b)
        colour[e] = a
        cs[a] = e
        cd[a] = e
    return colour


def _flip_path(
    edges: Sequence[Edge], colour: list[int], at: tuple[dict[int, dict[int, int]], ...],
    receiver: int, a: int, b: int,
) -> None:
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


def colour_classes(edges: Sequence[Edge]) -> list[list[int]]:
    """Indices of the edges of each round, in edge order; ``max_degree(edges)`` rounds."""
    n_col = max_degree(edges)
    rounds: list[list[int]] = [[] for _ in range(n_col)]
    for e, c in enumerate(edge_colours(edges, n_col)):
        rounds[c].append(e)
    return [r for r in rounds if r]
