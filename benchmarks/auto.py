"""``partir_core.auto`` against the hand strategies and XLA: ``python -m benchmarks.auto``.

For each model x mesh x memory budget (x the tactics a user fixes first): the schedule the search
finds, its simulated time and peak, its measured time (compiled, median of runs), the same for
the best hand strategy of ``partir_core.strategies`` (fastest measured among those whose simulated
peak fits the budget), XLA's time with the found schedule's input layouts, and the search time.

The tight budget is ``TIGHT`` x the simulated peak of BP, which replicates every parameter and
its optimizer state: so every schedule that keeps all parameters whole is ruled out.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from benchmarks.partitioner import Side, bench_schedule  # noqa: E402
from partir_core import Shard, auto, partition  # noqa: E402
from partir_core import models as M  # noqa: E402
from partir_core import strategies as S  # noqa: E402
from partir_core.auto import AutoResult  # noqa: E402
from spmd_types import Mesh  # noqa: E402

SIZES: dict[str, dict[str, int]] = {
    "mlp": dict(batch=64, d_in=256, hidden=1024, classes=64),
    "transformer": dict(batch=8, seq=64, d_model=128, heads=8, head_dim=16, ffn=512, vocab=256),
}
"""Models the benchmark searches, at sizes where compute, not dispatch, dominates measured time
(adding a model is one line: its name in ``partir_core.models.MODELS`` and its sizes)."""
TIGHT = 0.6
FIXED: dict[str, list[Any]] = {"": [], "BP": [Shard("batch", dim=0, axis="data")]}


@dataclass(frozen=True)
class AutoRow:
    model: str
    budget: int | None
    fixed: str
    result: AutoResult
    ours: Side
    xla: Side
    hand: str
    hand_sim_s: float
    hand_peak: int
    hand_side: Side


def _hand(model: M.Model, mesh: Mesh, budget: int | None, runs: int) -> tuple[str, float, int, Side]:
    best: tuple[str, float, int, Side] | None = None
    for name in S.applicable(model.name):
        step = partition(model.step, mesh, S.schedule(model.name, name))
        step.trace(*model.args)
        sim = step.simulate()
        if budget is not None and sim.peak_bytes > budget:
            continue
        side = bench_schedule(model, S.schedule(model.name, name), mesh, runs)[0]
        t = sim.flops / 4e9 + sim.comm_time_s
        if best is None or side.time_s < best[3].time_s:
            best = (name, t, sim.peak_bytes, side)
    assert best is not None, "no hand strategy fits the budget"
    return best


def bench(name: str, mesh: Mesh, runs: int, time_budget_s: float) -> list[AutoRow]:
    model = M.MODELS[name](**SIZES.get(name, {}))
    bp = partition(model.step, mesh, S.schedule(name, "BP"))
    bp.trace(*model.args)
    rows = []
    for budget in (None, int(TIGHT * bp.simulate().peak_bytes)):
        hand = _hand(model, mesh, budget, runs)
        for label, fixed in FIXED.items():
            r = auto(model.step, mesh, *model.args, memory_budget=budget, fixed=fixed, seed=0,
                     time_budget_s=time_budget_s)
            ours, xla, _ = bench_schedule(model, list(r.schedule), mesh, runs)
            rows.append(AutoRow(name, budget, label, r, ours, xla, *hand))
            print(r.explain().split("\n== search space")[0], flush=True)
    return rows


def table(rows: list[AutoRow]) -> str:
    out = ["| model | budget B | fixed | found schedule | sim us | peak B | measured ms | XLA ms | "
           "best hand | hand sim us | hand peak B | hand ms | found/hand | search s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ev = r.result.evaluation
        found = "; ".join(str(t) for t in r.result.found) or "(replicated)"
        out.append(f"| {r.model} | {r.budget or '-'} | {r.fixed or '-'} | {found} | {ev.time_s * 1e6:,.0f} | "
                   f"{ev.peak_bytes:,} | {r.ours.time_s * 1e3:.2f} | {r.xla.time_s * 1e3:.2f} | {r.hand} | "
                   f"{r.hand_sim_s * 1e6:,.0f} | {r.hand_peak:,} | {r.hand_side.time_s * 1e3:.2f} | "
                   f"{r.ours.time_s / r.hand_side.time_s:.3f} | {r.result.stats.seconds:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="*", default=list(SIZES))
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--time-budget", type=float, default=60.0)
    a = p.parse_args(argv)
    mesh = Mesh({"data": 2, "model": 4})
    rows = [r for name in a.models for r in bench(name, mesh, a.runs, a.time_budget)]
    print(table(rows))


if __name__ == "__main__":
    main()
