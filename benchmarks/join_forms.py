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

from benchmarks.speed import round_robin, thunk  # noqa: E402
from redist.executor import _join, concat_joins  # noqa: E402

GROUP = 4


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


def _bits(v: jax.Array) -> jax.Array:
    return lax.bitcast_convert_type(v, jnp.uint16) if v.dtype.itemsize == 2 else v


def _program(f: Form, concat: bool) -> Callable[[jax.Array], jax.Array]:
    """One device's move, its pieces joined by a concatenate or by a transpose (``concat``)."""
    def move(v: jax.Array) -> jax.Array:
        x = _bits(v)
        y, k = _collective(f, x)
        out = _join(y, k, f.join, concat)
        return lax.bitcast_convert_type(out, v.dtype) if v.dtype.itemsize == 2 else out
    return move


def _collective(f: Form, x: jax.Array) -> tuple[jax.Array, int]:
    """The received pieces of ``f``'s collective on one device's block, and their axis."""
    if f.collective == "all-gather":
        return lax.all_gather(x, "model", axis=0, tiled=False), 0
    assert f.split is not None
    shape = list(x.shape)
    split = shape[:f.split] + [GROUP, shape[f.split] // GROUP] + shape[f.split + 1:]
    return lax.all_to_all(x.reshape(split), "model", f.split, f.split, tiled=True), f.split


def _specs(f: Form) -> tuple[P, P]:
    src: list[Any] = ["data"] + [None] * (len(f.shape) - 1)
    src[f.join] = "model"
    dst = list(src)
    dst[f.join] = None
    if f.split is not None:
        dst[f.split] = "model"
    return P(*src), P(*dst)


def time_form(f: Form, seconds: float) -> dict[str, float]:
    """Median seconds of the move form and the concatenate form of ``f`` (the same values)."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, GROUP), ("data", "model"))
    src, dst = _specs(f)
    x = jax.device_put(jnp.asarray(np.random.default_rng(0).standard_normal(f.shape), f.dtype),
                       NamedSharding(mesh, src))
    progs = {name: jax.jit(jax.shard_map(_program(f, c), mesh=mesh, in_specs=src, out_specs=dst,
                                         check_vma=False)).lower(x).compile()
             for name, c in (("move", False), ("concat", True))}
    a, b = (np.asarray(p(x)) for p in progs.values())
    if not np.array_equal(a, b):
        raise RuntimeError(f"the two join forms disagree on {f}")
    return round_robin({n: thunk(p, x) for n, p in progs.items()}, seconds)


def rule_picks_concat(f: Form) -> bool:
    """The executor's choice for ``f``: ``concat_joins`` on the shape of its received pieces."""
    block = [n // 2 if i == 0 else n // GROUP if i == f.join else n for i, n in enumerate(f.shape)]
    if f.collective == "all-gather":
        return concat_joins((GROUP, *block), 0, f.join, jnp.dtype(f.dtype).itemsize == 2)
    assert f.split is not None
    pieces = block[:f.split] + [GROUP, block[f.split] // GROUP] + block[f.split + 1:]
    return concat_joins(pieces, f.split, f.join, True)


def table(forms: Sequence[Form], seconds: float) -> list[str]:
    lines = ["| collective | dtype | global shape | joined dim | moveaxis ms | concatenate ms | concat / move | rule picks |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for f in forms:
        t = time_form(f, seconds)
        pick = "concatenate" if rule_picks_concat(f) else "moveaxis"
        lines.append(f"| {f.collective} | {f.dtype} | {list(f.shape)} | {f.join} | {t['move'] * 1e3:.3f} | "
                     f"{t['concat'] * 1e3:.3f} | {t['concat'] / t['move']:.2f} | {pick} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.join_forms", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="timing budget per form pair")
    args = parser.parse_args(argv)
    print(f"Command: `python -m benchmarks.join_forms --seconds {args.seconds}`")
    table(FORMS, args.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
