"""Expert parallelism on the mixture of experts against XLA given the same input and output shardings.

For each plan (``BP+EP``; the FSDP-style plan the same expert-weight sharding gets without the
expert layout, ``BP`` + ``Shard`` of the experts; ``BP``), the MoE training step is partitioned
by us and, with our input and output shardings, by XLA's SPMD partitioner (``jax.jit``). Each
side reports its compiled collectives (each once, as the HLO text holds them; a loop body's once
per program, not per iteration), received bytes (``redist.hlo.parse_collectives``)
and temporary memory (XLA's memory analysis), and every program is timed in every round in a
balanced order (``benchmarks.paired``): the speedup is the median of per-round ratios XLA ms /
ours ms, beside an A/A pair (XLA's BP+EP program against a second compile of itself), which is
what the machine's noise reads as. ``--small`` is the test-size model (seconds); the default is
batch 16, sequence 64, d_model 128, ffn 256, 8 experts, 2 layers, f32, on ``{data=8}``;
``--mesh data=2,model=4`` runs BP+MP+EP, its FSDP-style counterpart and BP+MP+SP+EP.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.harness import suite_parser  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from benchmarks.paired import balanced_order, median_ci  # noqa: E402
from benchmarks.partitioner import compiled_pair  # noqa: E402
from partir_core import Shard  # noqa: E402
from partir_core import models as M  # noqa: E402
from partir_core import strategies as S  # noqa: E402
from redist.hlo import parse_collectives  # noqa: E402
from spmd_types import Mesh  # noqa: E402

SIZES: dict[str, Any] = dict(batch=16, seq=64, d_model=128, heads=8, kv_heads=4, head_dim=16, ffn=256, vocab=256,
                             layers=2, experts=8, dtype=jnp.float32)
SMALL: dict[str, Any] = dict(SIZES, batch=8, seq=8, d_model=16, head_dim=4, ffn=16, vocab=32)
PLANS: dict[str, Callable[[], list[Any]]] = {
    "BP+EP": lambda: S.schedule("moe", "BP+EP"),
    "BP + experts sharded (FSDP-style)": lambda: S.schedule("moe", "BP") + [Shard(S.EXPERTS, axis="data")],
    "BP": lambda: S.schedule("moe", "BP"),
}
"""The plans on a mesh of ``data`` alone; with a ``model`` axis, ``PLANS_2D``."""
PLANS_2D: dict[str, Callable[[], list[Any]]] = {
    "BP+MP+EP": lambda: S.schedule("moe", "BP+MP+EP"),
    "BP+MP + experts sharded (FSDP-style)": lambda: (S.schedule("moe", "BP") + [Shard(S.EXPERTS, axis="data")]
                                                     + S.schedule("moe", "MP")),
    "BP+MP+SP+EP": lambda: S.schedule("moe", "BP+MP+SP+EP"),
}


class Side(NamedTuple):
    counts: dict[str, int]
    recv_bytes: float
    temp_bytes: int
    run: Callable[[], Any]


def _side(compiled: Any, args: list[Any]) -> Side:
    hlo = parse_collectives(compiled.as_text())
    ma = compiled.memory_analysis()
    return Side(dict(Counter(c.kind for c in hlo.collectives)), float(hlo.recv_bytes or 0.0),
                int(ma.temp_size_in_bytes), lambda: jax.block_until_ready(compiled(*args)))


def sides(model: M.Model, schedule: list[Any], mesh: Mesh) -> tuple[Side, Side]:
    """Our compiled step and XLA's with the same input and output shardings."""
    _, ours, ours_args, xla, xla_args = compiled_pair(model, schedule, mesh)
    return _side(ours, ours_args), _side(xla, xla_args)


def _fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "none"


def run(sizes: dict[str, Any], reps: int, mesh: Mesh) -> str:
    model = M.moe(**sizes)
    plans = PLANS_2D if "model" in mesh.names else PLANS
    first = next(iter(plans))
    built = {name: sides(model, plan(), mesh) for name, plan in plans.items()}
    timers: dict[str, Callable[[], Any]] = {}
    for name, (ours, xla) in built.items():
        timers[f"{name}/ours"], timers[f"{name}/xla"] = ours.run, xla.run
    timers["A/A"] = sides(model, plans[first](), mesh)[1].run
    names = sorted(timers)
    for f in timers.values():
        f()  # warm
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for n in balanced_order(names, r):
            t = time.perf_counter()
            timers[n]()
            times[n].append(time.perf_counter() - t)
    head = ("plan", "ours: collectives", "ours recv B", "ours temp B", "XLA: collectives", "XLA recv B",
            "XLA temp B", "ours ms", "XLA ms", "speedup (XLA / ours, 95% CI)")
    rows = []
    for name, (ours, xla) in built.items():
        o, x = times[f"{name}/ours"], times[f"{name}/xla"]
        ci = median_ci([b / a for a, b in zip(o, x)])
        rows.append((name, _fmt(ours.counts), f"{ours.recv_bytes:,.0f}", f"{ours.temp_bytes:,}", _fmt(xla.counts),
                     f"{xla.recv_bytes:,.0f}", f"{xla.temp_bytes:,}", f"{median_ci(o).median * 1e3:.2f}",
                     f"{median_ci(x).median * 1e3:.2f}", f"{ci.median:.2f}x [{ci.lo:.2f}, {ci.hi:.2f}]"))
    aa = median_ci([b / a for a, b in zip(times[f"{first}/xla"], times["A/A"])])
    sizes_txt = ", ".join(f"{k}={getattr(v, '__name__', v)}" for k, v in sizes.items())
    return "\n".join(md_table(head, rows) + [
        "", f"MoE {sizes_txt} on {mesh}; {reps} interleaved rounds; A/A (XLA's {first} program against a second "
        f"compile of itself): {aa.median:.2f}x [{aa.lo:.2f}, {aa.hi:.2f}]"])


def main(argv: list[str] | None = None) -> None:
    p = suite_parser("moe_ep", __doc__, reps=(20, "interleaved rounds of every program"))
    p.add_argument("--small", action="store_true", help="the test-size MoE (seconds, not minutes)")
    p.add_argument("--mesh", default="data=8", help="data=N, or data=N,model=M for the plans with MP")
    args = p.parse_args(argv)
    mesh = Mesh({k: int(v) for k, v in (kv.split("=") for kv in args.mesh.split(","))})
    print(run(SMALL if args.small else SIZES, args.reps, mesh))


if __name__ == "__main__":
    main()
