"""Planning time of the synthesizer (cold cache) and its gap to the exhaustive search.

Reproduce: ``redist bench-plan`` (``--pairs N --seed S``). Prints markdown tables.

1. Time per plan for random rank-4 types on the 4-axis mesh ``{a=2,b=2,c=2,d=2}`` (the issue's
   target: mean under 1 ms): with the plan caches cleared before each plan (per-mesh tables such
   as device coordinates stay, as in a compiler), and with every memo table cleared.
2. On the small meshes of the exhaustive tests: how often the synthesizer's plan differs from
   the Dijkstra search's optimum, in bytes (never expected) and in estimated time.
3. ``--ladder N``: the large-mesh ladder, 256 to 65,536 devices on 3-16 axes
   (realistic meshes such as ``{data=32,fsdp=16,model=8}``), ``N`` random pairs of rank 2-6 per
   rung, a third of them with pending sums on either side: mean/max planning time (plan caches
   cold, mesh tables warm) and how many plans meet the transfer bound; plans above it are split
   by cause: the types share an unreduced axis (the bound is not tight there, docs/design.md
   13.2), the direct exchange is refused by its size limit (``redist.exchange.MAX_CELLS``, 13.3),
   or neither (under the bytes objective a planner miss; under a time objective a choice).
   ``--objective`` and ``--profile`` pick the cost model plans are ranked by (``LADDER_OBJECTIVES``,
   ``ladder_model``): ``bytes`` (the transfer guarantee; the default here), ``alpha-beta`` (the
   unmeasured alpha-beta model: ``redistribute``'s model on a backend without a shipped profile,
   e.g. a GPU cluster not yet calibrated), ``measured`` (the shipped CPU profile: the default on
   CPU) or ``measured`` with ``--profile cpu-gloo`` (label ``gloo``: the shipped cross-process
   profile, the default across processes, on hosts of ``DEVICES_PER_HOST`` devices laid out
   row-major: the axes whose groups span hosts cost what a socket costs, as on any multi-host
   mesh of this size).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from dataclasses import dataclass

import numpy as np

from benchmarks.markdown import md_table
from redist import CostModel
from redist.atoms import unreduced_atoms
from redist.caches import clear_caches
from redist.enumerate import all_types
from redist.errors import RedistError, StepError
from redist.exchange import check_schedule
from redist.plan import Plan
from redist.profile import crossing_axes, packaged_profile
from redist.search import plan_key, search
from redist.synth import synthesize
from spmd_types import Axis, Mesh, ShardingType


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
    cm = CostModel(objective="bytes")
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


LADDER: tuple[dict[str, int], ...] = (
    {"data": 8, "fsdp": 8, "model": 4},
    {f"a{i}": 2 for i in range(8)},
    {"x": 8, "y": 8, "z": 8},
    {"pod": 2, "data": 64, "model": 16},
    {"data": 32, "fsdp": 16, "model": 8},
    {"x": 16, "y": 16, "z": 16},
    {f"a{i}": 2 for i in range(12)},
    {"pod": 2, "data": 32, "fsdp": 16, "model": 8},
    {f"a{i}": 2 for i in range(13)},
    {"pod": 16, "data": 64, "model": 64},
    {"pod": 4, "data": 16, "fsdp": 16, "seq": 4, "model": 16},
    {f"a{i}": 2 for i in range(16)},
)
"""Rungs of the large-mesh ladder: realistic training meshes and binary meshes of 8-16 axes."""


LADDER_OBJECTIVES = ("bytes", "alpha-beta", "measured", "gloo")
"""The ladder's cost models by label: the three objectives, and ``gloo`` (``measured`` under the
shipped cross-process profile, ``--objective measured --profile cpu-gloo``)."""

LADDER_PROFILES = ("cpu", "cpu-gloo")
"""``--profile``: the shipped profile a ``measured`` ladder is priced by."""


def ladder_model(objective: str, profile: str = "cpu") -> str:
    """The ``LADDER_OBJECTIVES`` label of ``--objective`` and ``--profile`` (a typed error where
    ``--profile`` is given to an objective it does not apply to, or is not shipped)."""
    if profile not in LADDER_PROFILES:
        raise RedistError(f"--profile {profile!r} is not one of {', '.join(LADDER_PROFILES)}")
    if profile == "cpu":
        return objective
    if objective != "measured":
        raise RedistError(f"--profile {profile} prices the measured objective; got --objective {objective}: "
                          f"pass --objective measured, or leave --profile out")
    return "gloo"

DEVICES_PER_HOST = 8
"""Devices per process of the ``gloo`` objective's layout (8 accelerators a host is common)."""


def ladder_cost_model(objective: str, mesh: Mesh) -> CostModel:
    """The cost model a ``LADDER_OBJECTIVES`` label names on ``mesh``."""
    if objective not in LADDER_OBJECTIVES:
        raise RedistError(f"objective {objective!r} is not one of {', '.join(LADDER_OBJECTIVES)}")
    if objective in ("measured", "gloo"):
        prof = packaged_profile("cpu" if objective == "measured" else "cpu-gloo")
        assert prof is not None, "the CPU profiles ship with the package"
        return prof.cost_model("measured", host_crossing_axes(mesh) if objective == "gloo" else None)
    return CostModel(objective=objective)


def host_crossing_axes(mesh: Mesh) -> tuple[Axis, ...]:
    """The axes (or factors of axes) whose groups span hosts of ``DEVICES_PER_HOST`` devices, the
    mesh laid out row-major over the devices as ``Mesh.to_jax`` lays it."""
    hosts = np.arange(mesh.size).reshape(tuple(mesh.shape.values())) // DEVICES_PER_HOST
    return crossing_axes(hosts, mesh.names)


@dataclass(frozen=True)
class LadderRow:
    mesh: Mesh
    n: int
    mean_ms: float
    max_ms: float
    slowest: str
    bound_met: int
    shared_unreduced: int  # above the bound, types share an unreduced axis (bound not tight)
    refused: int           # above the bound, the direct exchange refused by its size limits
    other: int             # above the bound otherwise (a time objective's choice; a miss under bytes)


def ladder_pair(rng: random.Random, mesh: Mesh, unreduced: bool) -> tuple[ShardingType, ShardingType]:
    """A random pair of rank 2-6 whose dimensions are the least multiple of the axes that shard
    them on either side (times 8-512 elements), so local blocks stay realistic on any mesh."""
    rank = rng.randint(2, 6)
    placed = []
    for _ in range(2):
        dims: list[list[str]] = [[] for _ in range(rank)]
        unred: list[str] = []
        for ax in mesh.names:
            r = rng.randrange(rank + (2 if unreduced else 1))
            (dims[r] if r < rank else unred if r == rank + 1 else []).append(ax)
        for d in dims:
            rng.shuffle(d)
        placed.append((dims, unred))
    shape = tuple(math.lcm(math.prod(mesh.axis_size(a) for a in placed[0][0][d]),
                           math.prod(mesh.axis_size(a) for a in placed[1][0][d])) * rng.choice([8, 64, 512])
                  for d in range(rank))
    return tuple(ShardingType(shape, "f32", [tuple(d) for d in dims], mesh, unred)  # type: ignore[return-value]
                 for dims, unred in placed)


def ladder(pairs: int, seed: int, objective: str = "bytes") -> list[LadderRow]:
    """Time ``pairs`` random pairs per rung of ``LADDER`` (plan caches cold, mesh tables warm)."""
    rows = []
    for shape in LADDER:
        mesh = Mesh(shape)
        cm = ladder_cost_model(objective, mesh)
        rng = random.Random(seed)
        ps = [ladder_pair(rng, mesh, i % 3 == 0) for i in range(pairs)]
        synthesize(*ps[0], cm)  # per-mesh tables (coordinates, groups) are built once per mesh
        times, above = [], []
        for s, d in ps:
            clear_caches("plans")
            t0 = time.perf_counter()
            plan = synthesize(s, d, cm)
            times.append(((time.perf_counter() - t0) * 1e3, f"{s} -> {d}"))
            if above_bound(plan):
                above.append(_above_cause(s, d))
        worst = max(times)
        rows.append(LadderRow(mesh, len(times), statistics.fmean(t for t, _ in times), worst[0], worst[1],
                              len(ps) - len(above), above.count("shared"), above.count("refused"),
                              above.count("other")))
    return rows


def above_bound(plan: Plan) -> bool:
    """``plan`` receives more than its move's transfer bound (beyond float rounding)."""
    return plan.recv_bytes > plan.lower_bound_bytes * (1 + 1e-9)


def _above_cause(s: ShardingType, d: ShardingType) -> str:
    """Why a plan is above the transfer bound: ``shared`` (an unreduced axis in both types, where
    the bound is not tight), ``refused`` (the direct exchange is over its size limits) or ``other``."""
    if unreduced_atoms(s) & unreduced_atoms(d):
        return "shared"
    try:
        check_schedule(s, d)
    except StepError:
        return "refused"
    return "other"


def ladder_table(pairs: int, seed: int, objective: str = "bytes") -> list[str]:
    head = ("mesh", "devices", "axes", "pairs", "mean ms", "max ms", "bound met", "above: shared U (not tight)",
            "above: exchange refused", "above: other", "slowest pair")
    rows = ladder(pairs, seed, objective)
    return md_table(head, ((r.mesh, f"{r.mesh.size:,}", len(r.mesh.axes), r.n, f"{r.mean_ms:.2f}", f"{r.max_ms:.2f}",
                            f"{r.bound_met}/{r.n}", r.shared_unreduced, r.refused, r.other, f"`{r.slowest}`")
                           for r in rows))


def main(pairs: int = 500, seed: int = 0, gap_pairs: int = 150, ladder_pairs: int = 0,
         objective: str = "bytes") -> str:
    if ladder_pairs:
        flags = "--objective measured --profile cpu-gloo" if objective == "gloo" else f"--objective {objective}"
        return "\n".join([f"Command: redist bench-plan --ladder {ladder_pairs} --seed {seed} {flags}",
                          "", *ladder_table(ladder_pairs, seed, objective)])
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
