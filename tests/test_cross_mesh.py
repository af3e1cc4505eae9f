"""Moves between meshes over other devices: placements, plans, their certificates and execution.

Plans are checked on up to 16 devices against a per-element NumPy reference of who holds what
(written here from the row-major definition, not from ``spmd_types.layout``); execution on up to
8 simulated CPU devices against NumPy slices of the global array on every destination device.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from typing import Any
from unittest import mock

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding, PartitionSpec

import redist
from proofs import VerificationError
from proofs.cross_mesh import verify_cross_mesh
from redist import (
    CrossMeshPlan,
    ExecutionError,
    IncompatibleTypesError,
    cross_direct,
    cross_mesh_plan,
    redistribute,
    run_cross_mesh,
)
from redist.cross_exec import Transport, runner_for, transport_for
from redist.cross_host import host_runner
from spmd_types import IndivisibleDimensionError, Mesh, ShardingType, parse
from spmd_types.errors import MeshError, TypeSyntaxError, UnknownAxisError
from spmd_types.jax_placement import placement_of, placement_of_sharding, to_named_sharding
from spmd_types.placement import (
    DuplicateDeviceError,
    Placement,
    PlacementError,
    PlacementSyntaxError,
    UnknownDeviceError,
)

NAMES = ("a", "b", "c")
TRANSPORTS = (Transport.UNION, Transport.DIRECT, Transport.HOST)


@st.composite
def layouts(draw: st.DrawFn, max_devices: int, rank: int) -> tuple[Mesh, list[tuple[str, ...]]]:
    """A mesh of 1-3 axes of sizes 1-5 (at most ``max_devices`` devices) and per dimension an
    ordered tuple of its axes (each axis on one dimension or none)."""
    sizes: list[int] = []
    for _ in range(draw(st.integers(1, 3))):
        room = max_devices // math.prod(sizes or [1])
        if room < 1:
            break
        sizes.append(draw(st.integers(1, min(5, room))))
    mesh = Mesh(dict(zip(NAMES, sizes)))
    dims: list[list[str]] = [[] for _ in range(rank)]
    for n in draw(st.permutations(list(mesh.names))):
        d = draw(st.integers(-1, rank - 1))
        if d >= 0:
            dims[d].append(n)
    return mesh, [tuple(d) for d in dims]


@st.composite
def moves(draw: st.DrawFn, max_devices: int) -> tuple[Placement, Placement]:
    """Two placements of one array over random subsets of ``range(max_devices)`` in random order."""
    rank = draw(st.integers(1, 3))
    (sm, sd), (dm, dd) = draw(layouts(max_devices, rank)), draw(layouts(max_devices, rank))
    shape = tuple(math.lcm(math.prod(sm.axis_size(a) for a in sd[k]), math.prod(dm.axis_size(a) for a in dd[k]))
                  * draw(st.integers(1, 2)) for k in range(rank))
    ids = list(range(max_devices))
    src_dev = draw(st.permutations(ids))[: sm.size]
    dst_dev = draw(st.permutations(ids))[: dm.size]
    return (Placement(ShardingType(shape, "f32", sd, sm), tuple(src_dev)),
            Placement(ShardingType(shape, "f32", dd, dm), tuple(dst_dev)))


def reference_blocks(t: ShardingType) -> list[tuple[slice, ...]]:
    """Per mesh position, its block as slices: coordinates row-major over the axes, the block
    index along a dimension the mixed-radix number of its axes' coordinates, major first."""
    sizes = [s for _, s in t.mesh.axes]
    out = []
    for p in range(t.mesh.size):
        coords = dict(zip(t.mesh.names, np.unravel_index(p, sizes)))
        idx = []
        for k, axes in enumerate(t.dims):
            b, n = 0, 1
            for a in axes:
                b, n = b * t.mesh.axis_size(a) + int(coords[a]), n * t.mesh.axis_size(a)
            w = t.shape[k] // n
            idx.append(slice(b * w, (b + 1) * w))
        out.append(tuple(idx))
    return out


def lacking_elements(src: Placement, dst: Placement) -> dict[int, int]:
    """Per destination device: elements of its block outside its source block, element by element."""
    shape = src.type.shape
    out = {}
    for q, g in enumerate(dst.devices):
        want = np.zeros(shape, bool)
        want[reference_blocks(dst.type)[q]] = True
        p = src.position_of(g)
        if p is not None:
            want[reference_blocks(src.type)[p]] = False
        out[g] = int(want.sum())
    return out


def check_plan(plan: CrossMeshPlan) -> None:
    """Bounds met on every device, against the element-wise reference, and certified."""
    item = plan.src.type.itemsize
    recv, lack = plan.recv_bytes(), lacking_elements(plan.src, plan.dst)
    for g in plan.union:
        assert recv[g] == lack.get(g, 0) * item, (g, recv[g], lack.get(g, 0))
    assert plan.peak_bytes() <= plan.memory_bound_bytes
    cert = verify_cross_mesh(plan)
    assert cert.ok and cert.proved == ("delivery", "recv", "memory")
    edges = [(m.sender, m.receiver) for m in plan.messages]
    degree = max([edges.count(e) for e in edges] + [sum(1 for e in edges if e[0] == s) for s, _ in edges]
                 + [sum(1 for e in edges if e[1] == r) for _, r in edges], default=0)
    assert plan.rounds == degree  # edge colouring: the fewest rounds possible


@given(moves(16))
def test_plans_on_up_to_16_devices_meet_the_bounds_and_are_certified(move: tuple[Placement, Placement]) -> None:
    check_plan(cross_mesh_plan(*move))


def jax_mesh(p: Placement) -> jax.sharding.Mesh:
    return to_named_sharding(p).mesh


@given(moves(8), st.sampled_from(["float32", "int32", "bfloat16"]))
def test_moves_on_8_devices_give_numpy_slices_on_every_destination_device(move: tuple[Placement, Placement],
                                                                          dtype: str) -> None:
    src, dst = move
    src, dst = (Placement(_with_dtype(p.type, dtype), p.devices) for p in (src, dst))
    g = (np.arange(math.prod(src.type.shape)) % 251).astype(dtype).reshape(src.type.shape)
    x = jax.device_put(g, to_named_sharding(src))
    plan = cross_mesh_plan(src, dst)
    want = jax.device_put(x, to_named_sharding(dst))
    blocks = reference_blocks(dst.type)
    for transport in TRANSPORTS:
        with mock.patch.object(cross_direct, "send", wraps=cross_direct.send) as sent:
            y = run_cross_mesh(plan, x, transport=transport)
        if transport is Transport.DIRECT:  # the copies are the plan's messages, byte for byte
            copies = [(next(iter(a.devices())).id, t.id, a.nbytes) for c in sent.call_args_list for a, t in zip(*c.args)]
            assert copies == [(m.sender, m.receiver, plan.piece_bytes(m)) for m in plan.messages]
        else:
            assert not sent.called
        assert y.sharding.is_equivalent_to(want.sharding, g.ndim) and y.dtype == g.dtype
        by_dev = {s.device.id: np.asarray(s.data) for s in y.addressable_shards}
        assert sorted(by_dev) == sorted(dst.devices)
        for q, d in enumerate(dst.devices):
            np.testing.assert_array_equal(by_dev[d], g[blocks[q]], err_msg=f"{transport} on device {d}")


UNEVEN = [  # blocks that cut each other off-centre: pieces of several sizes in one round (clamped windows)
    ("f32[6@x,4]", {"x": 2}, (0, 1), "f32[6@x,4]", {"x": 3}, (2, 3, 4)),
    ("f32[12@x,6@y]", {"x": 2, "y": 3}, (5, 0, 3, 1, 7, 2), "f32[12@y,6@x]", {"x": 2, "y": 4}, (7, 6, 5, 4, 3, 2, 1, 0)),
    ("f32[12,6@x]", {"x": 3}, (1, 2, 3), "f32[12@x,6]", {"x": 4}, (3, 0, 6, 1)),
    ("f32[12@x]", {"x": 3}, (0, 1, 2), "f32[12@x]", {"x": 4}, (4, 5, 6, 7)),
    ("f32[2,30@x]", {"x": 3}, (5, 6, 7), "f32[2,30@x]", {"x": 5}, (0, 1, 2, 3, 4)),
    ("f32[12@(x,y)]", {"x": 2, "y": 3}, (0, 1, 2, 3, 4, 5), "f32[12@x]", {"x": 4}, (4, 5, 6, 7)),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", range(len(UNEVEN)))
def test_uneven_cuts_give_numpy_slices(case: int, transport: Transport) -> None:
    st_, sm, sd, dt, dm, dd = UNEVEN[case]
    src, dst = Placement.parse(st_, Mesh(sm), sd), Placement.parse(dt, Mesh(dm), dd)
    g = np.arange(math.prod(src.type.shape), dtype=np.float32).reshape(src.type.shape)
    y = run_cross_mesh(cross_mesh_plan(src, dst), jax.device_put(g, to_named_sharding(src)), transport=transport)
    for q, d in enumerate(dst.devices):
        (shard,) = [s for s in y.addressable_shards if s.device.id == d]
        np.testing.assert_array_equal(np.asarray(shard.data), g[reference_blocks(dst.type)[q]])


def _short(dtype: str) -> str:
    return {"float32": "f32", "int32": "s32", "bfloat16": "bf16"}[dtype]


def _with_dtype(t: ShardingType, dtype: str) -> ShardingType:
    return ShardingType(t.shape, _short(dtype), [tuple(d) for d in t.dims], t.mesh)


# -- the three moves of the benchmark, through every entry point --------------------------------------


def _named(shape: tuple[int, ...], names: tuple[str, ...], ids: list[int], *spec: Any) -> NamedSharding:
    devs = {d.id: d for d in jax.devices()}
    mesh = jax.sharding.Mesh(np.array([devs[i] for i in ids]).reshape(shape), names,
                             axis_types=(jax.sharding.AxisType.Explicit,) * len(names))
    return NamedSharding(mesh, PartitionSpec(*spec))


CASES = {
    "pipeline": (_named((4,), ("x",), [0, 1, 2, 3], "x"), _named((4,), ("x",), [4, 5, 6, 7], "x")),
    "trainer_to_sampler": (_named((2, 2, 2), ("data", "fsdp", "model"), list(range(8)), ("data", "fsdp"), "model"),
                           _named((4,), ("model",), [4, 5, 6, 7], None, "model")),
    "resize_8_to_4": (_named((8,), ("x",), list(range(8)), "x"), _named((4,), ("x",), [0, 1, 2, 3], "x")),
    "resize_4_to_8": (_named((4,), ("x",), [0, 1, 2, 3], "x"), _named((8,), ("x",), list(range(8)), "x")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reshard_and_redistribute_move_between_meshes(case: str) -> None:
    s, d = CASES[case]
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    x = jax.device_put(g, s)
    y, want = redist.reshard(x, d), jax.device_put(x, d)
    assert y.sharding == d
    for a in y.addressable_shards:
        np.testing.assert_array_equal(np.asarray(a.data), g[a.index])
    assert y.sharding.is_equivalent_to(want.sharding, 2)
    plan = redistribute(placement_of(x), placement_of_sharding(d, g.shape, g.dtype))
    assert isinstance(plan, CrossMeshPlan)
    check_plan(plan)


def test_record_lists_moves_between_meshes_with_their_plans() -> None:
    s, d = CASES["trainer_to_sampler"]
    x = jax.device_put(np.ones((64, 32), np.float32), s)
    with redist.record() as log:
        redist.reshard(x, d)
        redist.reshard(x, d)  # cached: recorded again
    want = cross_mesh_plan(placement_of(x), placement_of_sharding(d, x.shape, x.dtype))
    assert log.cross_mesh == [want, want] and log.plans == [] and log.delegated == []
    (e, _) = log.entries
    assert (e.src, e.dst) == (str(want.src), str(want.dst))
    assert str(log) == f"{want}\n{want}" and "round 3:" in str(log)


def test_reshard_moves_pytrees_and_keys_between_meshes() -> None:
    s, d = CASES["trainer_to_sampler"]
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    tree = {"w": jax.device_put(g, s), "b": jax.device_put(g[0], NamedSharding(s.mesh, PartitionSpec("model")))}
    dsts = {"w": d, "b": NamedSharding(d.mesh, PartitionSpec("model"))}
    out = redist.reshard(tree, dsts)
    for k in tree:
        assert out[k].sharding == dsts[k]
        for a in out[k].addressable_shards:
            np.testing.assert_array_equal(np.asarray(a.data), (g if k == "w" else g[0])[a.index])
    keys = jax.device_put(jax.random.split(jax.random.key(0), 8), NamedSharding(s.mesh, PartitionSpec("data")))
    moved = redist.reshard(keys, NamedSharding(d.mesh, PartitionSpec("model")))
    assert {sh.device.id for sh in moved.addressable_shards} == {4, 5, 6, 7}
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(moved)), np.asarray(jax.random.key_data(keys)))


def test_a_pipeline_hand_off_sends_each_block_once_in_one_round() -> None:
    s, d = CASES["pipeline"]
    plan = cross_mesh_plan(placement_of_sharding(s, (64, 32), "float32"), placement_of_sharding(d, (64, 32), "float32"))
    assert plan.rounds == 1 and [(m.sender, m.receiver) for m in plan.messages] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert sum(plan.recv_bytes().values()) == 64 * 32 * 4


def test_replicated_sources_spread_the_sends() -> None:
    """A source replicated on 4 devices feeding 4 others: each holder sends one block."""
    src = Placement(parse("f32[64]", Mesh({"x": 4})), (0, 1, 2, 3))
    dst = Placement(parse("f32[64@x]", Mesh({"x": 4})), (4, 5, 6, 7))
    sent = cross_mesh_plan(src, dst).sent_bytes()
    assert [sent[g] for g in (0, 1, 2, 3)] == [64, 64, 64, 64]


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_jit_a_move_to_other_devices_is_jaxs_reshard_as_the_howto_says(case: str) -> None:
    """docs/howto/cross-mesh.md, 'Under jax.jit': a destination mesh of the same axis names and
    sizes leaves the array on the source's devices; any other raises JAX's ValueError when the
    jitted function is called; ``out_shardings`` on other devices always raises."""
    s, d = CASES[case]
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    x = jax.device_put(g, s)
    if dict(s.mesh.shape) == dict(d.mesh.shape):
        for move in (redist.reshard, jax.sharding.reshard):
            y = jax.jit(lambda a, move=move: move(a, d))(x)  # type: ignore[misc]
            assert y.sharding.device_set == s.device_set and y.sharding.is_equivalent_to(NamedSharding(s.mesh, d.spec), 2)
            np.testing.assert_array_equal(np.asarray(y), g)
    else:
        for move in (redist.reshard, jax.sharding.reshard):
            with pytest.raises(ValueError, match="Length of device assignment"):
                jax.jit(lambda a, move=move: move(a, d))(x)  # type: ignore[misc]
    with pytest.raises(ValueError, match="incompatible devices for jitted computation"):
        jax.jit(lambda a: a * 1, out_shardings=d)(x)


# -- the transports: the plan's pieces and nothing else ------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_copies_move_exactly_the_plans_messages(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every array handed to the batched copy, caught on its way: its holder, its target and its
    bytes are one of the plan's messages, in order, so each device receives the plan's bytes."""
    s, d = CASES[case]
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    x = jax.device_put(g, s)
    plan = cross_mesh_plan(placement_of(x), placement_of_sharding(d, g.shape, g.dtype))
    seen: list[tuple[int, int, int]] = []

    def spy(arrays: list[Any], devices: Any) -> list[Any]:
        seen.extend((next(iter(a.devices())).id, t.id, a.nbytes) for a, t in zip(arrays, devices))
        return real(arrays, devices)

    real = cross_direct.send
    monkeypatch.setattr(cross_direct, "send", spy)
    y = run_cross_mesh(plan, x, d, transport="direct")
    assert seen == [(m.sender, m.receiver, plan.piece_bytes(m)) for m in plan.messages]
    got = dict.fromkeys(plan.union, 0)
    for _, r, n in seen:
        got[r] += n
    assert got == plan.recv_bytes() == plan.lower_bound_bytes()
    for a in y.addressable_shards:
        np.testing.assert_array_equal(np.asarray(a.data), g[a.index])


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_copies_write_exactly_the_plans_pieces(case: str) -> None:
    """Each destination block is written from the plan's pieces, each cell once: the writes from
    other devices are the plan's messages, byte for byte, and a block that is the receiver's
    own whole source block is kept, not written."""
    s, d = CASES[case]
    plan = cross_mesh_plan(placement_of_sharding(s, (64, 32), "float32"), placement_of_sharding(d, (64, 32), "float32"))
    r = host_runner(plan)
    recv = dict.fromkeys(plan.union, 0)
    for g, keep, writes in r.blocks:
        cells = sum(math.prod(sl.stop - sl.start for sl in w.put) for w in writes)
        assert cells == math.prod(plan.dst.type.local_shape)  # the block, each cell once (pieces are disjoint)
        for w in writes:
            if w.sender != g:
                recv[g] += math.prod(sl.stop - sl.start for sl in w.put) * 4
        assert not keep or (len(writes) == 1 and writes[0].sender == g)
    assert recv == plan.recv_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_donating_the_source_after_a_host_move_leaves_the_result_intact(case: str) -> None:
    """Host copies may place views of the source's buffers: a later donation of the source must
    not reach the result (JAX then copies instead of reusing the buffer)."""
    s, d = CASES[case]
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    x = jax.device_put(g, s)
    y = run_cross_mesh(cross_mesh_plan(placement_of(x), placement_of_sharding(d, g.shape, g.dtype)), x, d,
                       transport="host")
    jax.block_until_ready(jax.jit(lambda a: a * 0 - 1, donate_argnums=0)(x))
    for a in y.addressable_shards:
        np.testing.assert_array_equal(np.asarray(a.data), g[a.index])


@pytest.mark.parametrize("transport", ["host", "direct"])
def test_a_kept_block_is_the_source_buffer_as_with_device_put(transport: str) -> None:
    """Devices 0-2 keep their blocks: the result holds the source's buffers there, as
    ``jax.device_put`` does, so donating the source deletes the result too, for both alike."""
    s = _named((4,), ("x",), [0, 1, 2, 3], "x")
    d = _named((4,), ("x",), [0, 1, 2, 7], "x")
    g = np.arange(64, dtype=np.float32)
    plan = cross_mesh_plan(placement_of_sharding(s, g.shape, g.dtype), placement_of_sharding(d, g.shape, g.dtype))
    assert [c.sender for c in plan.local] == [0, 1, 2] and [(m.sender, m.receiver) for m in plan.messages] == [(3, 7)]
    for move in (lambda a: run_cross_mesh(plan, a, d, transport=transport), lambda a: jax.device_put(a, d)):
        x = jax.device_put(g, s)
        y = move(x)
        np.testing.assert_array_equal(np.asarray(y), g)
        y = move(x := jax.device_put(g, s))
        jax.block_until_ready(jax.jit(lambda a: a * 0 - 1, donate_argnums=0)(x))
        with pytest.raises(RuntimeError, match="deleted"):
            np.asarray(y)


def test_auto_copies_in_one_process_and_bad_transports_are_typed_errors() -> None:
    s, d = CASES["pipeline"]
    plan = cross_mesh_plan(placement_of_sharding(s, (64, 32), "float32"), placement_of_sharding(d, (64, 32), "float32"))
    assert transport_for(plan) is Transport.HOST  # 8 CPU devices of this process
    assert runner_for(plan, "union") is not runner_for(plan, "host")
    x = jax.device_put(np.ones((64, 32), np.float32), s)
    with pytest.raises(ExecutionError, match="transport='pigeon' is not one of"):
        run_cross_mesh(plan, x, transport="pigeon")
    with pytest.raises(ExecutionError, match="out_sharding is on devices"):
        run_cross_mesh(plan, x, s)


# -- the device order that minimises traffic ---------------------------------------------------------


def test_best_device_order_undoes_a_reversed_mesh() -> None:
    src = Placement(parse("f32[64@x]", Mesh({"x": 4})), (0, 1, 2, 3))
    got = redist.best_device_order(src, parse("f32[64@x]", Mesh({"x": 4})), (3, 2, 1, 0))
    assert got.placement.devices == (0, 1, 2, 3) and got.saved_bytes == 256
    assert sum(got.plan.recv_bytes().values()) == 0 and not got.plan.messages


@given(moves(6))
def test_best_device_order_is_optimal_over_every_order(move: tuple[Placement, Placement]) -> None:
    src, dst = move
    got = redist.best_device_order(src, dst.type, dst.devices)
    best = min(sum(cross_mesh_plan(src, Placement(dst.type, order)).recv_bytes().values())
               for order in itertools.permutations(dst.devices))
    given_recv = sum(cross_mesh_plan(src, dst).recv_bytes().values())
    assert sum(got.plan.recv_bytes().values()) == best == given_recv - got.saved_bytes
    assert sorted(got.placement.devices) == sorted(dst.devices)


# -- placements as text -------------------------------------------------------------------------------


@given(moves(16), st.sampled_from([(), ("R", 0)]))
def test_placement_text_round_trips(move: tuple[Placement, Placement], extra: tuple[Any, ...]) -> None:
    for p in move:
        if extra and p.mesh.names:  # a reduced axis: the type's own {R:..} group before ' on '
            used = {a for d in p.type.dims for a in d}
            free = [n for n in p.mesh.names if n not in used]
            if free:
                p = Placement(ShardingType(p.type.shape, "f32", [tuple(d) for d in p.type.dims], p.mesh,
                                           reduced=[free[0]]), p.devices)
        text = str(p)
        assert Placement.parse(text) == p
        head = text.rsplit(" at devices ", 1)[0]
        spaced = f"  {head}  at  devices ( {', '.join(map(str, p.devices))}, ) "  # spaces, a tuple's parentheses
        assert Placement.parse(spaced) == p


@pytest.mark.parametrize(("text", "error", "match"), [
    ("f32[8@x] at devices [0,1]", PlacementSyntaxError, "expected ' on {mesh}'"),
    ("f32[8@x] on {x=2} at [0,1]", PlacementSyntaxError, "expected 'at devices"),
    ("f32[8@x] on {x=2} at devices [0,a]", PlacementSyntaxError, "device id 'a' is not an integer >= 0 at column 33"),
    ("f32[8@x] on {x=2} at devices [0,1)", PlacementSyntaxError, "expected 'at devices"),
    ("f32[8@x on {x=2} at devices [0,1]", TypeSyntaxError, "column 8"),
    ("f32[8@x] on {x2} at devices [0,1]", MeshError, "'x2'"),
    ("f32[8@w] on {x=2} at devices [0,1]", UnknownAxisError, "w"),
    ("f32[8@x] on {x=2} at devices [0]", PlacementError, "2 positions but 1"),
    ("f32[8@x] on {x=2} at devices [3,3]", DuplicateDeviceError, "device 3"),
])
def test_bad_placement_text_is_a_typed_error_naming_the_part(text: str, error: type, match: str) -> None:
    with pytest.raises(error, match=re.escape(match) if "column" in match or "'" in match else match):
        Placement.parse(text)


def test_redist_plan_takes_two_placements(capsys: pytest.CaptureFixture[str]) -> None:
    from redist_cli.main import main

    src, dst = "f32[64@x,32] on {x=4} at devices [0,1,2,3]", "f32[64,32@y] on {y=4} at devices [2,3,4,5]"
    assert main(["plan", src, dst]) == 0
    out = capsys.readouterr().out
    plan = cross_mesh_plan(Placement.parse(src), Placement.parse(dst))
    assert out.startswith(str(plan) + "\n") and "proved: delivery, recv, memory" in out
    assert f"cross-mesh move {src}\n" in out
    assert main(["plan", src, "f32[64@x,32]"]) == 2 and "two placements" in capsys.readouterr().err
    assert main(["plan", src, dst, "--mesh", "x=4"]) == 2 and "--mesh apply to a move on one mesh" in capsys.readouterr().err


# -- errors -------------------------------------------------------------------------------------------


def test_bad_placements_are_typed_errors() -> None:
    t = parse("f32[8@x]", Mesh({"x": 2}))
    with pytest.raises(DuplicateDeviceError, match="device 3 is at positions 0 and 1"):
        Placement(t, (3, 3))
    with pytest.raises(PlacementError, match="2 positions but 3"):
        Placement(t, (0, 1, 2))
    with pytest.raises(PlacementError, match="integers >= 0"):
        Placement(t, (0, -1))
    with pytest.raises(UnknownDeviceError, match="device 9"):
        to_named_sharding(Placement(t, (0, 9)))
    with pytest.raises(IndivisibleDimensionError):
        placement_of_sharding(_named((4,), ("x",), [4, 5, 6, 7], "x"), (6, 2), "float32")


def test_moves_that_are_not_moves_are_typed_errors() -> None:
    a = Placement(parse("f32[8@x]", Mesh({"x": 2})), (0, 1))
    with pytest.raises(IncompatibleTypesError, match="shapes differ"):
        cross_mesh_plan(a, Placement(parse("f32[16@x]", Mesh({"x": 2})), (2, 3)))
    with pytest.raises(IncompatibleTypesError, match="dtypes differ"):
        cross_mesh_plan(a, Placement(parse("s32[8@x]", Mesh({"x": 2})), (2, 3)))
    with pytest.raises(IncompatibleTypesError, match="pending sum"):
        cross_mesh_plan(Placement(parse("f32[8]{U:x}", Mesh({"x": 2})), (0, 1)), a)
    with pytest.raises(IncompatibleTypesError, match="Placement"):
        cross_mesh_plan(a, "f32[8@x]")  # type: ignore[arg-type]
    with pytest.raises(IncompatibleTypesError, match="destination .*Placement"):
        redistribute(a, "f32[8@x]")  # type: ignore[call-overload]


def test_a_wrong_plan_is_refuted_naming_the_device() -> None:
    s, d = CASES["trainer_to_sampler"]
    plan = cross_mesh_plan(placement_of_sharding(s, (64, 32), "float32"), placement_of_sharding(d, (64, 32), "float32"))
    dropped = dataclasses.replace(plan, messages=plan.messages[1:])
    with pytest.raises(VerificationError, match=f"device {plan.messages[0].receiver} receives cell"):
        verify_cross_mesh(dropped)
    m = plan.messages[0]
    wrong = dataclasses.replace(plan, messages=(m._replace(sender=m.receiver, src_pos=plan.src.position_of(m.receiver)),
                                                *plan.messages[1:]))
    with pytest.raises(VerificationError, match="delivery"):
        verify_cross_mesh(wrong)
