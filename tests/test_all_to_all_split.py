"""How an all-to-all step builds its send buffers (``redist.executor.splits_directly``).

Exact facts of the compiled HLO (JAX 0.10.2, XLA:CPU): the opcodes of the fusion that builds each
peer's send buffer. Split directly, it is a plain ``slice`` of the block; split through a
``(g, n/g)`` reshape, a ``bitcast`` and a ``slice`` (a ``bitcast-convert`` too for 16-bit floats,
moved as bits). Values are checked against NumPy on the 8 simulated devices, both forms forced.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding

from benchmarks.cases import NAMED_CASES
from benchmarks.studies.a2a_forms import Form, _program, _specs
from redist import AllToAll, redistribute
from redist.arrays import check_output, make_input
from redist.executor import compile_plan, splits_directly
from redist.hlo import all_to_all_send_ops, parse_collectives

CASES = {c.name: c for c in NAMED_CASES}
PLAIN, RESHAPED, RESHAPED_BITS = ("slice",), ("bitcast", "slice"), ("bitcast", "bitcast-convert", "slice")

# case -> the ops building each of the group's send buffers
EXPECTED = {
    "ulysses_seq_to_heads": PLAIN,  # f32, neither the split nor the joined dimension minor
    "ulysses_heads_to_seq": PLAIN,
    "moe_rank4_dispatch": PLAIN,
    "moe_dispatch": PLAIN,  # the leading dimension split
    "moe_combine": PLAIN,
    "moe_2d_experts": PLAIN,
    "fsdp_tp_seq_to_hidden": RESHAPED,  # the minor dimension split
    "seq_to_hidden": RESHAPED_BITS,  # bf16 on its bits
    "hidden_to_seq": RESHAPED_BITS,
    "size3_seq_to_hidden": RESHAPED_BITS,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_send_buffers_of_one_all_to_all(name: str) -> None:
    case = CASES[name]
    plan = redistribute(case.src_type, case.dst_type, case.mesh)
    assert [type(s) for s in plan.steps] == [AllToAll]
    jm = case.mesh.to_jax()
    x, expected = make_input(case.src_type, jm)
    exe = compile_plan(plan, jm).lower(x).compile()
    text = exe.as_text() or ""
    (a2a,) = parse_collectives(text).collectives
    assert a2a.kind == "all-to-all"
    assert all_to_all_send_ops(text) == (EXPECTED[name],) * a2a.group_size  # one send buffer per peer
    assert check_output(exe(x), expected, case.dst_type) is None


@pytest.mark.parametrize("shape, s, d, itemsize, direct", [
    ((2, 64, 16, 64), 1, 2, 4, True),
    ((2, 256, 4, 64), 2, 1, 4, True),
    ((8, 64, 128), 1, 0, 4, True),
    ((4, 128, 512), 1, 2, 4, False),  # split minor
    ((4, 512, 128), 2, 1, 4, False),  # joined minor
    ((2, 64, 16, 64), 1, 2, 2, False),  # 16-bit bits
    ((2, 64, 16, 64), 1, 2, 1, False),  # not measured
    ((2, 64, 16, 1), 1, 2, 4, False),  # minor in effect: extent-1 dimensions after it
])
def test_rule(shape: tuple[int, ...], s: int, d: int, itemsize: int, direct: bool) -> None:
    assert splits_directly(shape, s, d, itemsize) is direct


FORMS = [
    Form("float32", (4, 256, 16, 64), 1, 2, 0),
    Form("int32", (4, 256, 16, 64), 2, 1, 0),
    Form("float32", (8, 64, 256), 1, 2, 0),
    Form("bfloat16", (8, 64, 256), 2, 1, 0),
    Form("float32", (32, 64, 16), 1, 0, 2),
    Form("bfloat16", (8, 16, 32, 8), 1, 2, 0),
]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f.dtype}{list(f.shape)}-{f.join}to{f.split}")
@pytest.mark.parametrize("direct", [True, False])
def test_both_forms_match_numpy(form: Form, direct: bool) -> None:
    """Each device ends with its destination block of the global array, whichever form is forced,
    and the forced form shows in the send buffers."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    src, dst = _specs(form)
    g = (np.arange(np.prod(form.shape)).reshape(form.shape) % 251).astype(form.dtype)
    x = jax.device_put(jnp.asarray(g), NamedSharding(mesh, src))
    exe = jax.jit(jax.shard_map(_program(form, direct), mesh=mesh, in_specs=src, out_specs=dst,
                                check_vma=False)).lower(x).compile()
    y = exe(x)
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, dst), len(form.shape))
    for shard in y.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), g[shard.index])
    ops: tuple[str, ...] = ("bitcast-convert",) if form.dtype == "bfloat16" else ()
    ops += ("slice",) if direct else ("bitcast", "slice")
    assert set(all_to_all_send_ops(exe.as_text() or "")) == {tuple(sorted(ops))}
