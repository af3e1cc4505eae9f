"""Routing by group (``redist.exchange.rows.provider_rows``): where the new type adds pending sums and
the source has one replica, the routing tabulates one row per (group, cell) instead of one per
(device, cell). It must be the per-device routing exactly: the same transfers, in the same order,
from and to the same offsets (which fixes bytes, rounds and the schedule)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import meshes, shapes_for, sharding_types

from redist.caches import clear_caches
from redist.errors import StepError
from redist.exchange import cells, routes
from redist.exchange.rows import NeedRows
from spmd_types import Mesh, ShardingType, parse


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[ShardingType, ShardingType]:
    mesh = draw(meshes(max_axes=4, max_size=4, max_devices=32))
    shape = draw(shapes_for(mesh, draw(st.integers(0, 3))))
    s = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=draw(st.booleans()), subaxes=True))
    d = draw(sharding_types(mesh, shape=shape, dtype="f32", unreduced=True, subaxes=True))
    return s, d


def _routed(s: ShardingType, d: ShardingType, grouped: bool, monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    real = routes.by_group
    monkeypatch.setattr(routes, "by_group", real if grouped else lambda old, axes: False)
    clear_caches("plans")
    try:
        _, _, r = routes.route.__wrapped__(s, d) if hasattr(routes.route, "__wrapped__") else routes.route(s, d)
    finally:
        monkeypatch.setattr(routes, "by_group", real)
        clear_caches("plans")
    return [*r.local, *r.merge, *r.forward, r.level]


@given(_pairs())
def test_routing_by_group_is_routing_by_device(pair: tuple[ShardingType, ShardingType]) -> None:
    s, d = pair
    if not cells.by_group(s, cells.partial_axes(s, d)):
        return
    with pytest.MonkeyPatch.context() as mp:
        try:
            by_group = _routed(s, d, True, mp)
        except StepError:
            return
        by_device = _routed(s, d, False, mp)
    assert all(np.array_equal(a, b) for a, b in zip(by_group, by_device)), (s, d)


@pytest.mark.parametrize("src,dst", [
    ("f32[8@x,4]", "f32[8,4@x]{U:y}"),
    ("f32[8@(x,y),4]{U:z}", "f32[8@z,4@x]{U:y}"),
    ("f32[8@y,4@x]", "f32[8,4]{U:(x,y)}"),
    ("f32[8@y,4@z]{U:x}", "f32[8@x,4]{U:(y,z)}"),
    ("f32[8@y,4]{U:(x,z)}", "f32[8,4]{U:(x,y)}"),
])
def test_routing_by_group_on_named_pairs(src: str, dst: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mesh = Mesh({"x": 2, "y": 2, "z": 2})
    s, d = parse(src, mesh), parse(dst, mesh)
    assert cells.by_group(s, cells.partial_axes(s, d))
    by_group, by_device = _routed(s, d, True, monkeypatch), _routed(s, d, False, monkeypatch)
    assert all(np.array_equal(a, b) for a, b in zip(by_group, by_device))


@given(st.data())
def test_held_blocks_equal_the_broadcast_division(data: st.DataObject) -> None:
    """``_held_blocks`` and ``_NeedRows.holds_old`` divide per dimension (small tables); they must
    equal the ``[blocks, cells, rank]`` integer division they replaced."""
    rank = data.draw(st.integers(0, 4))
    cell = tuple(data.draw(st.integers(1, 3)) for _ in range(rank))
    per_block = tuple(data.draw(st.integers(1, 4)) for _ in range(rank))
    ratio = tuple(data.draw(st.integers(1, 5)) for _ in range(rank))  # old local / cell
    blocks = tuple(data.draw(st.integers(1, 6)) for _ in range(rank))
    n = data.draw(st.integers(1, 6))
    grid = cells.CellGrid(cell, per_block)
    old_local = np.array([c * r for c, r in zip(cell, ratio)], dtype=np.int64)
    limit = [b * r - p for b, r, p in zip(blocks, ratio, per_block)]  # new blocks inside the grid
    base = np.array([[data.draw(st.integers(0, max(m, 0))) for m in limit] for _ in range(n)],
                    dtype=np.int64).reshape(n, rank)
    if any(m < 0 for m in limit):
        return
    idx = (np.stack(np.unravel_index(np.arange(int(np.prod(per_block))), per_block), axis=-1) if rank
           else np.zeros((1, 0), dtype=np.int64))
    held = (base[:, None, :] + idx[None, :, :]) * np.array(cell, dtype=np.int64) // old_local
    ravel = held.reshape(n * len(idx), rank) @ np.array([int(np.prod(blocks[k + 1:])) for k in range(rank)], dtype=np.int64)
    assert np.array_equal(cells.held_blocks(grid, base, old_local, blocks), ravel.reshape(n, -1))
    old_block = np.array([[data.draw(st.integers(0, b - 1)) for b in blocks] for _ in range(n)],
                         dtype=np.int64).reshape(n, rank)
    rows = NeedRows(np.repeat(np.arange(n), len(idx)), base, idx, np.array(cell, dtype=np.int64),
                              np.zeros(0, np.int64), np.zeros(0, np.int64), False)
    dev = SimpleNamespace(old_local=old_local, old_block=old_block)
    expect = (held == old_block[:, None, :]).all(axis=2).reshape(-1)
    assert np.array_equal(rows.holds_old(dev), expect)  # type: ignore[arg-type]
