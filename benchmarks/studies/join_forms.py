"""The two forms of joining a collective's received pieces (``redist.executor._join``), timed.

Why: XLA:CPU compiles a transpose-and-reshape of the pieces into one loop fusion, and a
``concatenate`` of them into a copy of contiguous runs; which is faster depends on whether the
joined dimension is the minor one, on the collective (an all-to-all's pieces arrive as a tuple
the loop selects among per element) and on the element width. The executor picks a form by the
rule this table supports; rerun it after a JAX upgrade.

``python -m benchmarks.studies.join_forms [--seconds S]``: for each (collective, dtype, shape, joined
dimension), the median time of the ``moveaxis`` form and of the ``concatenate`` form, interleaved
in one process on 8 simulated CPU devices ({data=2, model=4}, the collective over ``model``),
and which form the executor's rule picks. Then the *chained* table: whole plans whose first step
is an all-to-all with another collective after it, the first all-to-all's join forced either way
(``concat_joins_before``: the next step decides), each plan against XLA's own program for the move.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import redist.executor as ex  # noqa: E402
from benchmarks.harness import at_least, round_robin, suite_parser, thunk  # noqa: E402
from redist import AllToAll, Plan, redistribute  # noqa: E402
from redist.arrays import check_output, make_input  # noqa: E402
from redist.executor import _all_to_all_in_place, _gather_into  # noqa: E402
from redist.hlo import program_text  # noqa: E402
from spmd_types import Mesh as TypesMesh  # noqa: E402
from spmd_types import parse  # noqa: E402
from spmd_types.jax_interop import to_partition_spec  # noqa: E402

GROUP = 4
ARGS = {"axis_name": "model"}


class Form(NamedTuple):
    collective: str  # "all-to-all" or "all-gather"
    dtype: str
    shape: tuple[int, ...]  # global
    join: int  # the dimension the pieces are joined on (sharded in the source)
    split: int | None  # all-to-all: the dimension split among the group (sharded in the result)


FORMS: tuple[Form, ...] = tuple(
    Form(c, dt, shape, j, s)
    for dt in ("float32", "bfloat16")
    for c, shape, j, s in (
        ("all-to-all", (8, 512, 512), 2, 1),  # hidden_to_seq: minor join
        ("all-to-all", (8, 4096, 64), 2, 1),
        ("all-to-all", (8, 512, 64, 8), 2, 1),  # a minor dimension after the join
        ("all-to-all", (8, 512, 512), 1, 2),  # seq_to_hidden
        ("all-gather", (8, 256, 512), 2, None),  # hidden_gather: minor join
        ("all-gather", (8, 2048, 64), 2, None),
        ("all-gather", (8, 512, 64, 8), 2, None),
        ("all-gather", (8, 512, 512), 1, None),
    )
)


def _program(f: Form, concat: bool | None) -> Callable[[jax.Array], jax.Array]:
    """One device's move through the executor's own lowering, its join forced by ``concat``
    (``None``: the executor's rule). 16-bit floats move as bits, as the executor moves them."""
    def move(v: jax.Array) -> jax.Array:
        x = lax.bitcast_convert_type(v, jnp.uint16) if v.dtype.itemsize == 2 else v
        if f.collective == "all-gather":
            out = _gather_into(x, f.join, ARGS, concat)
        else:
            assert f.split is not None
            out = _all_to_all_in_place(x, f.join, f.split, GROUP, ARGS, concat)
        return lax.bitcast_convert_type(out, v.dtype) if v.dtype.itemsize == 2 else out
    return move


def _specs(f: Form) -> tuple[P, P]:
    src: list[Any] = ["data"] + [None] * (len(f.shape) - 1)
    src[f.join] = "model"
    dst = list(src)
    dst[f.join] = None
    if f.split is not None:
        dst[f.split] = "model"
    return P(*src), P(*dst)


def compile_forms(program: Callable[[bool | None], Callable[[jax.Array], jax.Array]], shape: tuple[int, ...],
                  dtype: str, specs: tuple[P, P], names: tuple[str, str]) -> tuple[dict[str, Any], jax.Array, str]:
    """A move's two forms (``program(False)``, ``program(True)``, named ``names``) compiled on
    {data=2, model=4} and checked to agree, its input, and the name of the form the executor's
    rule (``program(None)``) compiles to."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, GROUP), ("data", "model"))
    src, dst = specs
    x = jax.device_put(jnp.asarray(np.random.default_rng(0).standard_normal(shape) * 1000, dtype),
                       NamedSharding(mesh, src))
    progs = {name: jax.jit(jax.shard_map(program(c), mesh=mesh, in_specs=src, out_specs=dst,
                                         check_vma=False)).lower(x).compile()
             for name, c in ((names[0], False), (names[1], True), ("rule", None))}
    a, b = (np.asarray(progs[n](x)) for n in names)
    if not np.array_equal(a, b):
        raise RuntimeError(f"the forms {names} disagree on {dtype}{list(shape)}")
    rule = progs.pop("rule").as_text()
    return progs, x, names[1] if rule == progs[names[1]].as_text() else names[0]


def time_form(f: Form, seconds: float) -> tuple[dict[str, float], str]:
    """Median seconds of the move form and the concatenate form of ``f`` (checked to agree), and
    which of them the executor's rule compiles to."""
    progs, x, pick = compile_forms(lambda c: _program(f, c), f.shape, f.dtype, _specs(f), ("move", "concat"))
    return round_robin({n: thunk(p, x) for n, p in progs.items()}, seconds), {"concat": "concatenate"}.get(pick, "moveaxis")


def table(forms: Sequence[Form], seconds: float) -> list[str]:
    lines = ["| collective | dtype | global shape | joined dim | moveaxis ms | concatenate ms | concat / move | rule picks |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for f in forms:
        t, pick = time_form(f, seconds)
        lines.append(f"| {f.collective} | {f.dtype} | {list(f.shape)} | {f.join} | {t['move'] * 1e3:.3f} | "
                     f"{t['concat'] * 1e3:.3f} | {t['concat'] / t['move']:.2f} | {pick} |")
        print(lines[-1], flush=True)
    return lines


class Chain(NamedTuple):
    name: str  # the random pair it was found as (``benchmarks.random_pairs``, seed 0)
    mesh: tuple[tuple[str, int], ...]
    src: str
    dst: str


_XY24, _XY42, _XYZ = (("x", 2), ("y", 4)), (("x", 4), ("y", 2)), (("x", 2), ("y", 2), ("z", 2))
CHAINS: tuple[Chain, ...] = (
    # 16-bit: every bf16 plan of two all-to-alls among the first 1,500 random pairs whose first
    # join the shape rule (``concat_joins``) makes a moveaxis
    Chain("rand057", _XY42, "bf16[16@y,8,64@x,64]", "bf16[16@x,8@y,64,64]"),
    Chain("rand527", _XY24, "bf16[16,16@x,128@y,16]", "bf16[16,16@y,128,16@x]"),
    Chain("rand790", _XY24, "bf16[256,128@x,16@y]", "bf16[256@x,128@y,16]"),
    Chain("rand802", _XY42, "bf16[32@y,16,128@x,8]", "bf16[32@x,16@y,128,8]"),
    Chain("rand1054", _XY24, "bf16[16@y,64,16@x,32]", "bf16[16@x,64@y,16,32]"),
    Chain("rand1184", _XY24, "bf16[128@x,512@y,8]", "bf16[128@y,512,8@x]"),
    # 32-bit plans of two all-to-alls
    Chain("rand121", _XY24, "s32[16@x,4,128,32@y]", "s32[16@y,4,128@x,32]"),
    Chain("rand537", _XY24, "s32[64@x,8,4,128@y]", "s32[64@y,8,4@x,128]"),
    Chain("rand1225", _XY42, "s32[32,64@y,128@x]", "s32[32@y,64@x,128]"),
    Chain("rand1449", _XY24, "s32[512@y,64,8@x]", "s32[512@x,64@y,8]"),
    # bf16 all-to-alls before another kind of collective
    Chain("rand037", _XY42, "bf16[256@x,32@y,64]", "bf16[256@y,32,64]"),
    Chain("fsdp_gather_transposed_use", (("data", 2), ("model", 4)), "bf16[1024@(data,model),1024]",
          "bf16[1024,1024@model]"),
    Chain("rand134", _XYZ, "bf16[32@x,16@z,64,16@y]", "bf16[32,16@x,64@z,16]"),
    Chain("rand180", _XY24, "bf16[64@y,16,8,64]{U:x}", "bf16[64,16,8,64@y]"),
    Chain("rand136", _XYZ, "bf16[32,8@z,2048]{U:y}", "bf16[32@x,8@y,2048@z]"),
)


def _chain_body(plan: Plan, concat: bool | None) -> Callable[[jax.Array], jax.Array]:
    """``plan``'s per-device program as ``apply_local`` lowers it, except that the join of its
    first all-to-all is forced by ``concat`` (``None``: the executor's rule)."""
    def run(x: jax.Array) -> jax.Array:
        ts = plan.all_types
        for i, step in enumerate(plan.steps):
            if type(step) is AllToAll and concat is not None and i == _first_all_to_all(plan):
                x = ex._on_bits(x, partial(_all_to_all_in_place, s=step.src_dim, d=step.dst_dim,
                                           g=ex._group(step, ts[i])[1], args=ex._args(step, ts[i]), concat=concat))
            else:
                x = ex.LOWER[type(step)].fn((step,), ts[i], ts[i + 1], x, ex.step_after(plan.steps, i + 1))
        return x
    return run


def _first_all_to_all(plan: Plan) -> int:
    return next(i for i, s in enumerate(plan.steps) if type(s) is AllToAll)


def time_chain(c: Chain, seconds: float) -> tuple[Plan, dict[str, float], str]:
    """The plan of ``c``, the median seconds of its two forms and of XLA's program (all checked
    against NumPy), and which form the executor's rule compiles to."""
    mesh = TypesMesh(dict(c.mesh))
    src, dst = parse(c.src, mesh), parse(c.dst, mesh)
    plan = redistribute(src, dst, mesh)
    jm = mesh.to_jax()
    x, expected = make_input(src, jm)
    out = NamedSharding(jm, to_partition_spec(dst))

    def compiled(concat: bool | None) -> Any:
        body = jax.shard_map(_chain_body(plan, concat), mesh=jm, in_specs=to_partition_spec(src),
                             out_specs=to_partition_spec(dst), check_vma=False)
        return jax.jit(body, out_shardings=out).lower(x).compile()

    progs = {"move": compiled(False), "concat": compiled(True)}
    rule = compiled(None).as_text()
    if src.unreduced:
        progs["xla"] = jax.jit(lambda v: jax.sharding.reshard(v, out)).lower(x).compile()
    else:
        progs["xla"] = jax.jit(lambda v: v, out_shardings=out).lower(x).compile()
    for name, p in progs.items():
        wrong = check_output(p(x), expected, dst)
        if wrong is not None:
            raise RuntimeError(f"{c.name}: the {name} program is wrong: {wrong}")
    pick = "concatenate" if program_text(rule) == program_text(progs["concat"].as_text()) else "moveaxis"
    return plan, round_robin({n: thunk(p, x) for n, p in progs.items()}, seconds), pick


def chain_table(chains: Sequence[Chain], seconds: float) -> list[str]:
    lines = ["| pair | move | steps | moveaxis ms | concatenate ms | concat / move | rule picks | rule vs XLA |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for c in chains:
        plan, t, pick = time_chain(c, seconds)
        mine = t["concat"] if pick == "concatenate" else t["move"]
        steps = " + ".join(type(s).__name__ for s in plan.steps)
        lines.append(f"| {c.name} | `{c.src}` -> `{c.dst}` ({', '.join(f'{a}={n}' for a, n in c.mesh)}) | {steps} | "
                     f"{t['move'] * 1e3:.3f} | {t['concat'] * 1e3:.3f} | {t['concat'] / t['move']:.2f} | {pick} | "
                     f"{t['xla'] / mine:.2f}x |")
        print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("studies.join_forms", __doc__)
    parser.add_argument("--seconds", type=at_least(0, float), default=1.5, help="timing budget per form pair")
    args = parser.parse_args(argv)
    print(f"Command: `python -m benchmarks.studies.join_forms --seconds {args.seconds}`\n")
    table(FORMS, args.seconds)
    print()
    chain_table(CHAINS, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
