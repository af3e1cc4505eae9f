"""The synthesizer prunes pending-sum exchanges on floors computed without rows (issue 12): each
must stay at or below what the exchange's routing really receives, or a better plan could be
pruned; ``reduced_cells`` is moreover exact where the source has one replica, which is what lets
the planner skip the exact routing of candidates that lose (``redist.synth.exchanges.exact_floor_open``).
``rooted_rounds`` floors the routing's rounds from device 0's new block, counted in closed form
(checked against the per-device tables); ``sampled_provider_cells`` reads the busiest-receiver
floor on two devices only. The floors are computed lazily, in an order that must equal sorting them all (``by_floor``).
"""

from __future__ import annotations

import pathlib
import random
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import meshes, shapes_for, sharding_types

from benchmarks.planning import LADDER, ladder_pair
from redist import CostModel, Plan, exchange, synth
from redist.atoms import unreduced_atoms
from redist.bounds import lower_bound_bytes, on_prime_atoms
from redist.caches import clear_caches
from redist.errors import StepError
from redist.exchange import (
    floors,
    limits,
    provider_cells,
    reduced_cells,
    rooted_rounds,
    routing,
    sampled_provider_cells,
)
from redist.exchange.cells import cell_grid, partial_axes
from redist.exchange.figures import mode_routing
from redist.exchange.floors import rooted_closed, rooted_tables
from redist.groups import replica_index
from redist.profile import load_profile, packaged_profile
from redist.steps import AllGather, DynSlice, Exchange, ExchangeAllToAll
from redist.synth import exchanges
from redist.synth.driver import typed_plans
from redist.synth.exchanges import LB_SLACK, by_floor
from redist.synth.floors import any_exchange_floor, exchange_floor
from redist.synth.ranking import Best, add_floor
from spmd_types import Mesh, ShardingType, parse
from spmd_types.layout import check_index_range

FIXED_CPU_PROFILE = load_profile(pathlib.Path(__file__).parent / "profiles" / "cpu-2026-11-24.json")
"""A CPU profile frozen for the tests that pin which starts a ranking lets through: they test the
pruning, not a calibration, so a recalibrated ``redist/profiles/cpu.json`` does not move them."""


@st.composite
def _reducing_pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    """Two types of one array, the source a pending sum (often over axes the destination keeps)."""
    mesh = draw(meshes(max_axes=4, max_size=4, max_devices=48))
    shape = draw(shapes_for(mesh, draw(st.integers(0, 3))))
    s = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=True, subaxes=draw(st.booleans())))
    d = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=True))
    return s, d


def _check(s: ShardingType, d: ShardingType) -> None:
    try:
        exact = routing(s, d).cells
    except StepError:
        return
    floor = reduced_cells(s, d)
    assert 0 <= floor <= exact
    # exact for the partial-by-partial exchange; where the types share an unreduced atom the
    # merging one may be picked instead, and the floor is the least of both
    if partial_axes(s, d).n_reduced > 1 and not replica_index(s).any():
        if unreduced_atoms(s) & unreduced_atoms(d):
            assert reduced_cells(s, d) <= mode_routing(s, d, False).cells
        else:
            assert floor == exact


@given(_reducing_pairs())
def test_reduced_cells_is_a_floor_of_the_routing(pair: tuple[ShardingType, ShardingType]) -> None:
    _check(*pair)


@pytest.mark.parametrize("rung", [1, 6])
def test_reduced_cells_on_ladder_pairs(rung: int) -> None:
    """Binary meshes of 8 and 12 axes (256 and 4,096 devices): the pairs that once routed exactly."""
    mesh, rng = Mesh(LADDER[rung]), random.Random(0)
    pairs = [ladder_pair(rng, mesh, True) for _ in range(12)]
    assert sum(partial_axes(s, d).n_reduced > 1 for s, d in pairs) >= 3
    for s, d in pairs:
        _check(s, d)


def test_reduced_cells_with_replicas() -> None:
    """Replicas of the old block may differ, and a need held only in a replica the routing does
    not choose would cost a cell more than the floor, never less (here the floor is met: the
    replica choice favours the replica the targets hold)."""
    mesh = Mesh({"x": 2, "y": 2, "z": 2})
    s, d = parse("f32[8@y]{U:x}", mesh), parse("f32[8@z]", mesh)
    assert replica_index(s).any()
    _check(s, d)
    assert reduced_cells(s, d) == routing(s, d).cells == 8


@given(_reducing_pairs())
def test_rooted_rounds_is_a_floor_of_the_routing(pair: tuple[ShardingType, ShardingType]) -> None:
    """The synthesizer orders and prunes pending-sum exchanges by this round floor before routing
    them: above the routed rounds it could prune the winner."""
    s, d = pair
    try:
        rounds = routing(s, d).rounds
    except StepError:
        return
    assert 0 <= rooted_rounds(s, d) <= rounds


@given(st.lists(st.sampled_from([2, 2, 3, 4]), min_size=2, max_size=5), st.randoms(use_true_random=False))
def test_rooted_rounds_on_ladder_like_pairs(sizes: list[int], rnd: random.Random) -> None:
    """Pairs drawn as the ladder draws them (``ladder_pair``: every axis placed at random, pending
    sums on both sides) on meshes of up to 1,024 devices, where about a quarter have a positive
    floor (the small meshes of ``_reducing_pairs`` rarely leave device 0's cells unheld)."""
    mesh = Mesh({f"a{i}": n for i, n in enumerate(sizes)})
    s, d = ladder_pair(rnd, mesh, True)
    try:
        rounds = routing(s, d).rounds
    except StepError:
        return
    assert 0 <= rooted_rounds(s, d) <= rounds


@pytest.mark.parametrize("rung", [1, 6, 8])
def test_rooted_rounds_on_ladder_pairs(rung: int) -> None:
    """Binary meshes of 8, 12 and 13 axes: the floor stays at or below the routed rounds, and is
    positive on some pair of each rung (where a source's partials all merge at device 0)."""
    mesh, rng = Mesh(LADDER[rung]), random.Random(0)
    pairs = [ladder_pair(rng, mesh, True) for _ in range(6)]
    floors = [(rooted_rounds(s, d), routing(s, d).rounds) for s, d in pairs]
    assert all(f <= r for f, r in floors)
    assert any(f > 0 for f, _ in floors)


@given(_reducing_pairs())
def test_rooted_rounds_with_kept_partials_routed_directly(pair: tuple[ShardingType, ShardingType]) -> None:
    """Types that share an unreduced atom route partial by partial wherever the merging exchange
    is out of reach (``may_merge``: past ``MERGED_MAX_ROWS``, as on every 13-axis binary mesh);
    there the floor counts device 0's rooted cells as without shared atoms. Switching the merging
    exchange off on small meshes checks that case on every drawn pair."""
    s, d = pair
    clear_caches("plans")
    try:
        with mock.patch.object(limits, "MERGED_MAX_ROWS", 0):
            try:
                rounds = routing(s, d).rounds
            except StepError:
                return
            assert 0 <= rooted_rounds(s, d) <= rounds
    finally:
        clear_caches("plans")


def test_rooted_rounds_with_kept_partials_on_13_axes() -> None:
    """A prefix of the slowest 13-axis ladder pair: the types keep ``a5`` unreduced and sum ``a11``;
    the merging exchange is out of reach, so the direct one routes (96 rounds), and device 0 roots
    30 cells (2 partials and 1 forward each: 90 rounds), which prunes the candidate without routing it: 12
    such candidates cost 6-8 ms each to route."""
    mesh = Mesh(LADDER[8])
    s = parse("f32[32@(a2,a8,a0,a7),2048@(a1,a4),4096@(a9,a12,a3),1024@a10,1024@a6]{U:(a5,a11)}", mesh)
    d = parse("f32[32@(a8,a10),2048,4096@(a7,a3),1024@(a12,a1,a2,a9),1024@a0]{U:(a4,a5,a6)}", mesh)
    assert not exchange.may_merge(s, d)
    assert (rooted_rounds(s, d), routing(s, d).rounds) == (90, 96)


def test_rooted_rounds_on_13_axes() -> None:
    """The pair that motivated the floor: the direct exchange routes 112 rounds (64 merging 16
    cells of 4 partials at one root, 48 forwarding them over 3 levels) where the other floors
    give 16; device 0 alone accounts for 84, enough to prune it once reduce-scatter + exchange
    (about a sixth of its time) is routed."""
    mesh = Mesh(LADDER[8])
    s = parse("f32[16384@(a5,a12,a2),128@(a9,a7,a0,a1),4096@(a8,a10,a4),128@a11]{U:(a3,a6)}", mesh)
    d = parse("f32[16384@(a8,a9,a11,a4,a6),128@(a12,a1),4096@a7,128@a5]{U:a0}", mesh)
    assert (rooted_rounds(s, d), routing(s, d).rounds) == (84, 112)


def test_rooted_rounds_counts_device_0s_unheld_cells() -> None:
    """``f32[8@x,4]{U:y} -> f32[8,4@x]`` on {x=2,y=2}: device 0's new block (columns 0-1) has two
    cells, rows 0-3 held by the devices sharing it (x=0) and rows 4-7 by none; device 0 roots that
    cell, receives both its partials and forwards the sum to (0, 1): 2 + 1 rounds of the 5 routed."""
    mesh = Mesh({"x": 2, "y": 2})
    s, d = parse("f32[8@x,4]{U:y}", mesh), parse("f32[8,4@x]", mesh)
    assert (rooted_rounds(s, d), routing(s, d).rounds) == (3, 5)


def _rooted_both(s: ShardingType, d: ShardingType) -> tuple[int, int] | None:
    """``rooted_rounds``' count in closed form and off the device tables, where both apply."""
    axes, grid = partial_axes(s, d), cell_grid(s, d)
    if axes.n_reduced == 1 or not (on_prime_atoms(s) and on_prime_atoms(d)):
        return None
    try:
        check_index_range(s)
        check_index_range(d)
    except StepError:
        return None
    closed = rooted_closed(s, d, axes, grid)
    assert closed is not None
    return closed, rooted_tables(s, d, axes, grid)


@given(_reducing_pairs())
def test_rooted_rounds_closed_form_is_the_tables_count(pair: tuple[ShardingType, ShardingType]) -> None:
    """The closed form (digit sets per dimension, no per-device table) counts what the tables do."""
    both = _rooted_both(*pair)
    if both is not None:
        assert both[0] == both[1]


@pytest.mark.parametrize("rung", [1, 6, 8])
def test_rooted_rounds_closed_form_on_ladder_pairs(rung: int) -> None:
    """Binary meshes of 8, 12 and 13 axes: equal on every pending pair, positive on some."""
    mesh, rng = Mesh(LADDER[rung]), random.Random(3)
    counts = [_rooted_both(s, d) for s, d in (ladder_pair(rng, mesh, True) for _ in range(24))]
    assert all(c[0] == c[1] for c in counts if c is not None)
    assert any(c is not None and c[0] > 0 for c in counts)


def _sampled_check(s: ShardingType, d: ShardingType) -> int:
    """``sampled_provider_cells`` is at most ``provider_cells``, and each of its device counts
    is ``group_missing`` of the first or the last device; the sampled floor."""
    try:
        full = provider_cells(s, d)
    except StepError:
        return 0
    sampled = sampled_provider_cells(s, d)
    assert 0 <= sampled <= full
    if on_prime_atoms(s) and on_prime_atoms(d):
        for merged in floors.merge_modes(s, d):
            missing = exchange.group_missing(s, d, merged)
            if missing is not None:
                assert floors.sampled_missing(s, d, merged) == max(int(missing[0]), int(missing[-1]))
    return sampled


@given(_reducing_pairs())
def test_sampled_provider_cells_is_a_floor(pair: tuple[ShardingType, ShardingType]) -> None:
    _sampled_check(*pair)


@pytest.mark.parametrize("rung", [1, 8])
def test_sampled_provider_cells_on_ladder_pairs(rung: int) -> None:
    """On 8 and 13 axes of 2: a floor, exact on its two devices, and positive on some pair."""
    mesh, rng = Mesh(LADDER[rung]), random.Random(4)
    assert any([_sampled_check(s, d) > 0 for s, d in (ladder_pair(rng, mesh, True) for _ in range(24))])


@st.composite
def _plan_pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    mesh = draw(meshes(max_axes=4, max_size=4, max_devices=48))
    shape = draw(shapes_for(mesh, draw(st.integers(1, 3))))
    s = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=draw(st.booleans())))
    d = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=draw(st.booleans())))
    return s, d


@given(_plan_pairs(), st.sampled_from(["bytes", "alpha-beta"]))
def test_exchange_starts_come_in_order_of_their_floors(pair: tuple[ShardingType, ShardingType], objective: str) -> None:
    """``by_floor`` computes a floor only when its prefix reaches the top of a heap keyed by a
    cheaper key: that key must be at or below the floor, and the order must be that of sorting
    every floor (ties in list order), or the planner would build other exchanges first."""
    s, d = pair
    cm = CostModel(objective=objective)
    prefixes = typed_plans(s, d, cm, Best(s, d))
    floors = [add_floor(p, any_exchange_floor(p.dst, d, cm), cm) for p in prefixes]
    for p, f in zip(prefixes, floors):
        assert cm.order(p.recv_bytes + lower_bound_bytes(p.dst, d) * LB_SLACK, p.time_s) <= f
        assert add_floor(p, any_exchange_floor(p.dst, d, cm, False), cm) <= f
    expected = [p for _, _, p in sorted(zip(floors, range(len(prefixes)), prefixes), key=lambda e: e[:2])]
    assert list(by_floor(prefixes, d, cm, Best(s, d))) == expected


def _priced_models(mesh: Mesh) -> list[CostModel]:
    """Cost models whose exchange round is not the links' price: the shipped CPU profile (a
    measured round costs 30 times the default latency), a cross-process profile with the first
    axis spanning processes, and an unmeasured model with a factor on exchanges (below 1)."""
    cpu, gloo = packaged_profile("cpu"), packaged_profile("cpu-gloo")
    assert cpu is not None and gloo is not None
    return [cpu.cost_model("measured"), cpu.cost_model("bytes"), gloo.cost_model("measured", (mesh.names[0],)),
            CostModel.make(objective="alpha-beta", kind_time_factor={"exchange": 0.5, "permute": 3.0}),
            CostModel.with_slow_axes([mesh.names[-1]], 4.0, cpu.cost_model("measured"))]


@given(_plan_pairs(), st.integers(0, 4))
def test_exchange_floors_bound_the_exchange_under_priced_models(pair: tuple[ShardingType, ShardingType],
                                                                 which: int) -> None:
    """``exchange_floor`` prices each round at ``CostModel.least_round``'s figures for the exchange's kind (a
    measured profile's, where one is loaded): the floor must stay at or below what the exchange
    measures, run in rounds or (``any_exchange_floor``) as one all-to-all, under every cost
    model, or ``by_floor`` and ``_exact_floor_open`` would prune a better plan."""
    s, d = pair
    cm = _priced_models(s.mesh)[which]
    new_u = d.sorted_unreduced() if d.unreduced != s.unreduced else None
    measured: dict[type, Plan] = {}
    for step in (Exchange(d.dims, new_u), ExchangeAllToAll(d.dims, new_u)):
        try:
            measured[type(step)] = Plan.build(s, (step,), cm)
            _ = measured[type(step)].time_s
        except StepError:
            measured.pop(type(step), None)
    if not measured:
        return
    if Exchange in measured:
        recv, time = exchange_floor(s, d, cm)
        assert recv <= measured[Exchange].recv_bytes + 1e-9 and time <= measured[Exchange].time_s
    assert any_exchange_floor(s, d, cm)[1] <= min(p.time_s for p in measured.values())


def _links_only(cm: CostModel, kind: str) -> tuple[float, float]:
    """The floors' round price before 2026-11-24: the fastest link's, whatever the kind."""
    return min([cm.latency_s, *(v for _, v in cm.axis_latency_s)]), \
        1.0 / max([cm.bandwidth_Bps, *(v for _, v in cm.axis_bandwidth_Bps)])


def _plan_and_routings(s: ShardingType, d: ShardingType, cm: CostModel) -> tuple[Plan, int]:
    calls = []

    def counted(a: ShardingType, b: ShardingType) -> object:
        calls.append((a, b))
        return routing(a, b)

    clear_caches("plans")
    with mock.patch.object(exchanges, "routing", counted):
        plan = synth.synthesize(s, d, cm)
    return plan, len(calls)


@pytest.mark.parametrize("rung,index", [(6, 9), (4, 0)])
def test_measured_floors_prune_exchanges(rung: int, index: int) -> None:
    """Under the shipped CPU profile an exchange round costs 169 us and 0.55 GB/s, not the links'
    5 us and 50 GB/s: floors at the profile's price route a fraction of the exchanges and find
    the same plan (a 12-axis pair and a {data=32,fsdp=16,model=8} pair of the ladder)."""
    mesh, rng = Mesh(LADDER[rung]), random.Random(0)
    s, d = [ladder_pair(rng, mesh, k % 3 == 0) for k in range(12)][index]
    prof = packaged_profile("cpu")
    assert prof is not None
    cm = prof.cost_model("measured")
    plan, routed = _plan_and_routings(s, d, cm)
    with mock.patch.object(CostModel, "least_round", _links_only):
        loose, routed_loose = _plan_and_routings(s, d, cm)
    assert plan.steps == loose.steps
    assert routed * 3 <= routed_loose, (routed, routed_loose)


def _plan_and_starts(s: ShardingType, d: ShardingType, cm: CostModel) -> tuple[Plan, int]:
    """The plan and how many exchange starts ``by_floor`` let through to their exact floor."""
    calls = []
    exact = exchanges.exact_floor_open

    def counted(*args: object) -> bool:
        calls.append(args)
        return exact(*args)  # type: ignore[arg-type]

    clear_caches("plans")
    with mock.patch.object(exchanges, "exact_floor_open", counted):
        plan = synth.synthesize(s, d, cm)
    return plan, len(calls)


def _no_prune(*args: object) -> bool:
    return False


def test_exchanges_outranked_by_fewer_ops_are_skipped() -> None:
    """Under a tie tolerance an exchange start whose floor is no faster than a feasible plan of
    fewer collective ops cannot be ``Best.choice``'s, though it may fall in the window: it is
    skipped before its exact floor. The frozen CPU profile's plan for this pair is unchanged, with 14
    starts let through instead of 20."""
    mesh = Mesh({"x": 2, "y": 2, "z": 2})
    s, d = parse("bf16[16,8,256@(x,y),16]{U:z}", mesh), parse("bf16[16@y,8,256,16@x]", mesh)
    prof = FIXED_CPU_PROFILE
    plan, starts = _plan_and_starts(s, d, prof.cost_model("measured"))
    with mock.patch.object(Best, "outranked", _no_prune):
        full, all_starts = _plan_and_starts(s, d, prof.cost_model("measured"))
    assert plan.steps == full.steps
    assert (starts, all_starts) == (14, 20)


def test_outranked_needs_fewer_ops_or_less_time() -> None:
    """``Best.choice`` ranks tied plans by ops, then time: a floor is outranked by a feasible plan
    with fewer ops and no more time, or as many ops and less time; not by one of equal ops and
    time (bytes may still decide), and never without a tie tolerance. ``ranked`` keeps the slower
    plans of as many ops for a measurement to rank (``keep_slower``)."""
    mesh = Mesh({"x": 2, "y": 2})
    best = Best(parse("f32[8@x]", mesh), parse("f32[8@y]", mesh))
    best.fastest_by_ops = {3: 1.0}
    prof = packaged_profile("cpu")
    assert prof is not None
    cm = prof.cost_model("measured")
    assert best.outranked(1.0, 4, cm) and best.outranked(1.5, 3, cm)
    assert not best.outranked(1.0, 3, cm)
    assert not best.outranked(0.9, 9, cm) and not best.outranked(2.0, 2, cm)
    assert not best.outranked(2.0, 4, CostModel(objective="alpha-beta"))
    kept = Best(parse("f32[8@x]", mesh), parse("f32[8@y]", mesh), keep_slower=True)  # ``ranked``'s
    kept.fastest_by_ops = {3: 1.0}
    assert kept.outranked(1.0, 4, cm) and not kept.outranked(1.5, 3, cm)


def test_ranked_keeps_slower_plans_of_as_many_ops() -> None:
    """``synthesize`` drops an exchange start no faster than a plan of as many ops, but ``ranked``
    keeps it for ``redist.autotune`` to measure: ``f32[24,24@x,48,24] -> f32[24,24,48@y,24]`` on
    ``{x=2,y=2,z=2}`` under the frozen CPU profile (``FIXED_CPU_PROFILE``) is a slice and an all-gather (1.38 ms), then the
    exchange from the source (1.63 ms) and after the slice (1.68 ms), one op each."""
    mesh = Mesh({"x": 2, "y": 2, "z": 2})
    s, d = parse("f32[24,24@x,48,24]", mesh), parse("f32[24,24,48@y,24]", mesh)
    prof = FIXED_CPU_PROFILE
    cm = prof.cost_model("measured")
    plans = synth.ranked(s, d, cm, 4)
    assert [tuple(type(x) for x in p.steps) for p in plans] == [(DynSlice, AllGather), (Exchange,), (DynSlice, Exchange)]
    assert {p.n_collectives for p in plans} == {1} and synth.synthesize(s, d, cm).steps == plans[0].steps


@given(_plan_pairs(), st.integers(0, 4))
def test_the_ops_prune_keeps_every_plan(pair: tuple[ShardingType, ShardingType], which: int) -> None:
    """``Best.outranked`` prunes only what ``choice`` could not pick: the same plan with and without
    it under every priced model (tie tolerances of 9.8% and 12.5% in the shipped profiles)."""
    s, d = pair
    cm = _priced_models(s.mesh)[which]
    plan, _ = _plan_and_starts(s, d, cm)
    with mock.patch.object(Best, "outranked", _no_prune):
        full, _ = _plan_and_starts(s, d, cm)
    assert plan.steps == full.steps
