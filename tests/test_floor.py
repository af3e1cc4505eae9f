"""The collective floor (benchmarks.floor, issue 11's ceiling): each collective of a compiled
program rebuilt alone must compile to that very collective (kind, device groups or pairs, elements
received per device) and nothing else collective, so the floor times what the program's
communication costs and nothing more. Machine-independent, asserted exactly."""

from __future__ import annotations

import jax
import pytest
from jax.sharding import NamedSharding

from benchmarks.cases import NAMED_CASES
from benchmarks.floor import bare_program, bare_thunks, floor_s
from redist import redistribute
from redist.arrays import make_input
from redist.executor import compile_plan
from redist.hlo import Collective, collective_key, parse_collectives
from spmd_types.jax_interop import to_partition_spec

CASES = {c.name: c for c in NAMED_CASES}


def _modules(name: str) -> tuple[dict[str, str], object]:
    case = CASES[name]
    jm = case.mesh.to_jax()
    x, _ = make_input(case.src_type, jm)
    plan = redistribute(case.src_type, case.dst_type, case.mesh)
    xla = jax.jit(lambda a: a, out_shardings=NamedSharding(jm, to_partition_spec(case.dst_type)))
    texts = {"ours": compile_plan(plan).lower(x).compile().as_text(), "xla": xla.lower(x).compile().as_text()}
    return texts, jm.devices.flatten()


@pytest.mark.parametrize("name", ["tp2d_transpose_4x2", "seq_to_hidden", "tp_allreduce", "size3_transpose",
                                  "tp_to_sp_reduce_scatter", "fsdp_gather_data"])
def test_bare_collective_is_the_same_collective(name: str) -> None:
    texts, devices = _modules(name)
    seen = 0
    for text in texts.values():
        for c in parse_collectives(text).collectives:
            bare = bare_program(c, devices)
            assert bare is not None and bare.kind == c.kind
            got = parse_collectives(bare.hlo).collectives
            ids = tuple(d.id for d in devices)
            assert [_on_devices(g, bare.device_ids) for g in got] == [_on_devices(c, ids)], (c, got)
            seen += 1
    assert seen >= 2


def _on_devices(c: Collective, ids: tuple[int, ...]) -> tuple[object, ...]:
    """``c``'s key with partition ids read as device ids (each program numbers its own)."""
    kind, groups, recv = collective_key(c)
    return kind, frozenset(frozenset(ids[i] for i in g) if kind != "collective-permute" else (ids[g[0]], ids[g[1]])
                           for g in groups), recv


def test_bare_16_bit_moves_are_bits_and_sums_stay_floats() -> None:
    """A 16-bit move is timed on its bit patterns (XLA:CPU would widen bf16 around it, which our
    executor avoids too); a 16-bit sum keeps its float type (the program widens it as well)."""
    texts, devices = _modules("tp_allreduce")  # bf16: reduce-scatter + all-gather
    lines = {}
    for c in parse_collectives(texts["ours"]).collectives:
        bare = bare_program(c, devices)
        assert bare is not None
        lines[c.kind] = next(ln for ln in bare.hlo.splitlines() if f" {c.kind}(" in ln or f" {c.kind}-start(" in ln)
    assert set(lines) == {"reduce-scatter", "all-gather"}
    assert "u16[" in lines["all-gather"] and "u16[" not in lines["reduce-scatter"]


def test_bare_thunks_share_one_program_per_distinct_collective() -> None:
    texts, devices = _modules("tp2d_transpose_3axis")
    hlo = {k: parse_collectives(t) for k, t in texts.items()}
    thunks, uses = bare_thunks({**hlo, "again": hlo["ours"]}, devices)
    assert set(uses) == {"ours", "xla", "again"} and uses["again"] == uses["ours"]
    assert len(uses["ours"]) == len(hlo["ours"].collectives)
    distinct = {collective_key(c) + (c.operand_bytes,) for h in hlo.values() for c in h.collectives}
    assert len(thunks) == len(distinct) + 1  # + dispatch


def test_floor_counts_one_dispatch() -> None:
    assert floor_s([3.0, 2.0, 1.0], 0.5) == 5.0
    assert floor_s([3.0], 0.5) == 3.0
    assert floor_s([], 0.5) == 0.5  # a program without collectives still dispatches once
