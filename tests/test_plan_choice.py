"""Plan choice under the time objective (issue 11): pricing that matches what the lowering does,
and pruning floors that are true lower bounds of what they prune.

Exact quantities only: estimated times under fixed cost models (no shipped profile, so a
recalibration cannot change them), the plan chosen, and local passes counted in compiled HLO.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from redist import CostModel, Plan, redistribute
from redist.arrays import make_input
from redist.bounds import lower_bound_bytes
from redist.cost import KindCost
from redist.executor import compile_plan
from redist.hlo import local_writes
from redist.measure import measure
from redist.steps import AllGather, AllReduceSlice, DynSlice, Exchange, ExchangeAllToAll, Permute, Step
from redist.synth import synthesize
from spmd_types import Mesh, SubAxis, parse
from tests.test_executor import agree

COPY = CostModel(objective="alpha-beta", copy_Bps=1e9)
"""The unmeasured model with local passes priced (1 GB/s): only the copy term is nonzero for a
move without rounds."""


def _exchange(dst_text: str, mesh: Mesh) -> Exchange:
    dst = parse(dst_text, mesh)
    return Exchange(dst.dims, dst.sorted_unreduced() if dst.unreduced else None)


@pytest.mark.parametrize(("src", "dst", "passes"), [
    ("f32[2048,128@z]", "f32[2048@y,128@z]", 1.0),       # a local slice
    ("f32[2048,128@z]", "f32[2048,128@z]{U:x}", 1.0),    # zeros on half the devices
])
def test_zero_round_exchange_is_one_local_pass(src: str, dst: str, passes: float) -> None:
    """An exchange without rounds writes its new block once (zeros + a copy into it, fused), as a
    ``DynSlice`` does: both are priced ``copy_time(after.local_bytes)``, not 0."""
    mesh = Mesh.parse("x=2,y=2,z=2")
    s, d = parse(src, mesh), parse(dst, mesh)
    plan = Plan.build(s, (_exchange(dst, mesh),), COPY)
    (m,) = plan.measures
    assert m.rounds == 0
    assert m.time_s == COPY.copy_time(d.local_bytes) == d.local_bytes / 1e9
    x, _ = make_input(s, mesh.to_jax())
    w = local_writes(compile_plan(plan).lower(x).compile().as_text())
    assert round(w.passes(d.local_bytes), 3) == passes


def test_zero_round_exchange_priced_as_the_slice() -> None:
    mesh = Mesh.parse("x=2,y=2,z=2")
    s, d = parse("f32[2048,128@z]", mesh), parse("f32[2048@y,128@z]", mesh)
    assert measure(_exchange("f32[2048@y,128@z]", mesh), s, d, COPY) == measure(DynSlice(0, ("y",)), s, d, COPY)


def test_in_place_exchange_is_free() -> None:
    """Same block and pending sums: the lowering returns its input (no pass, nothing charged)."""
    mesh = Mesh.parse("x=2,y=4")
    s = parse("f32[64@x,8]", mesh)
    assert measure(_exchange("f32[64@x,8]", mesh), s, s, COPY).time_s == 0.0


CPU_LIKE = CostModel(objective="measured", copy_Bps=1.1e9, kind_costs=(
    ("all_to_all", KindCost(9.1e-7, 0.0, 3.0e8)),
    ("exchange", KindCost(0.0, 9.3e-5, 3.9e8)),
    ("permute", KindCost(5.3e-5, 5.3e-5, 2.0e9)),
))
"""The shipped CPU profile's all-to-all, permute, exchange and copy figures, rounded and frozen here: a
whole-block ``collective-permute`` is much cheaper than exchange rounds."""


@pytest.mark.parametrize(("src", "dst", "mesh", "first"), [
    # issue 11: rand025 and rand010 of the 60-pair random report; XLA slices first, then permutes
    ("f32[2048,128@x]", "f32[2048@y,128@z]", "x=2,y=2,z=2", DynSlice),
    ("s32[262144@y]", "s32[262144@(x,y)]", "x=2,y=4", DynSlice),
])
def test_slice_before_permute(src: str, dst: str, mesh: str, first: type[Step]) -> None:
    """Slicing first moves half the bytes; with the local slice priced the same spelled either
    way, the time objective no longer permutes whole blocks and slices afterwards."""
    plan = redistribute(src, dst, Mesh.parse(mesh), cost_model=CPU_LIKE)
    assert type(plan.steps[0]) is first
    assert [type(s) for s in plan.steps[1:]] == [Permute]


PRUNING = CostModel(objective="measured", copy_Bps=1e9, kind_costs=tuple(sorted({
    "all_gather": KindCost(1e-3, 1e-5, 1e8),
    "all_reduce": KindCost(1e-3, 1e-4, 1e10),
    "all_reduce_slice": KindCost(0.0, 0.0, 1e10),
    "all_to_all": KindCost(1e-4, 0.0, 1e10),
    "exchange": KindCost(1e-4, 1e-4, 1e10),
    "permute": KindCost(1e-3, 1e-4, 1e10),
    "reduce_scatter": KindCost(1e-5, 1e-5, 1e9),
}.items())))
"""A measured-style model where a reduce-scatter's exchange is pruned by a plan that the
all-reduce-slice variant of the same prefix beats (found by a randomized search of models)."""


def test_pruning_floor_covers_step_variants() -> None:
    """The exchange after a prefix was pruned by that prefix's time, yet ``_step_variants`` would
    have run the prefix another way, faster: the floor was no lower bound of what it pruned. Each
    variant of a prefix is now an exchange start of its own."""
    mesh = Mesh.parse("x=4,y=2")
    src, dst = parse("f32[32,64,128]{U:(x,y)}", mesh), parse("f32[32,64@x,128]", mesh)
    want = Plan.build(src, (AllReduceSlice(1, ("x", "y")), ExchangeAllToAll(dst.dims, None)), PRUNING)
    got = synthesize(src, dst, PRUNING)
    assert round(want.time_s * 1e6, 3) == 296.608
    assert got.time_s <= want.time_s
    assert math.isclose(got.time_s, want.time_s)


@pytest.mark.parametrize(("src", "dst", "step"), [
    ("bf16[524288@(x,y)]", "bf16[524288@y]", Exchange),            # rand015's exchange, 2 rounds
    ("bf16[2048@x,256]", "bf16[2048,256@(y,x)]", ExchangeAllToAll),  # rand040
])
def test_16_bit_moves_run_on_bit_patterns(src: str, dst: str, step: type[Step]) -> None:
    """A move without sums on bf16 runs on uint16: XLA:CPU widens bf16 collectives to f32 (twice
    the wire bytes) and converted the whole block at every cell. The compiled program holds no
    f32 array at all, only uint16 collectives, and agrees with the simulator."""
    mesh = Mesh.parse("x=2,y=4" if step is Exchange else "x=4,y=2")
    s, d = parse(src, mesh), parse(dst, mesh)
    plan = Plan.build(s, (step(d.dims, None),))  # type: ignore[call-arg]
    agree(plan)
    x, _ = make_input(s, mesh.to_jax())
    text = compile_plan(plan).lower(x).compile().as_text()
    kinds = re.findall(r"= \(?(\w+)\[[^=]*? (?:collective-permute|all-to-all)\(", text)
    assert kinds and set(kinds) == {"u16"}
    assert "f32[" not in text


def test_non_leading_gather_one_pass_and_priced() -> None:
    """rand031's gather on the minor dimension: stacked on a new leading dimension, then one pass
    moves the blocks into place (XLA:CPU's own form copies the block and the result, each a
    transpose: 1.5 passes). The measure charges that pass, as ``_reduce_scatter`` charges its
    transpose; a gather on the leading dimension has none."""
    mesh = Mesh.parse("x=2,y=2,z=2")
    s = parse("f32[64@y,16,256@z]", mesh)
    plan = Plan.build(s, (AllGather(2, ("z",)),), COPY)
    agree(plan)
    ring = 0.5 * plan.dst.local_bytes / COPY.bandwidth_Bps + COPY.latency_s
    assert math.isclose(plan.time_s, ring + COPY.copy_time(plan.dst.local_bytes))
    x, _ = make_input(s, mesh.to_jax())
    w = local_writes(compile_plan(plan).lower(x).compile().as_text())
    assert round(w.passes(plan.dst.local_bytes), 3) == 1.0
    lead = Plan.build(parse("f32[64@z,16,256@y]", mesh), (AllGather(0, ("z",)),), COPY)
    assert math.isclose(lead.time_s, 0.5 * lead.dst.local_bytes / COPY.bandwidth_Bps + COPY.latency_s)


def test_all_to_all_then_one_permute_is_offered() -> None:
    """rand036: XLA's plan (an all-to-all of the whole ``y`` into dimension 0, then one permute
    swapping the order) is a candidate and, under the frozen CPU-like model, the chosen plan."""
    mesh = Mesh.parse("x=2,y=4")
    plan = redistribute("s32[64@x,64,64@y]", "s32[64@(y,x),64,64]", mesh, cost_model=CPU_LIKE)
    assert [str(s) for s in plan.steps] == ["all_to_all(dim 2 -> 0, axes=(y))", "permute(-> [(y,x),(),()])"]


GLOO4 = CostModel(objective="measured", copy_Bps=1.3e10, tie_tolerance=0.2,
                  cross_axes=("x", SubAxis("y", 1, 2)),
                  kind_costs=(("all_to_all", KindCost(1.3e-4, 1.3e-4, 2.8e8)),),
                  cross_kind_costs=(("all_to_all", KindCost(0.0, 7.9e-4, 2.9e8)),
                                    ("exchange", KindCost(0.0, 1.6e-3, 5.4e8)),
                                    ("permute", KindCost(2.8e-4, 2.8e-4, 1.0e9))))
"""The shipped 4-process Gloo profile's figures, rounded and frozen, with the cross axes of 4
processes of 2 devices on ``{x=2, y=4}``: ``x`` and the major half of ``y`` span processes."""


def test_permute_last_mirror_and_crossing_last() -> None:
    """tp2d_transpose_2x4 over 4 Gloo processes: a permute across processes then an all-to-all
    inside them, and its mirror (the all-to-all, then the permute: XLA's order) price alike; the
    mirror is a candidate and wins the tie, as measured (~3% faster, docs in ``redist.synth.ranking.crossing_order``).
    Both orders run correctly."""
    mesh = Mesh.parse("x=2,y=4")
    src, dst = parse("f32[1024@x,1024@y]", mesh), parse("f32[1024@y,1024@x]", mesh)
    plan = synthesize(src, dst, GLOO4)
    assert [str(s) for s in plan.steps] == ["all_to_all(dim 1 -> 0, axes=(y:(2)2))", "permute(-> [(y),(x)])"]
    first = Plan.build(src, (Permute(((SubAxis("y", 1, 2),), ("x", SubAxis("y", 2, 2)))), plan.steps[0]), GLOO4)
    assert first.dst == dst
    assert math.isclose(first.time_s, plan.time_s) and first.recv_bytes == plan.recv_bytes
    in_process = replace(GLOO4, cross_axes=())  # no process boundary: the order is not changed
    assert type(synthesize(src, dst, in_process).steps[0]) is Permute
    agree(plan)
    agree(first)


def test_permute_last_mirror_slices_before_permuting() -> None:
    """Golden seed10_rand002: the mirror of a permute-then-slice candidate slices first and
    permutes the half block, at the transfer bound (the permute-first plan moved twice as much)."""
    mesh = Mesh.parse("x=2,y=2,z=2")
    plan = redistribute("bf16[16,128@z,16,16@x]", "bf16[16,128@y,16@x,16@z]", mesh, cost_model=CPU_LIKE)
    assert [type(s) for s in plan.steps] == [DynSlice, Permute]
    assert plan.recv_bytes == lower_bound_bytes(plan.src, plan.dst)
    agree(plan)
