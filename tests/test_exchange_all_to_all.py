"""``ExchangeAllToAll``: an exchange's cells as the slots of one all-to-all (issue 11 item 2).

Its values are the exchange's (JAX on 8 simulated CPU devices == the NumPy simulator of the
schedule == the global array laid out as the destination), its measure counts padding as received
bytes, the synthesizer offers it as a variant of ``Exchange`` only (bytes never pick a padded one),
and exchanges it cannot run as one all-to-all are refused with a ``StepError``.
"""

from __future__ import annotations

import pytest

import proofs  # noqa: F401  (registers plan.verify())
from redist import CostModel, Exchange, ExchangeAllToAll, Plan, redistribute
from redist.errors import StepError
from redist.exchange_a2a import slots
from redist.measure import measure
from spmd_types import Mesh, parse
from tests.test_executor import agree

XY = Mesh({"x": 2, "y": 4})
X2Y2Z2 = Mesh({"x": 2, "y": 2, "z": 2})
DM = Mesh({"data": 2, "model": 4})

# (mesh, src, dst, static): regular exchanges, some needing per-device offsets or padding
CASES = [
    (DM, "f32[4@data,256@model,16,64]", "f32[4@data,256,16@model,64]", True),  # Ulysses
    (DM, "f32[4@data,256,16@model,64]", "f32[4@data,256@model,16,64]", True),
    (XY, "s32[32@y,8]", "s32[32,8@y]", True),
    (XY, "s32[16@(x,y),8]", "s32[16,8@(y,x)]", True),  # slot order != cell order: a static reorder
    (X2Y2Z2, "s32[16@y,8@(x,z),8]", "s32[16,8,8@(x,y,z)]", True),
    (XY, "s32[16@x,8]{U:y}", "s32[16,8@x]{U:y}", True),  # partials moved partial by partial
    (XY, "s32[16@x,8]{U:y}", "s32[16@x,8@y]", True),  # partials summed on arrival
    (X2Y2Z2, "s32[16,8@x]", "s32[16@x,8@z]", False),  # half the slots padding, per-device offsets
]


@pytest.mark.parametrize("mesh, src, dst, static", CASES)
def test_same_values_as_the_exchange(mesh: Mesh, src: str, dst: str, static: bool) -> None:
    s, d = parse(src, mesh), parse(dst, mesh)
    step = ExchangeAllToAll(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None)
    plan = Plan.build(s, (step,))
    assert plan.dst == d and slots(s, d).static == static
    agree(plan)
    agree(plan, seed=1)


@pytest.mark.parametrize("mesh, src, dst, static", CASES)
def test_measure_counts_padding(mesh: Mesh, src: str, dst: str, static: bool) -> None:
    s, d = parse(src, mesh), parse(dst, mesh)
    u = d.sorted_unreduced() if d.unreduced != s.unreduced else None
    cm = CostModel(objective="bytes")
    ex = measure(Exchange(d.dims, u), s, d, cm)
    a2a = measure(ExchangeAllToAll(d.dims, u), s, d, cm)
    sl = slots(s, d)
    cell_bytes = sl.cell_bytes(s.itemsize)
    assert a2a.recv_bytes == (sl.g - 1) * sl.k * cell_bytes >= ex.recv_bytes
    assert a2a.collectives == 1
    assert (a2a.recv_bytes == ex.recv_bytes) == (sl.received == s.mesh.size * (sl.g - 1) * sl.k)
    cert = Plan.build(s, (ExchangeAllToAll(d.dims, u),)).verify(check_recv=False)
    assert cert.ok


def test_bytes_objective_stays_at_the_bound_and_time_picks_it_where_faster() -> None:
    mesh, src, dst = XY, "s32[16@(x,y),8]", "s32[16,8@(y,x)]"
    by_bytes = redistribute(src, dst, mesh, cost_model=CostModel(objective="bytes"))
    assert by_bytes.recv_bytes == measure(Exchange(parse(dst, mesh).dims), parse(src, mesh), parse(dst, mesh),
                                          CostModel(objective="bytes")).recv_bytes
    # issue 11's "7 rounds where Shardy runs a permute and two all-to-alls": one all-to-all
    mesh, src, dst = X2Y2Z2, "s32[16@y,8@(x,z),8]", "s32[16,8,8@(x,y,z)]"
    slow_p2p = CostModel.make(objective="alpha-beta", kind_time_factor={"exchange": 8.0})
    assert [st.kind for st in redistribute(src, dst, mesh, cost_model=slow_p2p).steps] == ["exchange_all_to_all"]
    slow_a2a = CostModel.make(objective="alpha-beta", kind_time_factor={"all_to_all": 8.0})
    assert "exchange_all_to_all" not in [st.kind for st in redistribute(src, dst, mesh, cost_model=slow_a2a).steps]
    padded = X2Y2Z2, "s32[16,8@x]", "s32[16@x,8@z]"
    plan = redistribute(padded[1], padded[2], padded[0], cost_model=CostModel(objective="bytes"))
    assert "exchange_all_to_all" not in [st.kind for st in plan.steps]


@pytest.mark.parametrize("mesh, src, dst, why", [
    (XY, "s32[16@(x,y),4]", "s32[16@(y,x),4]", "memory bound"),  # one block to one peer: 8 slots
    (XY, "s32[16,8]", "s32[16@y,8]", "sends nothing"),
    (XY, "s32[16,8]{U:(x,y)}", "s32[16@x,8]", "forwards completed sums"),
])
def test_refused(mesh: Mesh, src: str, dst: str, why: str) -> None:
    s, d = parse(src, mesh), parse(dst, mesh)
    with pytest.raises(StepError, match=why):
        ExchangeAllToAll(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None).apply(s)
