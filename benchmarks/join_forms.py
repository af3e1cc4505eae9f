"""The two forms of joining a collective's received pieces (``redist.executor._join``), timed.

Why: XLA:CPU compiles a transpose-and-reshape of the pieces into one loop fusion, and a
``concatenate`` of them into a copy of contiguous runs; which is faster depends on whether the
joined dimension is the minor one, on the collective (an all-to-all's pieces arrive as a tuple
the loop selects among per element) and on the element width. The executor picks a form by the
rule this table supports; rerun it after a JAX upgrade.

``python -m benchmarks.join_forms [--seconds S]``: for each (collective, dtype, shape, joined
dimension), the median time of the ``moveaxis`` form and of the ``concatenate`` form, interleaved
in one process on 8 simulated CPU devices ({data=2, model=4}, the collective over ``model``),
and which form the executor's rule picks.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from benchmarks.speed import _at_least, round_robin, thunk  # noqa: E402
from redist.executor import _all_to_all_in_place, _gather_into  # noqa: E402

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.join_forms", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=_at_least(0, float), default=1.5, help="timing budget per form pair")
    args = parser.parse_args(argv)
    print(f"Command: `python -m benchmarks.join_forms --seconds {args.seconds}`")
    table(FORMS, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
