"""Copy-free lowering: the compiled program of each single-collective step writes no more local
bytes, and holds no more full-size copy/transpose/concatenate ops, than XLA's own partitioner's
program for the same move (issue 11, item 1).

Counts are exact properties of the compiled HLO (JAX 0.10.2, XLA:CPU), not timings: ``passes``
is the entry computation's non-collective writes in units of the local block, ``layout`` the
copy/transpose/concatenate instructions of at least half a block anywhere in the module.
"""

from __future__ import annotations

import math

import jax
import pytest
from jax.sharding import NamedSharding

from benchmarks.arrays import make_input
from benchmarks.cases import NAMED_CASES, Case
from benchmarks.hlo import local_writes
from redist import CostModel, ExchangeAllToAll, Plan, redistribute
from redist.executor import compile_plan
from spmd_types.jax_interop import to_partition_spec

# case -> (our step, our passes, our layout ops, XLA's passes, XLA's layout ops)
EXPECTED: dict[str, tuple[str, float, int, float, int]] = {
    "sp_to_tp_gather_seq": ("AllGather", 1.5, 2, 1.5, 2),
    "tp_allreduce": ("AllReduce", 3.0, 0, 3.0, 0),
    "seq_to_hidden": ("AllToAll", 3.0, 3, 3.0, 3),
    "hidden_to_seq": ("AllToAll", 3.0, 3, 3.0, 3),
    "hidden_gather": ("AllGather", 1.25, 1, 1.25, 1),
    "ulysses_seq_to_heads": ("AllToAll", 2.0, 3, 2.0, 3),
    "ulysses_heads_to_seq": ("AllToAll", 2.0, 3, 2.0, 3),
    "moe_dispatch": ("AllToAll", 2.0, 1, 2.0, 1),
    "moe_combine": ("AllToAll", 2.0, 1, 2.0, 1),
    "moe_rank4_dispatch": ("AllToAll", 2.0, 3, 2.0, 3),
    "moe_2d_experts": ("AllToAll", 2.0, 1, 2.0, 1),
    "fsdp_tp_seq_to_hidden": ("AllToAll", 2.0, 3, 2.0, 3),
    "size3_seq_to_hidden": ("AllToAll", 3.0, 3, 3.0, 3),
    "tp2d_flat_order_swap": ("Permute", 0.0, 0, 0.0, 0),
    "rank1_order_swap": ("Permute", 0.0, 0, 0.0, 0),
    "fsdp_gather_2d": ("AllGather", 0.0, 0, 0.0, 0),
    "zero3_full_gather": ("AllGather", 1.25, 0, 1.25, 0),
    "rank4_move_two_axes": ("MultiAllToAll", 2.0, 19, 2.0, 19),  # one all-to-all over 8, as XLA
}
CASES = {c.name: c for c in NAMED_CASES}


def _writes(case: Case, ours: bool) -> tuple[float, int]:
    """(passes, layout ops) of our program or XLA's for ``case``."""
    src, dst = case.src_type, case.dst_type
    jm = case.mesh.to_jax()
    x, _ = make_input(src, jm)
    if ours:
        plan = redistribute(src, dst, case.mesh, cost_model=CostModel(objective="bytes"))
        assert [type(s).__name__ for s in plan.steps] == [EXPECTED[case.name][0]]
        fn = compile_plan(plan)
    else:
        fn = jax.jit(lambda a: a, out_shardings=NamedSharding(jm, to_partition_spec(dst)))
    block = max(math.prod(src.local_shape), math.prod(dst.local_shape)) * src.itemsize
    w = local_writes(fn.lower(x).compile().as_text(), min_bytes=block // 2)
    return round(w.passes(block), 2), w.layout_count()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_copy_beyond_xla(name: str) -> None:
    _, passes, layout, xla_passes, xla_layout = EXPECTED[name]
    ours, xla = _writes(CASES[name], ours=True), _writes(CASES[name], ours=False)
    assert (ours, xla) == ((passes, layout), (xla_passes, xla_layout))
    assert ours[0] <= xla[0] and ours[1] <= xla[1]


@pytest.mark.parametrize("name", ["ulysses_seq_to_heads", "ulysses_heads_to_seq"])
def test_exchange_as_one_all_to_all_copies_as_xla(name: str) -> None:
    """The Ulysses exchange run as one all-to-all (``ExchangeAllToAll``, static slots): the
    compiled program writes and reorders exactly as XLA's own (2 passes, 3 layout ops)."""
    case = CASES[name]
    plan = Plan.build(case.src_type, (ExchangeAllToAll(case.dst_type.dims),))
    x, _ = make_input(case.src_type, case.mesh.to_jax())
    block = max(math.prod(case.src_type.local_shape), math.prod(case.dst_type.local_shape)) * case.src_type.itemsize
    w = local_writes(compile_plan(plan).lower(x).compile().as_text(), min_bytes=block // 2)
    assert (round(w.passes(block), 2), w.layout_count()) == _writes(case, ours=False) == (2.0, 3)


@pytest.mark.parametrize("name, passes", [
    ("tp_to_sp_reduce_scatter", 2.25),  # bf16: XLA:CPU widens to f32 around the collective
    ("unreduced_to_hidden", 1.0),  # one transpose moves the scattered chunks to the front
    ("zero_grad_reduce_scatter", 0.0),  # leading dimension: no copy at all
    ("fsdp_tp_act_reduce_scatter", 1.0),
    ("fsdp_tp_grad_reduce_scatter", 0.0),
    ("size3_reduce_scatter", 1.0),
])
def test_reduce_scatter_one_pass_at_most(name: str, passes: float) -> None:
    """A reduce-scatter on a non-leading dimension costs one transpose (was: two layout copies)."""
    case = CASES[name]
    src, dst = case.src_type, case.dst_type
    plan = redistribute(src, dst, case.mesh, cost_model=CostModel(objective="bytes"))
    assert [type(s).__name__ for s in plan.steps] == ["ReduceScatter"]
    x, _ = make_input(src, case.mesh.to_jax())
    block = max(math.prod(src.local_shape), math.prod(dst.local_shape)) * src.itemsize
    w = local_writes(compile_plan(plan).lower(x).compile().as_text())
    assert round(w.passes(block), 2) == passes
