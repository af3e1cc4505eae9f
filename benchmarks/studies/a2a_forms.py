"""The two ways of splitting an all-to-all's block (``redist.executor._all_to_all_in_place``), timed.

Why: the all-to-all sends dimension ``d``'s ``g`` major chunks to the group's members. Written
as an all-to-all on a ``(g, n/g)`` reshape of ``d`` (``reshape``), XLA:CPU builds each peer's send
buffer in a slice fusion that reads the parameter through a bitcast; written on ``d`` itself
(``direct``), the send buffers are plain slices of the parameter. XLA:CPU's parallel task
assignment prices the bitcast slice by the whole operand and splits it over threads (on 8
simulated devices sharing the host's cores, that costs), the plain slice by its own bytes only.
But where ``d`` is the minor dimension, the received pieces of the direct form are
concatenated on that minor dimension, which XLA:CPU does not fuse into the join's transpose:
one more full-size pass. The executor picks a form by the rule this table supports; rerun it
after a JAX upgrade.

``python -m benchmarks.studies.a2a_forms [--seconds S] [--rounds R]``: for each (dtype, shape, joined
dimension, split dimension), the median over ``R`` rounds of each round's interleaved median time
of both forms (8 simulated CPU devices, {data=2, model=4}, the all-to-all over ``model``), the
spread of the per-round ratio, and which form the executor's rule picks.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from benchmarks.harness import at_least, round_robin, suite_parser, thunk  # noqa: E402
from benchmarks.studies.join_forms import GROUP, compile_forms  # noqa: E402
from redist.executor import _all_to_all_in_place, _on_bits  # noqa: E402

ARGS = {"axis_name": "model"}


class Form(NamedTuple):
    dtype: str
    shape: tuple[int, ...]  # global
    join: int  # sharded over ``model`` in the source, the received pieces joined on it
    split: int  # sharded over ``model`` in the result, split among the group
    data: int  # sharded over ``data`` on both sides


_SHAPES: tuple[tuple[tuple[int, ...], int, int, int], ...] = (  # (shape, join, split, data)
    ((8, 512, 512), 1, 2, 0),  # seq_to_hidden: split the minor dimension
    ((8, 64, 4096), 1, 2, 0),
    ((8, 1024, 1024), 1, 2, 0),
    ((8, 512, 512), 2, 1, 0),  # hidden_to_seq: join on the minor dimension
    ((8, 4096, 64), 2, 1, 0),
    ((8, 64, 64, 512), 3, 1, 0),
    ((4, 256, 16, 64), 1, 2, 0),  # ulysses_seq_to_heads: neither minor
    ((4, 256, 16, 64), 2, 1, 0),  # ulysses_heads_to_seq
    ((8, 1024, 64, 8), 1, 2, 0),
    ((2, 64, 16, 16), 1, 2, 0),
    ((4, 128, 32, 128), 1, 2, 0),
    ((8, 64, 512, 32), 2, 1, 0),
    ((8, 512, 64, 64), 1, 2, 0),
    ((32, 512, 128), 1, 0, 2),  # moe_dispatch-like: split the leading dimension
    ((8, 128, 2048), 0, 1, 2),
)

FORMS: tuple[Form, ...] = tuple(Form(dt, *row) for dt in ("float32", "int32", "bfloat16") for row in _SHAPES
                                if dt != "int32" or row[0] in ((4, 256, 16, 64), (8, 512, 64, 64), (8, 512, 512)))


def _program(f: Form, direct: bool | None) -> Callable[[jax.Array], jax.Array]:
    """One device's move through the executor's own lowering, its split forced by ``direct``
    (``None``: the executor's rule), 16-bit floats on their bits as the executor moves them."""
    return lambda v: _on_bits(v, lambda x: _all_to_all_in_place(x, f.join, f.split, GROUP, ARGS, direct=direct))


def _specs(f: Form) -> tuple[P, P]:
    src: list[Any] = [None] * len(f.shape)
    src[f.data] = "data"
    dst = list(src)
    src[f.join], dst[f.split] = "model", "model"
    return P(*src), P(*dst)


def time_form(f: Form, seconds: float, rounds: int) -> tuple[list[float], list[float], str]:
    """Per-round median seconds of the reshape form and the direct form of ``f`` (checked to
    agree), and which of them the executor's rule compiles to."""
    progs, x, pick = compile_forms(lambda c: _program(f, c), f.shape, f.dtype, _specs(f), ("reshape", "direct"))
    runs = [round_robin({n: thunk(p, x) for n, p in progs.items()}, seconds / rounds) for _ in range(rounds)]
    return [r["reshape"] for r in runs], [r["direct"] for r in runs], pick


def table(forms: Sequence[Form], seconds: float, rounds: int) -> list[str]:
    lines = ["| dtype | global shape | joined dim | split dim | reshape ms | direct ms | direct / reshape (min-max over rounds) | rule picks |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for f in forms:
        old, new, pick = time_form(f, seconds, rounds)
        ratios = sorted(n / o for n, o in zip(new, old))
        lines.append(f"| {f.dtype} | {list(f.shape)} | {f.join} | {f.split} | {statistics.median(old) * 1e3:.3f} | "
                     f"{statistics.median(new) * 1e3:.3f} | {statistics.median(ratios):.2f} "
                     f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | {pick} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("studies.a2a_forms", __doc__)
    parser.add_argument("--seconds", type=at_least(0, float), default=3.0, help="timing budget per form pair")
    parser.add_argument("--rounds", type=at_least(1, int), default=5, help="interleaved rounds per form pair")
    args = parser.parse_args(argv)
    print(f"Command: `python -m benchmarks.studies.a2a_forms --seconds {args.seconds} --rounds {args.rounds}`")
    table(FORMS, args.seconds, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
