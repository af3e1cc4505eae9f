"""The time objective's tie rule (``CostModel.tie_tolerance``) and where its width comes from
(``Profile.fit_error``): exact plan choices under fixed profiles and exact fitted figures, no clocks."""

from __future__ import annotations

import dataclasses
import math

import pytest

from redist import CostModel
from redist.cost import KindCost
from redist.profile import Profile, Sample
from redist.synth import synthesize
from spmd_types import Mesh, parse

DM = Mesh({"data": 2, "model": 4})
SRC, DST = "f32[4@data,256@model,16,64]", "f32[4@data,256,16@model,64]"  # Ulysses: seq -> heads

# A fixed profile shaped like the CPU one: one all-to-all of this move (393,216 B received, 2 latency
# terms) costs 1.592 ms, the 3-round exchange of the same cells 1.582 ms (0.7% less).
FIXED = (("all_to_all", KindCost(0.0, 25e-6, 255e6)), ("exchange", KindCost(0.0, 130e-6, 330e6)))


def _plan(tol: float, objective: str = "measured"):  # type: ignore[no-untyped-def]
    cm = CostModel(objective=objective, kind_costs=FIXED, tie_tolerance=tol)
    return synthesize(parse(SRC, DM), parse(DST, DM), cm)


def test_without_a_tie_window_the_fastest_estimate_wins() -> None:
    p = _plan(0.0)
    assert [s.kind for s in p.steps] == ["exchange"] and p.n_collectives == 3


def test_inside_the_window_fewer_collective_ops_win() -> None:
    fast, tied = _plan(0.0), _plan(0.05)
    assert [s.kind for s in tied.steps] == ["all_to_all"] and tied.n_collectives == 1
    assert fast.time_s < tied.time_s <= fast.time_s * 1.05


def test_a_window_narrower_than_the_gap_changes_nothing() -> None:
    fast = _plan(0.0)
    a2a = _plan(0.05)
    gap = a2a.time_s / fast.time_s - 1
    assert _plan(gap * 0.9).steps == fast.steps
    assert _plan(gap * 1.1).steps == a2a.steps


def test_the_bytes_objective_ignores_the_window() -> None:
    assert _plan(0.3, "bytes").steps == _plan(0.0, "bytes").steps
    assert CostModel(objective="bytes", tie_tolerance=0.3).tie_window(1.0) == 1.0
    assert CostModel(objective="alpha-beta", tie_tolerance=0.3).tie_window(1.0) == pytest.approx(1.3)


def test_tie_tolerance_is_validated() -> None:
    with pytest.raises(ValueError, match="tie_tolerance"):
        CostModel(objective="bytes", tie_tolerance=-0.1)
    with pytest.raises(ValueError, match="tie_tolerance"):
        CostModel(objective="bytes", tie_tolerance=1.0)


def test_fit_error_is_the_median_log_error_of_the_samples() -> None:
    kc = KindCost(10e-6, 5e-6, 1e9)
    exact = [Sample("k", t, b, kc.overhead_s + t * kc.latency_s + b / kc.bandwidth_Bps)
             for t, b in ((1.0, 1e4), (2.0, 1e5), (3.0, 1e6), (1.0, 1e6), (2.0, 1e3))]
    factors = (1.0, 1.0, 1.1, 1 / 1.2, 1.3)  # |log errors|: 0, 0, log 1.1, log 1.2, log 1.3
    samples = tuple(s._replace(seconds=s.seconds * f) for s, f in zip(exact, factors))
    prof = Profile("cpu", "cpu", (("k", kc),), 1e9, samples)
    assert prof.fit_error == pytest.approx(0.1, rel=1e-9)
    assert prof.cost_model().tie_tolerance == pytest.approx(0.1, rel=1e-9)
    assert dataclasses.replace(prof, samples=()).fit_error == 0.0
    wild = tuple(s._replace(seconds=s.seconds * 10) for s in exact)
    assert dataclasses.replace(prof, samples=wild).fit_error == 0.5  # capped: MAX_TIE_TOLERANCE
    assert math.isclose(dataclasses.replace(prof, samples=exact).fit_error, 0.0, abs_tol=1e-12)
