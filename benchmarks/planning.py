"""Planning time of the synthesizer (cold cache) and its gap to the exhaustive search.

Reproduce: ``redist bench-plan`` (``--pairs N --seed S``). Prints markdown tables.

1. Time per plan for random rank-4 types on the 4-axis mesh ``{a=2,b=2,c=2,d=2}`` (the issue's
   target: mean under 1 ms): with the plan caches cleared before each plan (per-mesh tables such
   as device coordinates stay, as in a compiler), and with every memo table cleared.
2. On the small meshes of the exhaustive tests: how often the synthesizer's plan differs from
   the Dijkstra search's optimum, in bytes (never expected) and in estimated time.
"""

from __future__ import annotations

import itertools
import random
import statistics
import time
from dataclasses import dataclass

from redist import CostModel
from redist.caches import clear_caches
from redist.enumerate import all_types
from redist.search import plan_key, search
from redist.synth import synthesize
from spmd_types import Mesh, ShardingType


@dataclass(frozen=True)
class TimingRow:
    label: str
    n: int
    mean_ms: float
    median_ms: float
    p90_ms: float
    max_ms: float


def random_type(rng: random.Random, mesh: Mesh, shape: tuple[int, ...], unreduced: bool) -> ShardingType:
    dims: list[list[str]] = [[] for _ in shape]
    unred = []
    for ax in mesh.names:
        r = rng.randrange(len(shape) + (2 if unreduced else 1))
        if r < len(shape):
            dims[r].append(ax)
        elif r == len(shape) + 1:
            unred.append(ax)
    for d in dims:
        rng.shuffle(d)
    return ShardingType(shape, "f32", [tuple(d) for d in dims], mesh, unred)


def time_plans(pairs: list[tuple[ShardingType, ShardingType]], label: str, level: str = "all") -> TimingRow:
    """Wall time per plan; ``level`` says which memo tables are cleared before each plan."""
    cm = CostModel()
    times = []
    for s, d in pairs:
        clear_caches(level)
        t0 = time.perf_counter()
        synthesize(s, d, cm)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return TimingRow(label, len(times), statistics.fmean(times), statistics.median(times),
                     times[int(0.9 * (len(times) - 1))], times[-1])


def optimality_gap(n_per_case: int, seed: int) -> list[tuple[str, int, int, int, float]]:
    """(case, pairs, differ in bytes, differ in time, worst time ratio ours/search)."""
    cases = [
        (Mesh({"x": 2, "y": 2}), (12,)), (Mesh({"x": 2, "y": 2}), (4, 6)),
        (Mesh({"x": 2, "y": 3}), (12, 6)), (Mesh({"x": 2, "y": 2, "z": 2}), (4, 4)),
    ]
    rows = []
    for mesh, shape in cases:
        ts = list(all_types(mesh, shape, "s32"))
        pairs = list(itertools.product(ts, ts))
        random.Random(seed).shuffle(pairs)
        bytes_diff = time_diff = 0
        worst = 1.0
        for s, d in pairs[:n_per_case]:
            a, b = synthesize(s, d), search(s, d)
            if round(a.recv_bytes, 6) != round(b.recv_bytes, 6):
                bytes_diff += 1
            elif plan_key(a) != plan_key(b):
                time_diff += 1
                worst = max(worst, a.time_s / b.time_s if b.time_s else float("inf"))
        rows.append((f"{mesh} {list(shape)}", min(n_per_case, len(pairs)), bytes_diff, time_diff, worst))
    return rows


def main(pairs: int = 500, seed: int = 0, gap_pairs: int = 150) -> str:
    rng = random.Random(seed)
    mesh = Mesh({"a": 2, "b": 2, "c": 2, "d": 2})
    shape = (64, 64, 64, 64)
    plain = [(random_type(rng, mesh, shape, False), random_type(rng, mesh, shape, False)) for _ in range(pairs)]
    unred = [(random_type(rng, mesh, shape, True), random_type(rng, mesh, shape, False)) for _ in range(pairs // 5)]
    synthesize(*plain[0])  # imports and first-call set-up are not planning time
    rows = [time_plans(plain, "rank 4, {a=2,b=2,c=2,d=2}, plan caches cold (mesh tables warm)", "plans"),
            time_plans(plain, "rank 4, {a=2,b=2,c=2,d=2}, every cache cold", "all"),
            time_plans(unred, "rank 4, same, unreduced sources, every cache cold", "all")]
    out = [f"Command: redist bench-plan --pairs {pairs} --seed {seed}", "",
           "| pairs | n | mean ms | median ms | p90 ms | max ms |", "|---|---|---|---|---|---|"]
    out += [f"| {r.label} | {r.n} | {r.mean_ms:.2f} | {r.median_ms:.2f} | {r.p90_ms:.2f} | {r.max_ms:.2f} |"
            for r in rows]
    out += ["", "| small mesh | pairs | differ in bytes | differ in time only | worst time ratio |",
            "|---|---|---|---|---|"]
    out += [f"| {c} | {n} | {b} | {t} | {w:.2f} |" for c, n, b, t, w in optimality_gap(gap_pairs, seed)]
    return "\n".join(out)
