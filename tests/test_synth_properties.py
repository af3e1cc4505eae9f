"""Hypothesis: random meshes (sizes 1-6, not only powers of two), random types up to rank 5."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import meshes, type_pairs
from synth_checks import BYTES, assert_plan_ok

from redist import redistribute


@st.composite
def problems(draw: st.DrawFn, unreduced: bool):  # type: ignore[no-untyped-def]
    mesh = draw(meshes(min_axes=1, max_axes=4, max_size=6, max_devices=24))
    return draw(type_pairs(mesh, min_rank=1, max_rank=5, dtypes=["s32"], unreduced=unreduced))


@given(problems(unreduced=False))
def test_random_pairs_meet_both_bounds(pair) -> None:  # type: ignore[no-untyped-def]
    assert_plan_ok(redistribute(*pair, cost_model=BYTES))


@given(problems(unreduced=True))
def test_random_unreduced_sources(pair) -> None:  # type: ignore[no-untyped-def]
    assert_plan_ok(redistribute(*pair, cost_model=BYTES))


@given(problems(unreduced=False))
def test_deterministic_and_reversible(pair) -> None:  # type: ignore[no-untyped-def]
    s, d = pair
    from redist.synth import synthesize

    assert synthesize(s, d) == redistribute(s, d, cost_model=BYTES)
    assert_plan_ok(redistribute(d, s, cost_model=BYTES))
