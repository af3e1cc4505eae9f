"""Vectorised index math (spmd_types.layout) against per-device definitions and dense counters."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import mesh_and_type, meshes, pending_pairs, sharding_types, type_pairs

from redist.bounds import _nested_figures, lower_bound_bytes, overlap_figures, unreduced_bound_floor
from spmd_types import Mesh, ShardingType, SubAxis, parse
from spmd_types.layout import (
    axis_coords,
    block_bounds,
    block_indices,
    overlap_elements,
    overlap_summary,
    overlap_widths,
    reduction_group_coords,
)

SMALL = dict(max_devices=48, subaxes=True, max_rank=3, max_factor=2)


@given(st.data())
def test_axis_coords_match_mesh_axis_coord(data):
    mesh = data.draw(meshes(max_devices=64))
    name, n = data.draw(st.sampled_from(mesh.axes))
    subs = [(p, s) for p in range(1, n + 1) for s in range(1, n + 1) if n % (p * s) == 0]
    pre, size = data.draw(st.sampled_from(subs))
    for a in (name, SubAxis(name, pre, size)):
        got = axis_coords(mesh, a)
        assert got.dtype == np.int64 and got.shape == (mesh.size,)
        assert got.tolist() == [mesh.axis_coord(a, mesh.coords(d)) for d in range(mesh.size)]


@given(mesh_and_type(max_devices=64, subaxes=True))
def test_block_bounds_equal_per_device_block(mt):
    mesh, t = mt
    bounds = block_bounds(t)
    assert bounds.dtype == np.int64 and bounds.shape == (mesh.size, t.rank, 2)
    np.testing.assert_array_equal(bounds, np.asarray(t.blocks()))
    idx = block_indices(t)
    for dev in range(mesh.size):
        assert bounds[dev].tolist() == [list(b) for b in t.block(dev)]
        assert tuple(idx[dev]) == t.block_index(mesh.coords(dev))
    np.testing.assert_array_equal(bounds[..., 1] - bounds[..., 0], np.broadcast_to(t.local_shape, (mesh.size, t.rank)))


@given(mesh_and_type(**SMALL))
def test_blocks_tile_exactly_replication_times(mt):
    """Dense counter: every global element is held by exactly ``replication`` devices, and among
    them every combination of unreduced coordinates occurs equally often (each partial summand is
    held by the same number of devices)."""
    mesh, t = mt
    assume(math.prod(t.shape) <= 20000)
    bounds = block_bounds(t)
    groups = reduction_group_coords(t)
    n_groups = math.prod(mesh.axis_size(a) for a in t.unreduced)
    assert groups.shape == (mesh.size,) and set(groups.tolist()) <= set(range(n_groups))
    counter = np.zeros((n_groups, *t.shape), dtype=np.int64)
    for dev in range(mesh.size):
        box = tuple(slice(lo, hi) for lo, hi in bounds[dev])
        counter[(groups[dev], *box)] += 1
    assert (counter.sum(axis=0) == t.replication).all()
    assert (counter == t.replication // n_groups).all()


def test_tiling_example_with_subaxes_and_unreduced():
    m = Mesh({"x": 2, "y": 6})
    t = parse("f32[6@(x,y:(2)3),2@(y:(1)2)]", m)
    assert t.replication == 1 and t.local_shape == (1, 1)
    t = parse("f32[12@(x,y:(2)3),2]{U:y:(1)2}", m)
    assert t.local_shape == (2, 2) and t.replication == 2
    b = block_bounds(t)
    # device (x=1, y=4): y:(2)3 = 4 % 3 = 1, y:(1)2 = 4 // 3 = 1 -> block 1*3+1 = 4 of dim 0
    dev = m.device_id({"x": 1, "y": 4})
    assert b[dev].tolist() == [[8, 10], [0, 2]]
    assert reduction_group_coords(t)[dev] == 1


@given(st.data())
def test_overlap_elements_against_dense_boxes(data):
    mesh = data.draw(meshes(max_devices=24))
    a, b = data.draw(type_pairs(mesh, unreduced=True, subaxes=True))
    assume(math.prod(a.shape) <= 5000)
    got = overlap_elements(a, b)
    ba, bb = block_bounds(a), block_bounds(b)
    for dev in range(mesh.size):
        ma = np.zeros(a.shape, dtype=bool)
        mb = np.zeros(a.shape, dtype=bool)
        ma[tuple(slice(lo, hi) for lo, hi in ba[dev])] = True
        mb[tuple(slice(lo, hi) for lo, hi in bb[dev])] = True
        assert got[dev] == (ma & mb).sum()
    np.testing.assert_array_equal(overlap_elements(a, a), np.full(mesh.size, a.local_size))


@given(st.data())
def test_type_pairs_share_shape_and_dtype(data):
    mesh = data.draw(meshes())
    a, b = data.draw(type_pairs(mesh))
    assert a.shape == b.shape and a.dtype == b.dtype and a.mesh == b.mesh == mesh
    assert not b.unreduced


@given(st.data())
def test_strategy_with_fixed_shape(data):
    mesh = data.draw(meshes())
    t = data.draw(sharding_types(mesh, max_rank=3))
    u = data.draw(sharding_types(mesh, shape=t.shape, dtype="bf16", subaxes=True))
    assert u.shape == t.shape and u.dtype == "bf16"


def test_rank_zero_type():
    m = Mesh({"x": 2, "y": 3})
    t = ShardingType((), "f32", [], m, ["y"])
    assert block_bounds(t).shape == (6, 0, 2)
    assert reduction_group_coords(t).tolist() == [0, 1, 2, 0, 1, 2]
    assert overlap_elements(t, t).tolist() == [1] * 6


@given(st.data())
def test_overlap_summary_equals_the_per_device_table(data):
    """Summed per class of devices (components of dimensions sharing no mesh axis, each on the grid
    of its own axes), the overlaps give the per-device table's exact sum and least, over any subset
    of dimensions; ``overlap_figures`` (nested cuts taken as constants) those of every dimension."""
    mesh = data.draw(meshes(max_devices=64))
    a, b = data.draw(type_pairs(mesh, unreduced=True, subaxes=True))
    dims = tuple(data.draw(st.lists(st.sampled_from(range(a.rank)), unique=True))) if a.rank else ()
    table = np.ones(mesh.size, dtype=np.int64)
    for d, w in enumerate(overlap_widths(a, b)):
        if d in dims:
            table = table * w
    assert overlap_summary(a, b, dims) == (int(table.sum()), int(table.min()))
    full = overlap_elements(a, b)
    assert overlap_figures(a, b) == (int(full.sum()), int(full.min()))


@given(st.data())
def test_nested_cuts_are_counted_without_a_table(data):
    """On a mesh of 2s every dimension is cut into equal radices on both sides, so
    ``overlap_figures`` counts the devices whose paired digits agree (``_nested_figures``) and
    gives the per-device table's exact sum and least."""
    shape = data.draw(st.sampled_from([{f"a{i}": 2 for i in range(5)}, {"x": 4, "y": 2, "z": 2}, {"x": 8, "y": 4}]))
    mesh = Mesh(shape)
    a, b = data.draw(type_pairs(mesh, subaxes=True))
    assert _nested_figures(a, b, list(range(a.rank))) is not None
    full = overlap_elements(a, b)
    assert overlap_figures(a, b) == (int(full.sum()), int(full.min()))


def test_nested_cuts_need_equal_radices_and_prime_atoms():
    """Radices that differ position by position (3 then 2, against 2 then 3), or a sub-axis off the
    mesh's prime atoms (``x:(1)3`` on ``x=6``), leave the count to the per-class tables."""
    mesh = Mesh({"x": 2, "y": 3})
    a, b = parse("f32[36@(y,x)]", mesh), parse("f32[36@(x,y)]", mesh)
    assert _nested_figures(a, b, [0]) is None
    assert overlap_figures(a, b) == (int(overlap_elements(a, b).sum()), int(overlap_elements(a, b).min()))
    six = Mesh({"x": 6})
    c, d = parse("f32[36@(x:(1)3)]", six), parse("f32[36@(x:(3)2)]", six)
    assert _nested_figures(c, d, [0]) is None


@given(pending_pairs(max_devices=48))
def test_unreduced_bound_floor_is_at_most_the_bound(pair):
    """The synthesizer's cheap key (every element counted as consistent) never exceeds the bound."""
    a, b = pair
    assume(a.unreduced or b.unreduced)
    floor = unreduced_bound_floor(a, b)
    if floor is None:  # a sub-axis across the mesh's prime atoms (``x:(3)2`` on ``x=6``)
        assert any(isinstance(x, SubAxis) for t in (a, b) for x in (*t.unreduced, *(y for d in t.dims for y in d)))
        return
    assert floor <= lower_bound_bytes(a, b)
