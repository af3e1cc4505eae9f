"""Planning measures exchanges from their routing, never from coloured rounds (issue 12).

``redist.exchange_facets.routed_measure`` reads bytes, rounds and time off ``redist.exchange.routing``
(cells received; rounds as each phase's max degree, Konig's theorem), under every cost model;
``scheduled_measure`` reads them off the built schedule. These tests pin that the two agree
exactly where the model prices every axis alike (floats included) on random pairs with pending sums on either side, and that
the helpers planning now leans on (the provider floor, the sparse replica choice, the scalar
replica key) equal their slower references.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import meshes, shapes_for, sharding_types

from redist import CostModel
from redist.atoms import atoms_of, unreduced_atoms
from redist.cost import KindCost
from redist.errors import StepError
from redist.exchange import (
    group_missing,
    group_missing_total,
    provider_cells,
    routing,
    schedule,
)
from redist.exchange.figures import mode_routing, plain_routing, rows_routing, summing_routing
from redist.exchange.routes import route
from redist.exchange.rows import most_held
from redist.exchange_classes import classes
from redist.exchange_facets import routed_measure, scheduled_measure
from redist.groups import atoms_index, group_key, group_sums, replica_index
from redist.measure import uniform_links
from redist.plan import Plan
from redist.steps import Exchange
from redist.synth.floors import exchange_floor
from spmd_types import Mesh, ShardingType, parse
from spmd_types.layout import block_indices

UNIFORM = (
    CostModel(objective="bytes"),
    CostModel(latency_s=0.0, objective="alpha-beta"),
    CostModel(objective="bytes", kind_costs=(("exchange", KindCost(3e-6, 7e-6, 11e9)),), kind_time_factor=(("exchange", 1.7),)),
)

FORWARDING = [  # (mesh, src, dst): merge then forward, in one level (a star) or a doubling tree
    ({f"a{i}": 2 for i in range(6)}, "f32[4096@a0]{U:a1}", "f32[4096@a1]"),     # 5 tree levels
    ({f"a{i}": 2 for i in range(6)}, "f32[64@a0]{U:(a1,a2)}", "f32[64]"),       # 6 tree levels
    ({"x": 2, "y": 8}, "f32[16]{U:x}", "f32[16]"),
    ({"x": 3, "y": 8}, "f32[16@y]{U:x}", "f32[16]{U:y}"),                      # a star
    ({"x": 2, "y": 3, "z": 2}, "f32[64@x,48]{U:y}", "f32[64,48@x]{U:z}"),
    ({"x": 2, "y": 4, "z": 2}, "f32[8@y,6]{U:x}", "f32[8,6]"),
]


def _agree(s: ShardingType, d: ShardingType) -> None:
    for cm in UNIFORM:
        assert uniform_links(cm)
        assert routed_measure(s, d, cm) == scheduled_measure(s, d, cm)


@pytest.mark.parametrize("axes,src,dst", FORWARDING)
def test_routed_measure_equals_the_schedule_with_forwarding(axes: dict[str, int], src: str, dst: str) -> None:
    mesh = Mesh(axes)
    s, d = parse(src, mesh), parse(dst, mesh)
    assert len(route(s, d)[2].forward.src)  # the case has a forwarding phase
    _agree(s, d)


@st.composite
def _pending_pairs(draw: st.DrawFn, plain_src: bool = False) -> tuple[ShardingType, ShardingType]:
    mesh = draw(meshes(max_axes=4, max_size=4, max_devices=48))
    shape = draw(shapes_for(mesh, draw(st.integers(0, 3))))
    s = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=not plain_src))
    d = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=True))
    return s, d


@given(_pending_pairs())
def test_routed_measure_equals_the_schedule(pair: tuple[ShardingType, ShardingType]) -> None:
    """Bytes, rounds, collectives and time (the same float) on random pairs, pending sums on either side."""
    try:
        _agree(*pair)
    except StepError:  # a refused exchange is refused by both paths
        with pytest.raises(StepError):
            schedule(*pair)


def test_non_uniform_models_price_rounds_over_the_moved_axes() -> None:
    """Under per-axis prices every round of a pending-sum exchange is priced over the axes either
    layout shards by and the unreduced axes one lacks (``p2p_axes``), as a plain exchange's closed
    form is: the schedule's bytes and rounds, no colouring. Its own rounds cross the slow axis in
    only some rounds, so ``scheduled_measure`` prices it lower (docs/design.md 13.3)."""
    mesh = Mesh({"x": 2, "y": 4})
    s, d = parse("f32[8@y]{U:x}", mesh), parse("f32[8@x]", mesh)
    slow = CostModel.with_slow_axes(["x"])
    assert not uniform_links(slow)
    m, r = routed_measure(s, d, slow), routing(s, d)
    per_round = slow.kind_time("exchange", {"x"}, 1, math.prod(r.cell) * 4)
    assert (m.rounds, m.recv_bytes) == (r.rounds, scheduled_measure(s, d, slow).recv_bytes)
    assert m.time_s == pytest.approx(r.rounds * per_round)
    assert scheduled_measure(s, d, slow).time_s < m.time_s


@given(st.one_of(_pending_pairs(plain_src=True), _pending_pairs()))
def test_provider_cells_is_the_busiest_receiver(pair: tuple[ShardingType, ShardingType]) -> None:
    """The synthesizer's round floor: at most the cells the busiest device receives, and exactly
    that when a plain source is made a pending sum."""
    s, d = pair
    if not (s.unreduced or d.unreduced):
        return
    try:
        sch = schedule(s, d)
    except StepError:
        return
    busiest = int(sch.recv_cells.max()) if len(sch.recv_cells) else 0
    assert provider_cells(s, d) <= busiest
    if not s.unreduced:
        assert provider_cells(s, d) == busiest


@given(st.one_of(_pending_pairs(plain_src=True), _pending_pairs()))
def test_the_exchange_floor_bounds_the_exchange(pair: tuple[ShardingType, ShardingType]) -> None:
    """The synthesizer prunes on this floor (the transfer bound or the cells each group of devices
    lacks, the provider's cells): it must never exceed what the exchange measures."""
    s, d = pair
    if not (s.unreduced or d.unreduced):
        return
    assert group_missing_total(s, d) * s.itemsize / s.mesh.size <= exchange_floor(s, d, CostModel(objective="bytes"))[0]
    for cm in (CostModel(objective="bytes"), CostModel(objective="alpha-beta"), CostModel.with_slow_axes([s.mesh.names[0]])):
        try:
            ex = Plan.build(s, (Exchange(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None),), cm)
        except StepError:
            return
        floor = exchange_floor(s, d, cm)
        assert floor[0] <= ex.recv_bytes + 1e-9 and floor[1] <= ex.time_s


def test_group_floors_off_the_prime_atoms() -> None:
    """``x:(3)2`` on ``x=6`` numbers blocks by ``x mod 2``, a digit none of ``x``'s prime atoms is:
    the devices along ``x`` (a group, ``x`` being fresh) hold both halves of every new block, so
    nothing is missing, but a product of per-atom group sums once counted 4 missing elements (a
    floor above the exchange's 0 cells). No per-device floor is claimed there."""
    mesh = Mesh({"x": 6, "y": 2})
    s, d = parse("f32[6@(x:(3)2)]", mesh), parse("f32[6@y]{U:x}", mesh)
    assert routing(s, d).cells == 0
    assert group_missing(s, d) is None
    assert (group_missing_total(s, d), provider_cells(s, d)) == (0, 0)


@given(meshes(max_axes=4, max_size=8, max_devices=96), st.data())
def test_group_sums_are_sums_over_the_group_key(mesh: Mesh, data: st.DataObject) -> None:
    """``group_sums`` (a reshaped sum, or a keyed one where two atoms share an axis) against a
    plain loop over ``group_key``'s groups."""
    every = [a for name in mesh.names for a in atoms_of(mesh, name)]
    atoms = tuple(data.draw(st.lists(st.sampled_from(every), unique=True)))
    values = np.array(data.draw(st.lists(st.integers(-(1 << 40), 1 << 40), min_size=mesh.size,
                                         max_size=mesh.size)), dtype=np.int64)
    key = group_key(mesh, atoms)
    expected = np.array([int(values[key == k].sum()) for k in key.tolist()], dtype=np.int64)
    assert (group_sums(mesh, atoms, values) == expected).all()


def _dense_most_held(cell: np.ndarray, column: np.ndarray, rot: np.ndarray, n_cols: int) -> np.ndarray:
    """The dense ``cells x columns`` table ``most_held`` replaced, as it was."""
    counts = np.zeros((len(rot), n_cols), dtype=np.int64)
    np.add.at(counts, (cell, column), 1)
    shift = rot[:, None] % n_cols
    rolled = np.take_along_axis(counts, (np.arange(n_cols)[None, :] + shift) % n_cols, axis=1)
    return (rolled.argmax(axis=1) + shift[:, 0]) % n_cols


@given(st.integers(1, 12), st.integers(1, 6), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 5)), max_size=60),
       st.randoms(use_true_random=False))
def test_most_held_equals_the_dense_table(n_cells: int, n_cols: int, pairs: list[tuple[int, int]], rnd) -> None:  # type: ignore[no-untyped-def]
    cell = np.array([c % n_cells for c, _ in pairs], dtype=np.int64)
    column = np.array([k % n_cols for _, k in pairs], dtype=np.int64)
    rot = np.array([rnd.randrange(20) for _ in range(n_cells)], dtype=np.int64)
    assert most_held(cell, column, rot, n_cols).tolist() == _dense_most_held(cell, column, rot, n_cols).tolist()


def _replica_reference(old: ShardingType) -> np.ndarray:
    """``replica_index`` as it was: rank within ``np.unique`` rows of (block indices, partial)."""
    n = old.mesh.size
    if not old.unreduced:
        return np.zeros(n, dtype=np.int64)
    partial = atoms_index(old.mesh, tuple(sorted(unreduced_atoms(old))))
    group = np.unique(np.column_stack([block_indices(old), partial]), axis=0, return_inverse=True)[1].reshape(-1)
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return rank


@given(st.data())
def test_replica_index_equals_the_row_unique_reference(data: st.DataObject) -> None:
    mesh = data.draw(meshes(max_axes=4, max_size=6, max_devices=96))
    t = data.draw(sharding_types(mesh, unreduced=True, subaxes=True))
    assert replica_index(t).tolist() == _replica_reference(t).tolist()


@given(_pending_pairs())
def test_counting_routing_equals_the_routing_with_offsets(pair: tuple[ShardingType, ShardingType]) -> None:
    """``routing`` routes without offsets and without choosing senders (``redist.exchange.routes.sent_load``):
    its receivers, forwarding and the busiest sender's load equal the full routing's, senders chosen."""
    s, d = pair
    try:
        _, _, full = route(s, d, True)
    except StepError:
        return
    _, _, counted = route(s, d, False)
    assert not len(counted.merge.src)
    sent = np.bincount(full.merge.src).max() if len(full.merge.src) else 0
    assert counted.send_load == full.send_load == sent
    assert np.array_equal(counted.merge.dst, full.merge.dst)
    assert np.array_equal(counted.local.dst, full.local.dst)
    for a, b in zip(counted.forward[:2], full.forward[:2]):
        assert np.array_equal(a, b)
    assert np.array_equal(counted.level, full.level)


@st.composite
def _plain_pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    mesh = draw(meshes(max_axes=4, max_size=6, max_devices=96))
    shape = draw(shapes_for(mesh, draw(st.integers(0, 3))))
    return tuple(draw(sharding_types(mesh, shape=shape, dtype="f32", subaxes=True)) for _ in range(2))  # type: ignore[return-value]


@given(_plain_pairs())
def test_plain_routing_equals_the_routed_rows(pair: tuple[ShardingType, ShardingType]) -> None:
    """``routing`` of a move without pending sums comes from its closed form (``plain_routing``):
    the cells, rounds and cell shape its (device, cell) rows give, refused alike."""
    s, d = pair
    assume(not (s.unreduced or d.unreduced))  # unreduced size-1 axes
    try:
        rows = rows_routing(s, d, False)
    except StepError:
        with pytest.raises(StepError):
            plain_routing(s, d)
        return
    assert plain_routing(s, d) == rows


@st.composite
def _summing_pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    """Pending sums onto a layout that adds none: every axis shards the source or sums in it, and
    shards the destination or stays pending there (kept), the closed form's domain; sizes from
    every divisor a dimension allows."""
    mesh = draw(meshes(max_axes=4, max_size=6, max_devices=96))
    rank = draw(st.integers(1, 3))
    names = list(mesh.names)
    summed = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    kept = draw(st.lists(st.sampled_from(summed), unique=True))
    old_dims: list[list[str]] = [[] for _ in range(rank)]
    new_dims: list[list[str]] = [[] for _ in range(rank)]
    for dims, pool in ((old_dims, [n for n in names if n not in summed]), (new_dims, [n for n in names if n not in kept])):
        for n in draw(st.permutations(pool)):
            dims[draw(st.integers(0, rank - 1))].append(n)
    shape = tuple(math.lcm(math.prod(mesh.axis_size(n) for n in a), math.prod(mesh.axis_size(n) for n in b))
                  * draw(st.sampled_from((1, 2, 3, 4, 6))) for a, b in zip(old_dims, new_dims))
    return (ShardingType(shape, "f32", [tuple(x) for x in old_dims], mesh, summed),
            ShardingType(shape, "f32", [tuple(x) for x in new_dims], mesh, kept))


@pytest.mark.parametrize("merge_rows", [None, 0])
@given(pair=_summing_pairs())
def test_summing_routing_equals_the_routed_rows(pair: tuple[ShardingType, ShardingType], merge_rows: int | None) -> None:
    """A reducing exchange with one holder per partial and one target per need is routed in
    closed form (``summing_routing``): the cells, rounds and cell shape of its (device, cell)
    rows, refused alike. With ``MERGED_MAX_ROWS`` at 0 no pair may merge, so kept partials (which
    otherwise try the merging exchange on these small meshes) reach the closed form too."""
    s, d = pair
    with pytest.MonkeyPatch.context() as mp:
        if merge_rows is not None:
            mp.setattr("redist.exchange.limits.MERGED_MAX_ROWS", merge_rows)
        try:
            closed = summing_routing(s, d)
        except StepError:
            with pytest.raises(StepError):
                rows_routing(s, d, False)
            return
        assume(closed is not None)  # a summed axis of size 1, or a merging exchange to try
        assert closed == rows_routing(s, d, False)


def test_a_reducing_exchange_of_4096_devices_routes_without_rows() -> None:
    """The slowest pair of the Gloo ladder (issue 12): 2M (device, cell) rows, 0.1-0.2 s to route
    with NumPy, in closed form: every device is the one target of 16 cells of 32 partials each, and
    receives all but the partials it holds itself (512 in all: some devices hold none)."""
    mesh = Mesh({"data": 32, "fsdp": 16, "model": 8})
    s = parse("f32[512@model,64,2048,1024@fsdp,8192]{U:data}", mesh)
    d = parse("f32[512,64,2048@data,1024@model,8192@fsdp]", mesh)
    closed = summing_routing(s, d)
    assert closed is not None and closed == routing(s, d) == rows_routing(s, d, False)
    assert closed == ((64, 64, 64, 64, 512), 4096 * 16 * 32 - 512, 16 * 32)


def test_plain_quotients_of_kept_pending_sums_route_by_closed_form() -> None:
    """The exchange that moves kept partials one by one factors them out (``exchange_classes``) to a
    plain quotient, routed from its closed form: the figures of the rows, lifted by the classes."""
    mesh = Mesh({f"a{i}": 2 for i in range(6)})
    s = parse("f32[64@(a0,a1),32@a2]{U:(a3,a4)}", mesh)
    d = parse("f32[64@(a1,a0),32@a5]{U:(a3,a4)}", mesh)
    c = classes(s, d)
    assert c is not None and not (c.quotient_old.unreduced or c.quotient_new.unreduced)
    rows = rows_routing(c.quotient_old, c.quotient_new, False)
    assert mode_routing(s, d, False) == rows._replace(cells=rows.cells * c.n_classes)
