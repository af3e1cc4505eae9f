"""The checker must be able to fail: wrong plans get a counterexample naming the violated property."""

from __future__ import annotations

import pytest

import proofs
import redist.exchange
from proofs import VerificationError, check_budget, verify_plan
from proofs.link import prove_link
from redist import AllGather, AllReduce, CostModel, DynSlice, Exchange, Plan, redistribute
from spmd_types import Mesh, parse

M22 = Mesh({"x": 2, "y": 2})
M24 = Mesh({"x": 2, "y": 4})


def test_wrong_axis_in_a_gather_is_refuted() -> None:
    src, dst = parse("f32[8@(x,y),8]", M22), parse("f32[8@y,8]", M22)
    bad = Plan(src, dst, (AllGather(0, ("x",)),), (dst,))  # must gather y's... no: x is not minor-most
    with pytest.raises(VerificationError) as e:
        verify_plan(bad)
    assert e.value.prop == "chain"
    cex = e.value.counterexample
    assert cex["step"] == 1 and len(cex["global_shape"]) == 2 and "coords" in cex and "local_index" in cex


def test_wrong_axis_in_a_slice_is_refuted() -> None:
    src, dst = parse("f32[8,4]", M22), parse("f32[8@y,4]", M22)
    bad = Plan(src, dst, (DynSlice(0, ("x",)),), (dst,))  # same local shape, wrong block
    with pytest.raises(VerificationError) as e:
        verify_plan(bad)
    assert e.value.prop == "chain" and e.value.counterexample["coords"]["x"] != e.value.counterexample["coords"]["y"]


def test_replicate_then_slice_fallback_breaks_memory_and_transfer() -> None:
    """XLA's fallback: gather everything, then slice - correct, but neither memory nor traffic."""
    src, dst = parse("f32[8@x,8@y]", M22), parse("f32[8@y,8@x]", M22)
    steps = (AllGather(0, ("x",)), AllGather(1, ("y",)), DynSlice(0, ("y",)), DynSlice(1, ("x",)))
    plan = Plan.build(src, steps)
    assert plan.dst == dst
    with pytest.raises(VerificationError) as e:
        verify_plan(plan)
    assert e.value.prop == "memory"
    assert e.value.counterexample["peak_bytes"] > e.value.counterexample["bound_bytes"]
    assert all(n >= 1 for n in e.value.counterexample["global_shape"])
    with pytest.raises(VerificationError) as e:
        verify_plan(plan, check_memory=False)
    assert e.value.prop == "recv"
    assert e.value.counterexample["recv_bytes"] > e.value.counterexample["lower_bound_bytes"]


def test_a_skipped_step_is_refuted() -> None:
    src, dst = parse("f32[8@x,8]{U:y}", M24), parse("f32[8,8@y]", M24)
    plan = redistribute(src, dst, cost_model=CostModel(objective="bytes"))
    assert len(plan.steps) == 2
    short = Plan(src, dst, plan.steps[:1], plan.types[:1])
    with pytest.raises(VerificationError) as e:
        verify_plan(short)
    assert e.value.prop == "chain" and "global_shape" in e.value.counterexample


def test_a_missing_reduction_is_refuted() -> None:
    src, dst = parse("f32[8]{U:y}", M22), parse("f32[8]", M22)
    with pytest.raises(VerificationError) as e:
        verify_plan(Plan(src, dst, (), ()))
    assert e.value.prop == "chain"
    ok = Plan.build(src, (AllReduce(("y",)),))
    assert verify_plan(ok).ok


def test_a_wrong_schedule_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Permute/Exchange semantics come from the schedule itself: corrupt one pair and z3 sees it."""
    src, dst = parse("f32[8@x,8@y]", M24), parse("f32[8@y,8@x]", M24)
    plan = Plan.build(src, (Exchange(dst.dims, None),))
    real = redist.exchange.schedule

    def corrupted(a, b):  # type: ignore[no-untyped-def]
        sch = real(a, b)
        r = sch.rounds[0]
        (s, d), rest = r.pairs[0], r.pairs[1:]
        bad = type(r)(((d, s),) + rest, r.send_offset, r.recv_offset, r.recv_valid, r.from_output)
        return type(sch)(sch.cell, sch.local_copies, (bad,) + sch.rounds[1:], sch.recv_cells)

    prove_link.cache_clear()
    monkeypatch.setattr(redist.exchange, "schedule", corrupted)
    try:
        with pytest.raises(VerificationError) as e:
            verify_plan(plan, check_recv=False)
        assert e.value.prop == "chain"
    finally:
        prove_link.cache_clear()


def test_budget_fits_and_refutes_with_a_shape() -> None:
    plan = redistribute("f32[1024@x,512@y]", "f32[1024@y,512@x]", M24)
    assert check_budget(plan, plan.peak_bytes).fits
    r = check_budget(plan, plan.peak_bytes - 1)
    assert r.status == "exceeds" and r.counterexample["bytes"] > plan.peak_bytes - 1
    big = check_budget(plan, plan.peak_bytes, max_shape=[4096, None])
    assert big.status == "exceeds" and big.counterexample["global_shape"][0] <= 4096
    with pytest.raises(VerificationError) as e:
        proofs.budget.require_budget(plan, 1)
    assert e.value.prop == "budget"


def test_exchange_of_replicated_partials() -> None:
    """Regression (found by z3): ``s32[4]{U:y}`` on ``{x=2,y=2}``: replicas over x may hold
    different partials (redist's own ``s32[4@(x,y)] -> s32[4]{U:y}`` exchange lays them out so);
    the exchange must take all partials of a cell from one replica."""
    src, dst = parse("s32[4]{U:y}", M22), parse("s32[4@(x,y)]", M22)
    plan = Plan.build(src, (Exchange(dst.dims, ()),))
    assert verify_plan(plan, replicas_agree=True).ok
    assert verify_plan(plan).ok  # also when replicas disagree


def test_a_schedule_mixing_replicas_is_refuted() -> None:
    """The checker fails a schedule that sums partials of different replicas: device 0 = (x0,y0)
    takes partial y1 from device 3 = (x1,y1) of the other x replica (and so on round the ring)."""
    import unittest.mock as mock

    import numpy as np

    from redist import exchange

    src, dst = parse("s32[4]{U:y}", M22), parse("s32[4@(x,y)]", M22)
    good = exchange.schedule(src, dst)
    assert [r.pairs for r in good.rounds] == [((1, 0), (0, 1), (3, 2), (2, 3))]  # same replica
    r = good.rounds[0]
    mixed = exchange.Round(((3, 0), (0, 1), (1, 2), (2, 3)), np.array([[1], [2], [3], [0]]),
                           r.recv_offset, r.recv_valid, r.from_output)
    bad = exchange.Schedule(good.cell, good.local_copies, (mixed,), good.recv_cells)
    from proofs import link

    link.prove_link.cache_clear()  # step proofs are memoised per (step, types)
    try:
        with mock.patch.object(exchange, "schedule", lambda a, b: bad):
            with pytest.raises(VerificationError) as e:
                verify_plan(Plan.build(src, (Exchange(dst.dims, ()),)))
        assert e.value.prop == "chain"
    finally:
        link.prove_link.cache_clear()
