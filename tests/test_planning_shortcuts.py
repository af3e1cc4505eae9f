"""The planner's shortcuts give the figures the long way gives: shared prefix measures, the atom
memos, the closed form's kept figures, ``check_size``'s early return, cached hashes that do
not travel in pickles, and typed candidates cut short where the best plan so far beats them."""

from __future__ import annotations

import gc
import pickle
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.golden import cpu_profile_model
from benchmarks.planning import LADDER, ladder_cost_model, ladder_pair
from redist.atoms import dims_atoms, from_atoms, unreduced_atoms
from redist.cost import CostModel
from redist.exchange import check_size, closed_form
from redist.exchange.cells import cell_grid, partial_axes
from redist.exchange.limits import MAX_DEVICE_CELLS
from redist.exchange_classes import classes
from redist.plan import Plan, measure_step
from redist.steps import AllReduceSlice, ReduceScatter
from redist.synth import synthesize
from redist.synth.driver import gc_paused, search_plans, unbeaten
from redist.synth.families import typed_candidates
from redist.synth.variants import variant_heads
from spmd_types import Mesh, ShardingType
from spmd_types.layout import overlap_elements
from tests.strategies import type_pairs

MESH = Mesh({"a": 2, "b": 2, "c": 4})


def _fresh(p: Plan) -> tuple:
    ts = p.all_types
    return tuple(measure_step(s, ts[i], ts[i + 1], p.cost_model) for i, s in enumerate(p.steps))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_prefix_and_variant_measures_equal_fresh_ones(data: st.DataObject) -> None:
    """``Plan.prefix`` and ``Plan.with_step`` hand on measures already computed: they must be the
    measures a plan built from scratch has (and a variant types the same)."""
    src, dst = data.draw(type_pairs(MESH, min_rank=1, max_rank=3, dtypes=["f32"], unreduced=True))
    for steps in typed_candidates(src, dst, Plan(src, src, (), ()).cost_model):
        full = Plan.build(src, steps)
        _ = full.measures
        for k in range(len(steps) + 1):
            head = full.prefix(k)
            assert head == Plan.build(src, steps[:k])
            assert head.measures == _fresh(head)
            for i, step in enumerate(head.steps):
                if type(step) in (ReduceScatter, AllReduceSlice):
                    other = (AllReduceSlice if type(step) is ReduceScatter else ReduceScatter)(step.dim, step.axes)
                    v = head.with_step(i, other)
                    assert v == Plan.build(src, v.steps)
                    assert v.measures == _fresh(v)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_from_atoms_round_trip_and_local_shape(data: st.DataObject) -> None:
    """A type rebuilt from its own atoms (memoised per mesh) is the type, with its local shape."""
    mesh = Mesh({"x": 6, "y": 4})
    src, _ = data.draw(type_pairs(mesh, min_rank=1, max_rank=3, dtypes=["f32"], unreduced=True, subaxes=True))
    t = from_atoms(src, dims_atoms(src), unreduced_atoms(src))
    assert t == src
    assert t.local_shape == tuple(n // src.dim_shards(d) for d, n in enumerate(src.shape))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_closed_form_keeps_the_per_device_figures(data: st.DataObject) -> None:
    src, dst = data.draw(type_pairs(MESH, min_rank=1, max_rank=3, dtypes=["f32"]))
    missing = dst.local_size - overlap_elements(src, dst)
    cf = closed_form(src, dst)
    assert cf.mean_missing == float(missing.mean())
    assert cf.max_missing == int(missing.max())


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_check_size_early_return_is_exact(data: st.DataObject) -> None:
    """``check_size`` returns early when a device handles at most ``MAX_DEVICE_CELLS`` (cell,
    partial) pairs: always allowed, because a class of devices has the same count per device."""
    src, dst = data.draw(type_pairs(MESH, min_rank=1, max_rank=3, dtypes=["f32"], unreduced=True))
    per_device = int(np.prod(cell_grid(src, dst).per_block)) * partial_axes(src, dst).n_reduced
    c = classes(src, dst)
    if c is not None:
        q_old, q_new = c.quotient_old, c.quotient_new
        assert int(np.prod(cell_grid(q_old, q_new).per_block)) * partial_axes(q_old, q_new).n_reduced == per_device
    if per_device <= MAX_DEVICE_CELLS:
        check_size(src, dst)  # does not raise


def test_cached_hashes_are_not_pickled() -> None:
    """String hashes differ between processes: a pickled mesh, type or cost model recomputes its hash."""
    t = ShardingType((8, 4), "f32", [("a",), None], MESH, ["b"])
    cm = ladder_cost_model("gloo", Mesh(LADDER[1]))
    hash(t), hash(MESH), hash(cm)
    for x in (MESH, t, cm):
        y = pickle.loads(pickle.dumps(x))
        assert "_hash" not in y.__dict__
        assert y == x and hash(y) == hash(x)


def _cut_candidates(src: ShardingType, dst: ShardingType, cm: CostModel) -> int:
    """Against the search's final best plan: every candidate ``unbeaten`` cuts short is beaten
    or outranked (``Best.outranked``: a feasible plan with fewer ops and no more time, or as many
    and less) through its cut, every longer prefix and every variant of one included (so nothing
    it skips could have won, nor started a winning exchange). The number of candidates cut."""
    best = search_plans(src, dst, cm, every=True)
    cut = 0
    for steps in dict.fromkeys(typed_candidates(src, dst, cm)):
        full = Plan.build(src, steps, cm)
        head = unbeaten(full, best)
        if head is full:
            continue
        cut += 1
        assert head == full.prefix(len(head.steps)) and head.measures == _fresh(head)
        for k in range(len(head.steps), len(steps) + 1):
            for p in variant_heads(full.prefix(k)):
                key = cm.order(p.recv_bytes, p.time_s)
                assert best.beaten(key) or best.outranked(p.time_s, p.n_collectives, cm), (p, best.plan)
    return cut


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_cut_candidates_change_no_plan(data: st.DataObject) -> None:
    """``unbeaten``'s cut is exact: ``synthesize`` picks the plan the uncut search picks, and what
    it skips is beaten, under the bytes objective and the shipped CPU profile."""
    src, dst = data.draw(type_pairs(MESH, min_rank=1, max_rank=3, dtypes=["f32", "bf16"], unreduced=True))
    for cm in (CostModel(objective="bytes"), cpu_profile_model()):
        uncut = search_plans(src, dst, cm, every=True)
        assert synthesize(src, dst, cm).steps == uncut.choice(uncut.plan).steps
        _cut_candidates(src, dst, cm)


def test_cut_candidates_on_a_ladder_rung() -> None:
    """On 8 axes of 2 (256 devices) the pending-sum pairs of the planning ladder have candidates
    cut short (the cut is in use), all of them beaten through the cut, and the plans unchanged."""
    mesh = Mesh(LADDER[1])
    rng = random.Random(0)
    pairs = [ladder_pair(rng, mesh, i % 3 == 0) for i in range(12)]
    cut = 0
    for src, dst in pairs:
        if not (src.unreduced or dst.unreduced):
            continue
        cm = ladder_cost_model("gloo", mesh)
        cut += _cut_candidates(src, dst, cm)
        uncut = search_plans(src, dst, cm, every=True)
        assert synthesize(src, dst, cm).steps == uncut.choice(uncut.plan).steps
    assert cut > 0


def test_gc_paused_restores_the_collector_state() -> None:
    """``synthesize`` runs with the cyclic collector off and leaves it as it found it, on or off."""
    was = gc.isenabled()
    try:
        for start in (True, False):
            (gc.enable if start else gc.disable)()
            with gc_paused():
                assert not gc.isenabled()
                with gc_paused():
                    assert not gc.isenabled()
                assert not gc.isenabled()
            assert gc.isenabled() is start
            synthesize(*_example())
            assert gc.isenabled() is start
    finally:
        (gc.enable if was else gc.disable)()


def _example() -> tuple[ShardingType, ShardingType]:
    return (ShardingType.parse("f32[8@a,4]{U:b}", MESH), ShardingType.parse("f32[8,4@(a,b)]", MESH))
