"""The vectorised exchange schedule (issue 12): counted facts, never wall-clock.

``redist.exchange.schedule`` builds every phase as NumPy passes over (device, cell) rows. These
tests pin what that must preserve or improve, in exact counts: senders spread evenly over the
holders of each cell, replica ties spread over the replicas (the round count), received cells at
the transfer bound on large meshes, and a valid schedule (each device sends and receives at
most one cell per round) everywhere.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from redist.bounds import lower_bound_bytes
from redist.errors import RedistError
from redist.exchange import Schedule, schedule
from spmd_types import Mesh, ShardingType, parse
from spmd_types.layout import block_indices

PLAIN = [  # (mesh, src, dst) without unreduced axes: many holders per old block
    ({"x": 4, "y": 4}, "s32[16@x]", "s32[16@y]"),
    ({"x": 2, "y": 3}, "s32[12@y]", "s32[12@(x,y)]"),
    ({"x": 2, "y": 2, "z": 2}, "s32[8@x,8]", "s32[8@(y,z),8@x]"),
    ({"a": 2, "b": 4, "c": 2}, "s32[16@b,4]", "s32[16,4@(a,c)]"),
    ({"a": 2, "b": 4, "c": 2}, "s32[16@b,8@a]", "s32[16@(c,a),8]"),
]


def _phase_a_sends(sch: Schedule) -> np.ndarray:
    sent = np.zeros(len(sch.recv_cells), dtype=np.int64)
    for r in sch.rounds:
        if not r.from_output:
            np.add.at(sent, [s for s, _ in r.pairs], 1)
    return sent


def _valid(sch: Schedule) -> None:
    for r in sch.rounds:
        senders = [s for s, _ in r.pairs]
        receivers = [d for _, d in r.pairs]
        assert len(set(senders)) == len(senders) and len(set(receivers)) == len(receivers)


@pytest.mark.parametrize("axes,src,dst", PLAIN)
def test_senders_spread_evenly_over_each_blocks_holders(axes: dict[str, int], src: str, dst: str) -> None:
    """No holder of an old block sends more than ``ceil(cells sent from that block / holders)``:
    the fewest rounds any choice of senders allows (an uneven choice fails this)."""
    mesh = Mesh(axes)
    s = parse(src, mesh)
    sch = schedule(s, parse(dst, mesh))
    _valid(sch)
    sent = _phase_a_sends(sch)
    block = np.unique(block_indices(s), axis=0, return_inverse=True)[1].reshape(-1)
    for b in np.unique(block):
        holders = block == b
        assert sent[holders].max() <= math.ceil(sent[holders].sum() / holders.sum())


@pytest.mark.parametrize("axes,n", [({"pod": 2, "data": 4, "fsdp": 4, "model": 2}, 256),
                                    ({"pod": 2, "data": 8, "fsdp": 4, "model": 4}, 256),
                                    ({"pod": 2, "data": 32, "fsdp": 16, "model": 8}, 32768)])
def test_replica_ties_spread_over_replicas(axes: dict[str, int], n: int) -> None:
    """``f32[16,N@fsdp]{U:pod} -> f32[16@pod,N@(model,fsdp,data)]``: most cells have no target
    holding a partial, so every replica ties. Ties once all went to replica 0 (16 and 49 rounds
    here, 512 on {pod=2,data=32,fsdp=16,model=8}), then rotated by cell id (9, 9, 33 rounds); rotated
    by the cell's rank within its old block, each replica sends its share: the rounds are the
    receive degree (2: each device lacks a partial of each of its two cells), the floor, or one
    more where cells a target holds pin their replica (3 of a block's 512 cells). Bytes are the
    bound either way."""
    mesh = Mesh(axes)
    s, d = parse(f"f32[16,{n}@fsdp]{{U:pod}}", mesh), parse(f"f32[16@pod,{n}@(model,fsdp,data)]", mesh)
    sch = schedule(s, d)
    _valid(sch)
    assert int(sch.recv_cells.max()) == 2
    assert len(sch.rounds) == (3 if mesh.size > 256 else 2)
    assert sch.n_transfers * math.prod(sch.cell) * s.itemsize / mesh.size == lower_bound_bytes(s, d)


def _at_bound(s: ShardingType, d: ShardingType) -> Schedule:
    sch = schedule(s, d)
    assert sch.n_transfers * math.prod(sch.cell) * s.itemsize / s.mesh.size == lower_bound_bytes(s, d)
    return sch


def test_pending_sum_on_a_binary_mesh_at_the_bound() -> None:
    """The issue-12 pair ``f32[N@a0]{U:a1} -> f32[N@a1]`` on 10 axes of 2: one merge round into
    each root, then the sum forwarded along a doubling tree: ``log2 |T|`` = 9 rounds of 2, 4, ...
    512 pairs (a star would take ``|T| - 1`` = 511 rounds for the same bytes)."""
    mesh = Mesh({f"a{i}": 2 for i in range(10)})
    sch = _at_bound(parse("f32[1024@a0]{U:a1}", mesh), parse("f32[1024@a1]", mesh))
    _valid(sch)
    assert int(sch.recv_cells.sum()) == 1024
    assert [len(r.pairs) for r in sch.rounds] == [2] + [2 << i for i in range(9)]
    assert [r.from_output for r in sch.rounds] == [False] + [True] * 9


@pytest.mark.parametrize("axes,src,dst,rounds", [
    ({"x": 2, "y": 4}, "s32[8@x]{U:y}", "s32[8]", 3 + 5),  # 2 sums: tree levels of 1, 2, 2 rounds (star: 7)
    ({"x": 2, "y": 4}, "s32[4,6]{U:(x,y)}", "s32[4,6]", 7 + 3),  # k = 8 partials, 8 targets
    ({"x": 2, "y": 2}, "s32[8@x]{U:y}", "s32[8@y]", 1 + 1),      # one target each: no tree
])
def test_forwarding_tree_sums_exactly(axes: dict[str, int], src: str, dst: str, rounds: int) -> None:
    """Tree-forwarded sums (senders that received the sum in an earlier level forward it) are the
    global sum on every device (simulator against NumPy), at the bound, in the counted rounds."""
    from redist.plan import Plan
    from redist.simulate import check, scatter, simulate
    from redist.steps import Exchange

    mesh = Mesh(axes)
    s, d = parse(src, mesh), parse(dst, mesh)
    sch = _at_bound(s, d)
    _valid(sch)
    assert len(sch.rounds) == rounds
    x = np.arange(math.prod(s.shape), dtype=np.int32).reshape(s.shape)
    p = Plan.build(s, (Exchange(d.dims, d.sorted_unreduced()),))
    check(simulate(p.steps, p.all_types, scatter(x, s, np.random.default_rng(0))), d, x)


@pytest.mark.parametrize("axes,src,dst", [
    ({"data": 32, "fsdp": 16, "model": 8}, "f32[256@data,4096,8192]{U:model}", "f32[256@data,4096@model,8192]"),
    ({"pod": 2, "data": 64, "model": 16}, "f32[1024@model,64]{U:pod}", "f32[1024,64@pod]"),
])
def test_realistic_meshes_at_the_bound(axes: dict[str, int], src: str, dst: str) -> None:
    mesh = Mesh(axes)
    _valid(_at_bound(parse(src, mesh), parse(dst, mesh)))


def test_ladder_names_why_a_plan_is_above_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """``redist bench-plan --ladder`` splits plans above the bound by cause: types sharing an
    unreduced axis (the bound is not tight there) and exchanges refused by ``MAX_CELLS``."""
    from benchmarks.planning import _above_cause
    from redist.exchange import limits

    mesh = Mesh({"x": 2, "y": 3})
    assert _above_cause(parse("s32[12@y,6]{U:x}", mesh), parse("s32[12,6]{U:x}", mesh)) == "shared"
    s, d = parse("s32[12@y]", mesh), parse("s32[12@x]", mesh)
    assert _above_cause(s, d) == "other"
    monkeypatch.setattr(limits, "MAX_CELLS", 1)
    monkeypatch.setattr(limits, "MAX_DEVICE_CELLS", 0)
    assert _above_cause(s, d) == "refused"


def test_ladder_objectives_are_redistributes_cost_models() -> None:
    """``bench-plan --ladder --objective``: ``measured`` is the shipped CPU profile under the measured
    objective (``redistribute``'s default on CPU), ``alpha-beta`` the unmeasured model (its default
    where no profile ships), ``bytes`` the transfer-bound objective, ``gloo`` (``--objective
    measured --profile cpu-gloo``) the cross-process profile with cross costs on the axes spanning
    hosts of 8 devices (its default across processes)."""
    from benchmarks.planning import LADDER_OBJECTIVES, LADDER_PROFILES, ladder_cost_model, ladder_model
    from redist import CostModel, Objective
    from redist.profile import packaged_profile
    from redist_cli.cmd_planbench import OBJECTIVES, PROFILES

    assert OBJECTIVES == tuple(o.value for o in Objective) and PROFILES == LADDER_PROFILES
    assert {ladder_model(o) for o in OBJECTIVES} | {ladder_model("measured", "cpu-gloo")} == set(LADDER_OBJECTIVES)
    with pytest.raises(RedistError, match="--profile cpu-gloo prices the measured objective"):
        ladder_model("bytes", "cpu-gloo")
    mesh = Mesh({"data": 32, "fsdp": 16, "model": 8})
    models = {o: ladder_cost_model(o, mesh) for o in LADDER_OBJECTIVES}
    prof, gloo = packaged_profile("cpu"), packaged_profile("cpu-gloo")
    assert prof is not None and models["measured"] == prof.cost_model("measured") and models["measured"].measured
    assert models["alpha-beta"] == CostModel(objective="alpha-beta") and models["bytes"] == CostModel(objective="bytes")
    # hosts of 8 devices, row-major: model (8) stays in a host, data and fsdp span hosts
    assert gloo is not None and models["gloo"] == gloo.cost_model("measured", ("data", "fsdp"))
    with pytest.raises(RedistError, match="objective 'fastest' is not one of bytes, alpha-beta, measured, gloo"):
        ladder_cost_model("fastest", mesh)


@pytest.mark.parametrize("axes,src,dst", [
    *PLAIN,
    ({f"a{i}": 2 for i in range(10)}, "f32[1024@a0]{U:a1}", "f32[1024@a1]"),
    ({"x": 2, "y": 4}, "s32[8@x]{U:y}", "s32[8]"),
    ({"x": 2, "y": 2, "z": 2}, "s32[4@x,6]{U:(y,z)}", "s32[4,6@x]{U:y}"),
    ({"data": 4, "model": 2}, "f32[]{U:data}", "f32[]"),
    ({f"a{i}": 2 for i in range(8)}, "f32[16@a2,4096,32@a3,4096@(a1,a6,a5),256@a4]{U:(a0,a7)}",
     "f32[16,4096@(a6,a4,a2),32@(a5,a0),4096,256@(a1,a3)]{U:a7}"),
])
def test_routing_predicts_the_schedule(axes: dict[str, int], src: str, dst: str) -> None:
    """``routing`` (what the synthesizer prunes on) gives exactly the schedule's cell, received
    cells and rounds, without building the rounds."""
    from redist.exchange import routing

    mesh = Mesh(axes)
    s, d = parse(src, mesh), parse(dst, mesh)
    r, sch = routing(s, d), schedule(s, d)
    assert (r.cell, r.cells, r.rounds) == (sch.cell, sch.n_transfers, len(sch.rounds))


def test_crossing_axes_refuses_a_layout_of_another_rank() -> None:
    """``redist.profile.crossing_axes`` names the shape and axes when the process table does not
    have one dimension per mesh axis, instead of a NumPy error from inside."""
    import numpy as np

    from redist.profile import crossing_axes

    with pytest.raises(RedistError, match=r"shape \(16,\) for axes \('x', 'y'\)"):
        crossing_axes(np.arange(16) // 8, ("x", "y"))
    assert crossing_axes(np.arange(16).reshape(2, 8) // 8, ("x", "y")) == ("x",)
