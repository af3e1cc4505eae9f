"""``MultiAllToAll``: several all-to-all moves as ONE all-to-all over the flattened group (issue 11).

XLA moves two dimensions of ``f32[4@x,8@y,64,64] -> f32[4,8,64@y,64@x]`` with one all-to-all over
all 8 devices; two ``AllToAll`` steps pay two launches and move 5/4 of the block instead of 7/8.
Its lowering is checked against the simulator with the other steps in ``tests/test_executor.py``
and its compiled copies against XLA's in ``tests/test_lowering_copies.py``.
"""

from __future__ import annotations

import pytest

import proofs  # noqa: F401  (registers plan.verify())
from redist import AllToAll, CostModel, MultiAllToAll, StepError, redistribute
from redist.arrays import make_input
from redist.executor import compile_plan
from redist.hlo import parse_collectives
from spmd_types import Mesh, parse

XY = Mesh({"x": 2, "y": 4})
SRC, DST = "f32[4@x,8@y,64,64]", "f32[4,8,64@y,64@x]"


def test_typing_moves_all_axes_at_once() -> None:
    step = MultiAllToAll((AllToAll(0, 3, ("x",)), AllToAll(1, 2, ("y",))))
    assert step.apply(parse(SRC, XY)) == parse(DST, XY)
    assert step.group_axes() == ("x", "y")
    assert str(step) == "all_to_all(dims 0 -> 3 (x), 1 -> 2 (y))"


@pytest.mark.parametrize("moves, message", [
    ((AllToAll(0, 3, ("x",)),), "at least two moves"),
    ((AllToAll(0, 3, ("x",)), AllToAll(1, 3, ("y",))), "each be distinct"),
    ((AllToAll(0, 1, ("x",)), AllToAll(1, 2, ("y",))), "both a source and a destination"),
    ((AllToAll(0, 3, ("y",)), AllToAll(1, 2, ("y",))), "not the minor-most axes of dimension 0"),
])
def test_bad_moves_are_refused_naming_why(moves: tuple[AllToAll, ...], message: str) -> None:
    with pytest.raises(StepError, match=message):
        MultiAllToAll(moves).apply(parse(SRC, XY))


@pytest.mark.parametrize("objective", ["bytes", "alpha-beta"])
def test_the_planner_fuses_two_moves_into_one_at_the_bound(objective: str) -> None:
    plan = redistribute(SRC, DST, XY, cost_model=CostModel(objective=objective))
    assert [type(s).__name__ for s in plan.steps] == ["MultiAllToAll"]
    assert plan.recv_bytes == plan.lower_bound_bytes == 7 / 8 * plan.src.local_bytes
    assert plan.n_collectives == 1
    assert plan.verify().ok


def test_compiles_to_one_all_to_all_over_all_devices() -> None:
    plan = redistribute(SRC, DST, XY)
    x, _ = make_input(plan.src, XY.to_jax())
    hlo = parse_collectives(compile_plan(plan).lower(x).compile().as_text())
    assert hlo.kinds() == ("all-to-all",)
    assert hlo.collectives[0].groups == (tuple(range(8)),)
