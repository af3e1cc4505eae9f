"""``redist.colouring``: every message in exactly one round, rounds are matchings, and as few
rounds as Konig's theorem allows (the max degree), on random bipartite multigraphs."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from redist.colouring import Edge, colour_classes, edge_colours, max_degree


@st.composite
def multigraphs(draw: st.DrawFn, max_devices: int = 8, max_edges: int = 60) -> list[Edge]:
    """Random (sender, receiver) lists: parallel edges and self-sends included."""
    n_send = draw(st.integers(1, max_devices))
    n_recv = draw(st.integers(1, max_devices))
    edge = st.tuples(st.integers(0, n_send - 1), st.integers(0, n_recv - 1))
    return draw(st.lists(edge, max_size=max_edges))


def _degree(edges: list[Edge]) -> int:
    """Max degree, counted independently of ``max_degree``."""
    sends = Counter(s for s, _ in edges)
    recvs = Counter(d for _, d in edges)
    return max([*sends.values(), *recvs.values()], default=0)


def _assert_proper(edges: list[Edge], classes: list[list[int]]) -> None:
    assert sorted(e for c in classes for e in c) == list(range(len(edges)))  # each edge once
    for c in classes:
        assert c, "no empty rounds"
        assert len({edges[e][0] for e in c}) == len(c), "a device sends twice in one round"
        assert len({edges[e][1] for e in c}) == len(c), "a device receives twice in one round"


@given(multigraphs())
def test_every_edge_one_colour_within_max_degree(edges: list[Edge]) -> None:
    colours = edge_colours(edges)
    assert len(colours) == len(edges)
    assert all(0 <= c < _degree(edges) for c in colours)
    assert max_degree(edges) == _degree(edges)


@given(multigraphs())
def test_colour_classes_are_matchings(edges: list[Edge]) -> None:
    classes = colour_classes(edges)
    _assert_proper(edges, classes)
    for c in classes:
        assert c == sorted(c)  # edge order kept inside a round (the schedule's packing relies on it)


@given(multigraphs())
def test_rounds_equal_max_degree(edges: list[Edge]) -> None:
    """Konig: a bipartite multigraph needs exactly its max degree colours."""
    assert len(colour_classes(edges)) == _degree(edges)


@given(st.integers(1, 6), st.integers(1, 3), st.randoms(use_true_random=False))
def test_regular_multigraph_needs_every_colour(n: int, mult: int, rnd) -> None:  # type: ignore[no-untyped-def]
    """A ``mult * n``-regular graph (every sender to every receiver ``mult`` times, shuffled): each
    round must be a perfect matching, the case a greedy colouring without path flips fails."""
    edges = [(s, d) for s in range(n) for d in range(n) for _ in range(mult)]
    rnd.shuffle(edges)
    classes = colour_classes(edges)
    _assert_proper(edges, classes)
    assert len(classes) == n * mult
    assert all(len(c) == n for c in classes)


def test_hand_cases() -> None:
    assert edge_colours([]) == [] and colour_classes([]) == []
    assert edge_colours([(3, 5)]) == [0]
    assert colour_classes([(0, 0), (0, 1), (0, 2)]) == [[0], [1], [2]]  # one sender: one per round
    assert colour_classes([(0, 1), (1, 0), (2, 2)]) == [[0, 1, 2]]     # a permutation: one round
    assert colour_classes([(0, 0), (0, 0)]) == [[0], [1]]              # parallel edges
    # (1, 0) finds colour 0 free at sender 1 but busy at receiver 0: the path {(0, 0)} flips to 1
    assert edge_colours([(0, 0), (1, 0)]) == [1, 0]
    # a longer flip: (2, 0)'s colour 0 is busy at receiver 0; the path (0,0)-0, (0,1)-1, (1,1)-0
    # alternates 0/1 from receiver 0 and flips as a whole
    edges = [(0, 0), (0, 1), (1, 1), (2, 0)]
    assert edge_colours(edges) == [1, 0, 1, 0]
    _assert_proper(edges, colour_classes(edges))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_mesh_offset_seeding(torus: list[int], data: st.DataObject) -> None:
    """Seeded with mesh offsets (``torus``: a mesh shape over row-major ids), still a proper
    colouring in exactly max degree rounds, whatever mix of symmetric and stray messages."""
    n = 1
    for s in torus:
        n *= s
    edges = data.draw(multigraphs(max_devices=n))
    edges = [(s % n, d % n) for s, d in edges]
    classes = colour_classes(edges, torus)
    _assert_proper(edges, classes)
    assert len(classes) == _degree(edges)


def test_symmetric_schedule_needs_no_flips() -> None:
    """Every device of a 4x4 torus sends to every other: the 15 offsets are the 15 rounds, each
    the translation ``v -> v + offset`` (no alternating path is needed)."""
    import numpy as np

    from redist.colouring import colours, offset_classes
    coords = [(a, b) for a in range(4) for b in range(4)]
    edges = [(4 * a + b, 4 * c + d) for a, b in coords for c, d in coords if (a, b) != (c, d)]
    src, dst = np.array(edges).T
    col = colours(src, dst, (4, 4))
    assert np.array_equal(np.unique(offset_classes(src, dst, (4, 4)), return_inverse=True)[1].reshape(-1),
                          np.unique(col, return_inverse=True)[1].reshape(-1))
    _assert_proper(edges, colour_classes(edges, (4, 4)))


@given(multigraphs(max_devices=12, max_edges=120), st.lists(st.integers(1, 4), min_size=1, max_size=2))
def test_euler_splits_exact(edges: list[Edge], torus: list[int]) -> None:
    """The Euler-split path (any leftover outside the offset classes), odd degrees included: a
    proper colouring in exactly max degree rounds."""
    import numpy as np

    from redist import colouring
    n = 1
    for s in torus:
        n *= s
    edges = [(s % n, d % n) for s, d in edges]
    saved = colouring.MAX_FLIPPED
    colouring.MAX_FLIPPED = 0
    try:
        arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
        col = colouring.colours(arr[:, 0], arr[:, 1], torus)
    finally:
        colouring.MAX_FLIPPED = saved
    assert sorted(set(col.tolist())) == list(range(_degree(edges)))
    for c in range(_degree(edges)):
        sel = arr[col == c]
        assert len(set(sel[:, 0].tolist())) == len(sel) == len(set(sel[:, 1].tolist()))


def test_euler_halves_split_every_degree() -> None:
    """One Euler split: every vertex of degree ``d`` keeps at most ``ceil(d / 2)`` edges per half,
    on a random multigraph of 20,000 edges over 500 vertices (checked exactly)."""
    import numpy as np

    from redist.colouring import _euler_halves
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 500, 20000), rng.integers(0, 500, 20000)
    half = _euler_halves(src, dst)
    for v in (src, dst):
        deg = np.bincount(v, minlength=500)
        for h in (0, 1):
            assert (np.bincount(v[half == h], minlength=500) <= -(-deg // 2)).all()


def test_large_binary_graph_in_max_degree_rounds() -> None:
    """65,536 random edges at max degree ~40 over 4,096 devices (odd and even levels of the
    recursion): exactly max degree rounds."""
    import numpy as np

    from redist.colouring import colours, degree
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 4096, 65536), rng.integers(0, 4096, 65536)
    col = colours(src, dst, (2,) * 12)
    d = degree(src, dst)
    assert col.max() + 1 == d
    key = col * 4096
    assert len(np.unique(key + src)) == len(np.unique(key + dst)) == len(src)
