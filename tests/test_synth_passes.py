"""Each synthesizer pass alone on fixed moves (``redist.synth``'s modules): the greedy pass's
one-atom steps, fusion of those steps, the family role and variant tables. A change to a pass
shows here, next to the pass, before it shows in the golden plans."""

from __future__ import annotations

import pytest

from redist.cost import CostModel
from redist.plan import apply_step
from redist.steps import (
    ALL_STEPS,
    AllGather,
    AllReduceSlice,
    AllToAll,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    Permute,
    ReduceScatter,
    Step,
)
from redist.synth import ROLE, VARIANTS, Role
from redist.synth.fusion import merge
from redist.synth.greedy import Greedy
from spmd_types import Mesh, parse

XY = Mesh({"x": 2, "y": 2})

# (src, dst): the greedy pass's steps (one atom each), then the same steps fused.
GREEDY: list[tuple[str, str, list[Step], tuple[Step, ...]]] = [
    # a minor-most axis another dimension wants next moves there: one all-to-all
    ("f32[8@x,8]", "f32[8,8@x]", [AllToAll(0, 1, ("x",))], (AllToAll(0, 1, ("x",)),)),
    # gathers remove from the minor end, one atom at a time; fused, one gather over (x, y)
    ("f32[8@(x,y),8]", "f32[8,8]", [AllGather(0, ("y",)), AllGather(0, ("x",))], (AllGather(0, ("x", "y")),)),
    # slices append to the minor end; fused, one slice over (x, y)
    ("f32[8,8]", "f32[8@(x,y),8]", [DynSlice(0, ("x",)), DynSlice(0, ("y",))], (DynSlice(0, ("x", "y")),)),
    # a pending sum over an axis the destination shards by: reduce-scatter into that dimension
    ("f32[8,8]{U:x}", "f32[8@x,8]", [ReduceScatter(0, ("x",))], (ReduceScatter(0, ("x",)),)),
    # reduce-scatter before the gather (gathers last keep memory within the bound); no fusion
    ("f32[8@x,8]{U:y}", "f32[8,8@y]", [ReduceScatter(1, ("y",)), AllGather(0, ("x",))],
     (ReduceScatter(1, ("y",)), AllGather(0, ("x",)))),
    # stuck (y is buried where x is wanted): gather it, then slice
    ("f32[8@y,8]", "f32[8@x,8]", [AllGather(0, ("y",)), DynSlice(0, ("x",))],
     (AllGather(0, ("y",)), DynSlice(0, ("x",)))),
]


@pytest.mark.parametrize(("src", "dst", "steps", "fused"), GREEDY)
def test_greedy_pass_and_fusion_on_fixed_moves(src: str, dst: str, steps: list[Step], fused: tuple[Step, ...]) -> None:
    s, d = parse(src, XY), parse(dst, XY)
    got = Greedy(s, d).run()
    assert got == steps
    t = s
    for step in got:
        t = apply_step(step, t)
    assert t == d
    assert merge(s, got, CostModel(objective="bytes")) == fused


def test_every_step_class_has_one_family_role() -> None:
    assert {cls: ROLE[cls] for cls in ALL_STEPS if ROLE[cls] is not Role.OTHER} == {
        Permute: Role.RELABEL, DynSlice: Role.SLICE}


@pytest.mark.parametrize(("src", "step", "variant"), [
    ("f32[8,8]{U:x}", ReduceScatter(0, ("x",)), AllReduceSlice(0, ("x",))),
    ("f32[8,8]{U:(x,y)}", AllReduceSlice(1, ("x", "y")), ReduceScatter(1, ("x", "y"))),
    ("f32[8@x,8]", Exchange(((), ("x",))), ExchangeAllToAll(((), ("x",)))),
    ("f32[8@x,8]", ExchangeAllToAll(((), ("x",))), Exchange(((), ("x",)))),
])
def test_variants_swap_the_form_and_type_alike(src: str, step: Step, variant: Step) -> None:
    assert VARIANTS[type(step)](step) == (variant,)
    assert VARIANTS[type(variant)](variant) == (step,)
    t = parse(src, XY)
    assert apply_step(step, t) == apply_step(variant, t)
