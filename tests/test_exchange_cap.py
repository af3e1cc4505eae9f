"""Exchanges past the size limits (``redist.exchange.limits.MAX_CELLS``, ``MAX_PACKED``): a plan never
holds one, with or without pending sums, though a plain one's figures are known in closed form:
planning refuses what building the schedule (lowering, simulation, proofs) would."""

from __future__ import annotations

import math

import numpy as np
import pytest

import redist.exchange as exchange
from redist import CostModel, clear_caches, redistribute
from redist.exchange import ExchangeTooFineError, check_size, guards, limits, schedule
from redist.plan import Plan
from redist.simulate import scatter, simulate
from redist.steps import Exchange
from spmd_types import Mesh, parse

MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "f32[512,1024@(x,y)]", "f32[512@(y,x),1024]"  # an exchange of 8 cells per device
USRC, UDST = "f32[512,1024@(x,y)]{U:z}", "f32[512@(y,x),1024]"  # the same, summing partials over z


@pytest.fixture
def tiny_limit(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(limits, "MAX_CELLS", 8)
    monkeypatch.setattr(limits, "MAX_DEVICE_CELLS", 1)
    clear_caches("all")
    yield
    clear_caches("all")


def test_a_refused_pending_sum_exchange_is_never_planned(tiny_limit: None) -> None:
    mesh = Mesh({"x": 2, "y": 4, "z": 2})
    with pytest.raises(ExchangeTooFineError):
        schedule(parse(USRC, mesh), parse(UDST, mesh))
    for objective in ("bytes", "alpha-beta"):
        plan = redistribute(USRC, UDST, mesh, cost_model=CostModel(objective=objective))
        ts = plan.all_types
        for i, step in enumerate(plan.steps):  # its exchanges with pending sums are all routable
            if step.kind in ("exchange", "exchange_all_to_all") and (ts[i].unreduced or ts[i + 1].unreduced):
                check_size(ts[i], ts[i + 1])
        str(plan)  # describing it builds the schedules it can


def test_a_too_fine_plain_exchange_is_never_planned(tiny_limit: None) -> None:
    """The best other plan is used: every step lowers and simulates, and the plan is above the
    bound only because the exchange was refused (it is at the bound without the limit)."""
    s, d = parse(SRC, MESH), parse(DST, MESH)
    with pytest.raises(ExchangeTooFineError, match="MAX_CELLS = 8"):
        schedule(s, d)
    plan = redistribute(SRC, DST, MESH, cost_model=CostModel(objective="bytes"))
    assert not {"exchange", "exchange_all_to_all"} & {st.kind for st in plan.steps}
    assert plan.recv_bytes > plan.lower_bound_bytes
    x = np.arange(math.prod(s.shape), dtype=np.float32).reshape(s.shape)
    out = simulate(plan.steps, plan.all_types, scatter(x, s))
    np.testing.assert_array_equal(out, scatter(x, d))
    str(plan)


def test_the_same_exchange_is_at_the_bound_without_the_limit() -> None:
    clear_caches("all")
    plan = redistribute(SRC, DST, MESH, cost_model=CostModel(objective="bytes"))
    assert [st.kind for st in plan.steps] in (["exchange"], ["exchange_all_to_all"])
    assert plan.recv_bytes == plan.lower_bound_bytes


def test_the_closed_form_is_the_schedule_it_stands_for() -> None:
    """Without the limit the exchange builds, and its schedule has the priced bytes and rounds."""
    clear_caches("all")
    s, d = parse(SRC, MESH), parse(DST, MESH)
    (m,) = Plan.build(s, (Exchange(d.dims, None),)).measures
    sch = schedule(s, d)
    assert m.rounds == len(sch.rounds) == 7
    assert m.recv_bytes == sch.n_transfers * 64 * 128 * 4 / MESH.size


def test_the_round_floor_refuses_without_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_PACKED`` by its round floor alone (``provider_cells``), a pending-sum exchange is
    refused before any routing: at 65,536 devices routing one took 2 s only to be refused."""
    mesh = Mesh({"x": 2, "y": 4, "z": 2})
    s, d = parse(USRC, mesh), parse(UDST, mesh)
    floor = exchange.provider_cells(s, d)
    assert floor > 1
    monkeypatch.setattr(limits, "MAX_PACKED", floor * mesh.size * s.rank - 1)
    monkeypatch.setattr(limits, "MAX_DEVICE_CELLS", 1)
    monkeypatch.setattr(guards, "routing", lambda *a: pytest.fail("routed"))
    with pytest.raises(ExchangeTooFineError, match="MAX_PACKED"):
        exchange.check_schedule(s, d)
