"""The partitioner against XLA's: for each model x strategy, jit the same training step with the
input shardings our tactics produced and let XLA's SPMD partitioner do the rest.

Both programs are compiled; collectives and their bytes are read from the optimised HLO (the same
parser for both), temporary memory from ``memory_analysis()``, wall time as the median of a few
runs. A practitioner's hand count of collectives per strategy is shown next to both.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax

from benchmarks.hlo import parse_collectives
from partir_core import models as M
from partir_core import partition
from partir_core import strategies as S
from spmd_types import Mesh
from spmd_types.jax_interop import mesh_to_jax, to_named_sharding

_ABBR = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
         "collective-permute": "CP", "ragged-all-to-all": "RA2A"}


@dataclass(frozen=True)
class Side:
    collectives: dict[str, int]
    recv_bytes: float
    temp_bytes: int
    time_s: float

    def fmt(self) -> str:
        return " ".join(f"{_ABBR.get(k, k)}x{n}" for k, n in sorted(self.collectives.items())) or "-"


@dataclass(frozen=True)
class Row:
    model: str
    strategy: str
    hand: str
    ours: Side
    xla: Side
    predicted: dict[str, int]


def hand_count(model: str, strategy: str, n_params: int) -> str:
    """Collectives a practitioner derives by hand (per training step)."""
    megatron = {"mlp": 1, "transformer": 4}[model]  # fwd after w2 (+ attention), bwd the same
    z = n_params  # ZeRO: every parameter (tensor) is sharded over data
    table = {
        "BP": f"AR x{n_params + 1} (one per gradient, one for the loss)",
        "MP": f"AR x{megatron} (Megatron: one per block per direction)",
        "Z2": f"RS x{z} (gradients), AG x{z} (updated params), AR x1 (loss)",
        "Z3": f"AG x{z} (params before use), RS x{z} (gradients), AR x1 (loss)",
        "EMB": "AG x1 (table before lookup)",
        "BP+MP": f"AR x{megatron} (MP) + AR x{n_params + 1} (BP)",
        "BP+MP+Z3": f"AR x{megatron} (MP) + AG x{z}, RS x{z}, AR x1 (Z3)",
    }
    return table[strategy]


def _measure(compiled: Any, args: list[Any], runs: int) -> Side:
    hlo = parse_collectives(compiled.as_text())
    counts = dict(Counter(c.kind for c in hlo.collectives))
    ma = compiled.memory_analysis()
    temp = int(ma.temp_size_in_bytes) if ma is not None else -1
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return Side(counts, float(hlo.recv_bytes or 0.0), temp, statistics.median(times))


def bench_one(model: M.Model, strategy: str, mesh: Mesh, runs: int = 5) -> Row:
    ours, xla, predicted = bench_schedule(model, S.schedule(model.name, strategy), mesh, runs)
    return Row(model.name, strategy, hand_count(model.name, strategy, len(model.params)), ours, xla, predicted)


def bench_schedule(model: M.Model, schedule: list[Any], mesh: Mesh, runs: int = 5) -> tuple[Side, Side, dict[str, int]]:
    """Our partitioned step and XLA's (jit with the same input shardings), both compiled and timed."""
    step = partition(model.step, mesh, schedule)
    a = step.trace(*model.args)
    leaves = jax.tree_util.tree_leaves(model.args)
    # ours
    from partir_core.api import fn_mesh
    jm = fn_mesh(mesh)
    ours_args = [jax.device_put(x, to_named_sharding(t, jm)) for x, t in zip(leaves, a.lowered.in_types)]
    _, fn = step._compiled(*model.args)
    ours = _measure(fn.lower(*ours_args).compile(), ours_args, runs)
    # XLA: same input shardings, its own partitioning of everything else
    xm = mesh_to_jax(mesh, explicit=False)
    shardings = [to_named_sharding(t, xm) for t in a.lowered.in_types]
    xla_args = [jax.device_put(x, s) for x, s in zip(leaves, shardings)]
    flat = jax.jit(lambda *xs: model.step(*jax.tree_util.tree_unflatten(a.program.in_tree, list(xs))),
                   in_shardings=shardings)
    xla = _measure(flat.lower(*xla_args).compile(), xla_args, runs)
    return ours, xla, step.simulate().counts()


def run_partitioner_bench(mesh: Mesh | None = None, models: tuple[str, ...] = ("mlp", "transformer"),
                          strategies: tuple[str, ...] | None = None, runs: int = 5,
                          sizes: dict[str, dict[str, int]] | None = None) -> tuple[list[Row], str]:
    """Rows for every model x strategy, and the markdown table of the report."""
    mesh = mesh or Mesh({"data": 4, "model": 2})
    rows = []
    for name in models:
        model = M.MODELS[name](**(sizes or {}).get(name, {}))
        for s in strategies or tuple(S.applicable(name)):
            if s in S.applicable(name):
                rows.append(bench_one(model, s, mesh, runs))
    return rows, table(rows)


def table(rows: list[Row]) -> str:
    out = ["| model | strategy | hand count | ours: collectives | ours: recv B | ours: temp B | ours: ms "
           "| XLA: collectives | XLA: recv B | XLA: temp B | XLA: ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.model} | {r.strategy} | {r.hand} | {r.ours.fmt()} | {r.ours.recv_bytes:,.0f} | "
                   f"{r.ours.temp_bytes:,} | {r.ours.time_s * 1e3:.2f} | {r.xla.fmt()} | "
                   f"{r.xla.recv_bytes:,.0f} | {r.xla.temp_bytes:,} | {r.xla.time_s * 1e3:.2f} |")
    return "\n".join(out)
