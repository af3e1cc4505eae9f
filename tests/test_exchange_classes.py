"""Exchanges factored into classes of devices (``redist.exchange_classes``, issue 12).

The factored routing and schedule must be the unfactored ones: the same cells in all, the same
rounds, the same cells per device; and the lifted schedule must move the right data (the NumPy
simulator against the global array).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import meshes, shapes_for, sharding_types

from redist import CostModel
from redist.atoms import Atom, dims_atoms, unreduced_atoms
from redist.bounds import lower_bound_bytes
from redist.caches import clear_caches
from redist.enumerate import all_types
from redist.errors import StepError
from redist.exchange import (
    ExchangeTooFineError,
    check_schedule,
    check_size,
    limits,
    merges,
    routing,
    schedule,
)
from redist.exchange.packing import pack_schedule
from redist.exchange.routes import route
from redist.exchange_classes import classes
from redist.simulate import check, scatter, simulate
from redist.steps import Exchange
from redist.synth import synthesize
from spmd_types import Mesh, ShardingType, parse


def _unfactored(s: ShardingType, d: ShardingType) -> tuple[int, int, np.ndarray]:
    """Cells, rounds and cells per device of the exchange routed on the whole mesh (the merging
    one where ``schedule`` picks it)."""
    grid, n_dev, routed = route(s, d, True, merges(s, d))
    sch = pack_schedule(grid, n_dev, routed, tuple(n for _, n in s.mesh.axes))
    return int(sch.recv_cells.sum()), len(sch.rounds), sch.recv_cells


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    mesh = draw(meshes(max_axes=4, max_size=4, max_devices=32))
    shape = draw(shapes_for(mesh, draw(st.integers(1, 3))))
    s = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=draw(st.booleans()), subaxes=True))
    d = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=draw(st.booleans()), subaxes=True))
    return s, d


@given(_pairs())
def test_the_factored_exchange_is_the_unfactored_one(pair: tuple[ShardingType, ShardingType]) -> None:
    s, d = pair
    try:
        cells, rounds, per_device = _unfactored(s, d)
    except StepError:
        return
    r, sch = routing(s, d), schedule(s, d)
    assert len(sch.rounds) == r.rounds and int(sch.recv_cells.sum()) == r.cells
    c = classes(s, d)
    used = {x for t in (s, d) for x in (*unreduced_atoms(t), *(y for dim in dims_atoms(t) for y in dim))}
    idle = c is not None and bool(set(c.factored) - used)
    if c is not None and s.unreduced and (not c.quotient_old.unreduced or idle):
        # only kept partials: inside a class the replicas of the source are interchangeable
        # (every class takes the same replica for a cell), which the whole mesh cannot see;
        # idle atoms (replicas in both types) put each replica of the source in its own class
        assert r.cells <= cells and (sch.recv_cells <= per_device).all()
        return
    assert (r.cells, r.rounds) == (cells, rounds)
    assert np.array_equal(sch.recv_cells, per_device)


@given(_pairs(), st.booleans())
def test_quotient_types_are_what_the_validating_constructor_builds(
        pair: tuple[ShardingType, ShardingType], merged: bool) -> None:
    """``classes`` builds its quotients from atoms without validation (``type_of_atoms``): each
    must equal, local shape included, the type ``ShardingType`` validates from the same text."""
    c = classes(*pair, merged)
    if c is None:
        return
    for q in (c.quotient_old, c.quotient_new):
        again = parse(str(q), q.mesh)
        assert (q, q.dims, q.unreduced, q.local_shape) == (again, again.dims, again.unreduced, again.local_shape)


@given(_pairs(), st.integers(0, 2**31 - 1))
def test_the_lifted_schedule_moves_the_right_data(pair: tuple[ShardingType, ShardingType], seed: int) -> None:
    s, d = pair
    x = np.random.default_rng(seed).integers(-8, 8, size=s.shape).astype(np.float32)
    step = Exchange(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None)
    try:
        schedule(s, d)
    except StepError:
        return
    xs = simulate([step], [s, d], scatter(x, s, np.random.default_rng(seed)))
    check(xs, d, x)


@pytest.mark.parametrize("src,dst", [("f32[8@y]{U:x}", "f32[8]{U:x}"), ("f32[8@y,4]{U:(x,z)}", "f32[8,4@y]{U:x}")])
def test_kept_partials_stay_consistent_across_replicas(src: str, dst: str) -> None:
    """Kept partials with replicas of the source: each class may take a cell from any replica, but
    every class takes it from the same one, so each group of kept partials sums to the value."""
    mesh = Mesh({"x": 2, "y": 2, "z": 2})
    s, d = parse(src, mesh), parse(dst, mesh)
    x = np.arange(32, dtype=np.float32).reshape(s.shape) if s.rank == 2 else np.arange(8, dtype=np.float32)
    for seed in range(5):
        xs = simulate([Exchange(d.dims, None if d.unreduced == s.unreduced else d.sorted_unreduced())], [s, d],
                      scatter(x, s, np.random.default_rng(seed)))
        check(xs, d, x)


CASES = [  # (mesh, src, dst, classes): a shared major prefix, kept partials, both, aligned, idle
    ({"x": 2, "y": 2, "z": 2}, "f32[8@(x,y),4]", "f32[8@(x,z),4@y]", 2),
    ({"x": 2, "y": 2, "z": 2}, "f32[8@(x,y),4]", "f32[8@(z,y),4@x]", 2),
    ({"x": 2, "y": 2, "z": 2}, "f32[8@x,4]", "f32[8,4@x]{U:y}", 2),
    ({"x": 2, "y": 2, "z": 2}, "f32[8@y,4]{U:(x,z)}", "f32[8,4@y]{U:x}", 2),
    ({"x": 4, "y": 2}, "f32[8@(x:(1)2,y),4]{U:x:(2)2}", "f32[8@x:(1)2,4@y]{U:x:(2)2}", 4),
]


@pytest.mark.parametrize("axes,src,dst,count", CASES)
def test_classes_factor_what_both_types_use_alike(axes: dict[str, int], src: str, dst: str, count: int) -> None:
    mesh = Mesh(axes)
    s, d = parse(src, mesh), parse(dst, mesh)
    c = classes(s, d)
    assert c is not None and c.n_classes == count
    assert c.quotient_old.local_shape == s.local_shape and c.quotient_new.local_shape == d.local_shape
    assert sorted(c.devices.reshape(-1).tolist()) == list(range(mesh.size))


def test_idle_atoms_stay_whole_where_partials_are_summed() -> None:
    """Summing once per class of an idle atom would cost ``(classes - 1)(k - 2)`` more cells per
    cell than summing once: with reduced partials idle atoms are not factored."""
    mesh = Mesh({"x": 2, "y": 4, "z": 2})
    assert classes(parse("f32[8@x]{U:y}", mesh), parse("f32[8@y]", mesh)) is None


def test_a_large_mesh_exchange_is_capped_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """65,536 devices moving 64 cells of pending sums each (4M triples, over a limit of 1M): the
    kept ``pod`` partials split them into 16 classes of 4,096 devices, 262,144 triples each."""
    monkeypatch.setattr(limits, "MAX_CELLS", 1 << 20)
    clear_caches("plans")
    mesh = Mesh({"pod": 16, "data": 64, "model": 64})
    s = parse("f32[4096@model,64,1024,4096@data,32768]{U:pod}", mesh)
    d = parse("f32[4096,64,1024,4096@model,32768@data]{U:pod}", mesh)
    c = classes(s, d)
    assert c is not None and c.n_classes == 16
    assert 64 * mesh.size > limits.MAX_CELLS
    check_size(s, d)  # not refused
    r, q = routing(s, d), routing(c.quotient_old, c.quotient_new)
    assert r.cell == q.cell == (64, 64, 1024, 64, 512)
    assert (r.cells, r.rounds) == (16 * q.cells, q.rounds)
    assert r.cells * math.prod(r.cell) * s.itemsize == lower_bound_bytes(s, d) * mesh.size  # the transfer bound
    clear_caches("plans")


BINARY16 = Mesh({f"a{i}": 2 for i in range(16)})


def test_an_aligned_atom_halves_a_reducing_exchange_at_65536_devices() -> None:
    """An issue-12 ladder pair: ``a4`` shards dimension 0 behind 4 devices' worth of atoms in both
    types, so it numbers two classes of 32,768 devices (1,048,576 triples each); the routing meets
    the transfer bound."""
    s = parse("f32[128@(a2,a3,a4,a9),1024@(a5,a14,a15,a0)]{U:(a10,a11,a12)}", BINARY16)
    d = parse("f32[128@(a7,a6,a4),1024@(a10,a9,a14)]{U:a13}", BINARY16)
    c = classes(s, d)
    assert c is not None and c.n_classes == 2 and c.factored == (Atom("a4", 1, 2),)
    r = routing(s, d)
    assert r.cells * math.prod(r.cell) * s.itemsize == lower_bound_bytes(s, d) * BINARY16.size


def test_a_plain_exchange_past_the_limit_is_not_planned() -> None:
    """65,536 devices moving 256 cells each (16.8M triples): the closed form knows its figures,
    but no schedule could be built to lower it, so planning refuses it and the plan holds no
    exchange that fine (above the bound, the ladder's "exchange refused")."""
    mesh = Mesh({"pod": 4, "data": 16, "fsdp": 16, "seq": 4, "model": 16})
    s, d = parse("f32[32768@model,131072@(data,fsdp)]", mesh), parse("f32[32768@(seq,pod,data,fsdp),131072]", mesh)
    assert classes(s, d) is None
    with pytest.raises(ExchangeTooFineError, match=r"16,777,216 > MAX_CELLS = 4,194,304"):
        check_size(s, d)
    plan = synthesize(s, d, CostModel(objective="bytes"))
    assert plan.recv_bytes > lower_bound_bytes(s, d)
    ts = plan.all_types
    for i, step in enumerate(plan.steps):  # what it holds instead can be scheduled
        if step.kind == "exchange":
            check_schedule(ts[i], ts[i + 1])


def _aligned_pairs(axes: dict[str, int], shape: tuple[int, ...]) -> list[tuple[ShardingType, ShardingType]]:
    """Every pair of types on ``axes`` whose classes factor an aligned atom that is not part of a
    shared major prefix (rare among random pairs: 5 in 1,000 of ``_pairs``)."""
    mesh = Mesh(axes)
    ts = list(all_types(mesh, shape, "f32"))
    out = []
    for s, d in itertools.product(ts, ts):
        prefix = set()
        for a, b in zip(dims_atoms(s), dims_atoms(d)):
            prefix |= {x for x, _ in itertools.takewhile(lambda xy: xy[0] == xy[1], zip(a, b))}
        c = classes(s, d)
        if c is not None and set(c.factored) & {x for dim in dims_atoms(s) for x in dim} - prefix:
            out.append((s, d))
    return out


@pytest.mark.parametrize("axes,shape,count", [({"x": 2, "y": 2, "z": 2}, (8, 8), 204),
                                              ({"w": 2, "x": 2, "y": 2, "z": 2}, (4, 8), 9384)])
def test_aligned_atoms_factor_exactly(axes: dict[str, int], shape: tuple[int, ...], count: int) -> None:
    """Such pairs (every one on 3 axes, an even sample of about 250 on 4, pending sums included):
    the lifted figures are the whole mesh's, and the lifted schedule moves the right data (against
    the global array, a decomposition per replica)."""
    pairs = _aligned_pairs(axes, shape)
    assert len(pairs) == count
    sample = pairs[::max(1, len(pairs) // 250)]
    assert any(s.unreduced or d.unreduced for s, d in sample)
    for i, (s, d) in enumerate(sample):
        cells, rounds, per_device = _unfactored(s, d)
        r, sch = routing(s, d), schedule(s, d)
        assert (r.cells, r.rounds, len(sch.rounds)) == (cells, rounds, rounds), (s, d)
        assert np.array_equal(sch.recv_cells, per_device), (s, d)
        x = np.random.default_rng(i).integers(-8, 8, size=s.shape).astype(np.float32)
        step = Exchange(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None)
        check(simulate([step], [s, d], scatter(x, s, np.random.default_rng(i))), d, x)
