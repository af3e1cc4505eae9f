"""The refined floor (benchmarks.floor_passes): each bare pass program compiles to exactly the one
local pass it stands for (one fusion, no collective, the conversion and reorder inside it, the
destination block's bytes written), and the rules pick the passes that XLA:CPU's HLO shows are
forced on named cases. Machine-independent, asserted exactly."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from benchmarks.cases import NAMED_CASES
from benchmarks.floor_passes import Pass, pass_program, pass_thunks, refined_names, side_passes
from benchmarks.speed import _xla
from redist import redistribute
from redist.arrays import make_input, reference_values
from redist.executor import compile_plan
from redist.hlo import HloCollectives, collective_key, local_writes, parse_collectives, parse_instruction
from spmd_types.jax_interop import mesh_to_jax

CASES = {c.name: c for c in NAMED_CASES}
DEVICES = np.array(jax.devices())

PASSES = [
    (Pass("bits-out", 4096, "u16", "bf16"), {"bitcast-convert"}, 2),
    (Pass("narrow-out", 4096, "f32", "bf16"), {"convert"}, 2),
    (Pass("widen-in", 4096, "bf16", "f32"), {"convert"}, 4),
    (Pass("interleave", 4096, "u16", "bf16", (16, 4, 64)), {"bitcast-convert", "transpose"}, 2),
    (Pass("interleave", 4096, "u32", "u32", (16, 4, 64)), {"transpose"}, 4),
    (Pass("split", 4096, "bf16", "f32", (16, 4, 64)), {"convert", "transpose"}, 4),
    (Pass("slice-out", 1024, "u32", "u32", read=4096), {"slice"}, 4),
]


def _entry_ops(hlo: str) -> list[str]:
    lines = hlo[hlo.index("\nENTRY"):].splitlines()[1:]
    ops = [ins.opcode for ln in lines[: next(i for i, x in enumerate(lines) if x.startswith("}"))]
           if (ins := parse_instruction(ln)) is not None]
    return [op for op in ops if op not in ("parameter", "bitcast", "tuple", "get-tuple-element")]


@pytest.mark.parametrize(("p", "inside", "dst_size"), PASSES, ids=lambda v: getattr(v, "rule", ""))
def test_pass_program_is_one_fused_pass(p: Pass, inside: set[str], dst_size: int) -> None:
    bare = pass_program(p, DEVICES)
    assert bare is not None
    hlo = bare.hlo
    assert _entry_ops(hlo) == ["fusion"]
    assert parse_collectives(hlo).collectives == ()
    assert local_writes(hlo).bytes_written == p.elements * dst_size  # one pass over the block written
    fused = {ins.opcode for ln in hlo[: hlo.index("\nENTRY")].splitlines() if (ins := parse_instruction(ln))}
    assert inside <= fused
    assert fused & {"convert", "bitcast-convert"} == inside & {"convert", "bitcast-convert"}
    assert ("transpose" in fused) == (p.shape is not None)


def _sides(name: str) -> tuple[dict[str, HloCollectives], object]:
    case = CASES[name]
    jm = mesh_to_jax(case.mesh, explicit=True)
    x, _ = make_input(case.src_type, jm)
    plan = redistribute(case.src_type, case.dst_type, case.mesh)
    texts = {"ours": compile_plan(plan, jm).lower(x).compile().as_text(), "xla": _xla(case, True, x, jm).as_text()}
    return {k: parse_collectives(t) for k, t in texts.items()}, case


# (case, the rules for our program, the rules for Shardy's): each read off the HLO (design section 11)
RULES = [
    ("zero3_full_gather", [("bits-out", None)], [("bits-out", None)]),
    ("tp_allreduce", [("widen-in", None), ("bits-out", None)], [("widen-in", None), ("narrow-out", None)]),
    # ours: an exchange adding bf16 partials on arrival, ending in a permute of u16 bits (one
    # bitcast pass over the result), where a reduce-scatter splits its operand and narrows f32
    ("tp_to_sp_reduce_scatter", [("bits-out", None)], [("widen-in", None), ("narrow-out", None)]),
    ("hidden_gather", [("interleave", (1024, 4, 128))], [("interleave", (1024, 4, 128))]),
    ("sp_to_tp_gather_seq", [("interleave", (4, 4, 65536))], [("interleave", (4, 4, 65536))]),
    ("seq_to_hidden", [("all-to-all", (512, 4, 128))], [("all-to-all", (512, 4, 128))]),  # strided, bitcast in the join
    ("moe_expert_axis_swap", [], [("bits-out", None)]),  # ours ends in an all-to-all (its join writes), XLA in a permute
    ("unreduced_to_hidden", [("slice-out", None)], [("slice-out", None)]),  # all-reduce, then its part
    ("fsdp_gather_2d", [], []),  # f32, gathered along the major dimension
    ("fsdp_gather_data", [], []),  # permute + gather: no claim for a gather that is not alone
    ("fsdp_gather_data_minor", [], []),  # a lone gather whose chunks are whole source blocks
    ("rank1_gather_minor", [], []),
]


@pytest.mark.parametrize(("name", "ours", "xla"), RULES, ids=[r[0] for r in RULES])
def test_rules_on_named_cases(name: str, ours: list[tuple[str, object]], xla: list[tuple[str, object]]) -> None:
    hlo, case = _sides(name)
    got = {k: [(p.rule, p.shape) for p in side_passes(case.src_type, case.dst_type, h)] for k, h in hlo.items()}
    assert got == {"ours": ours, "xla": xla}
    for p in side_passes(case.src_type, case.dst_type, hlo["ours"]):
        size = case.src_type.local_size if p.rule in ("split", "widen-in") else case.dst_type.local_size
        assert p.elements == size


@pytest.mark.parametrize("name", ["hidden_gather", "sp_to_tp_gather_seq", "sp_full_mesh_gather"])
def test_interleave_reorders_the_gathered_chunks_into_the_destination(name: str) -> None:
    """The interleave pass, applied to a lone all-gather's result (the members' source blocks
    one after another), gives each device's destination block: the pass timed is the one needed."""
    hlo, case = _sides(name)
    (c,) = hlo["ours"].collectives
    (p,) = side_passes(case.src_type, case.dst_type, hlo["ours"])
    assert p.shape is not None
    a, n, b = p.shape
    _, value = reference_values(case.src_type)
    cut = lambda t, d: value[tuple(slice(lo, hi) for lo, hi in t.block(d))].reshape(-1)  # noqa: E731
    for g in c.groups:
        gathered = np.concatenate([cut(case.src_type, m) for m in g])
        for d in g:
            assert (gathered.reshape(n, a, b).transpose(1, 0, 2).reshape(-1) == cut(case.dst_type, d)).all()


def test_pass_thunks_share_one_program_per_distinct_pass() -> None:
    same = (Pass("bits-out", 64, "u16", "bf16"),)
    thunks, uses = pass_thunks({"ours": same, "xla": same, "none": ()}, DEVICES)
    assert len(thunks) == 1 and uses["ours"] == uses["xla"] and uses["none"] == []


@pytest.mark.parametrize("name", ["seq_to_hidden", "hidden_to_seq", "ulysses_seq_to_heads"])
def test_strided_all_to_all_is_the_same_collective_with_its_slices_and_one_join(name: str) -> None:
    """The refined all-to-all: the case's all-to-all (kind, groups, elements), the p slice
    fusions that fill its send buffers and one join fusion writing the destination block, and
    nothing else; its reorder, applied to the members' source blocks in NumPy, gives each device's
    destination block."""
    hlo, case = _sides(name)
    (c,) = hlo["ours"].collectives
    (p,) = side_passes(case.src_type, case.dst_type, hlo["ours"])
    bare = pass_program(p, DEVICES)
    assert bare is not None and p.shape is not None and p.join is not None
    (got,) = parse_collectives(bare.hlo).collectives
    assert collective_key(got)[2] == collective_key(c)[2] and len(got.groups) == len(c.groups)
    n = len(c.groups[0])
    assert _entry_ops(bare.hlo) == ["fusion"] * n + ["all-to-all", "fusion"]
    assert local_writes(bare.hlo).bytes_written == 2 * case.dst_type.local_bytes  # send slices + join
    _, value = reference_values(case.src_type)
    cut = lambda t, d: value[tuple(slice(lo, hi) for lo, hi in t.block(d))].reshape(-1)  # noqa: E731
    (a2, _, b2) = p.join
    for g in c.groups:
        for i, d in enumerate(g):
            pieces = np.stack([cut(case.src_type, m).reshape(p.shape)[:, i, :].reshape(-1) for m in g])
            joined = pieces.reshape(n, a2, b2).transpose(1, 0, 2).reshape(-1)
            assert (joined == cut(case.dst_type, d)).all()


def test_strided_all_to_all_stands_in_for_the_flat_one() -> None:
    assert refined_names(["bare:all-to-all:1", "bare:collective-permute:2"], ["pass:all-to-all:0"]) == [
        "bare:collective-permute:2", "pass:all-to-all:0"]
    assert refined_names(["bare:all-gather:1"], ["pass:bits-out:0"]) == ["bare:all-gather:1", "pass:bits-out:0"]
