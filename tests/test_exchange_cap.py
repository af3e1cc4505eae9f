"""A plan never holds an exchange its scheduler refuses: the closed-form measure checks the cap."""

from __future__ import annotations

import pytest

import redist.exchange as exchange
from redist import CostModel, clear_caches, redistribute
from redist.exchange import ExchangeTooFineError, schedule
from spmd_types import Mesh, parse

MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "f32[512,1024@(x,y)]", "f32[512@(y,x),1024]"  # an exchange of 8 cells per device


def test_refused_exchange_is_never_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange, "MAX_CELLS", 8)
    monkeypatch.setattr(exchange, "MAX_DEVICE_CELLS", 1)
    clear_caches("all")
    try:
        with pytest.raises(ExchangeTooFineError):
            schedule(parse(SRC, MESH), parse(DST, MESH))
        for objective in ("bytes", "time"):
            plan = redistribute(SRC, DST, MESH, cost_model=CostModel(objective=objective))
            assert all(s.kind not in ("exchange", "exchange_all_to_all") for s in plan.steps), plan
            str(plan)  # describing it builds every schedule it holds
    finally:
        clear_caches("all")
