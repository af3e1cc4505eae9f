"""Clock comparison against both XLA partitioners, with the measured cost model's predictions.

``python -m benchmarks.speed [--cases NAME...|none] [--seconds S] [--random N [--seed K]
[--random-seconds S]] [--out DIR]``. For every named case
(``benchmarks.cases``) four compiled programs run on the same input, round-robin in one process
(so a slow phase of the shared machine hits all of them): XLA's ``jit(identity,
out_shardings=dst)`` under Shardy (JAX's default) and under GSPMD
(``jax_use_shardy_partitioner=False``), our plan under the default objective (fastest under the
measured profile) and our plan under ``objective="bytes"``. Reported per case: the median times,
the speedup against the *faster* XLA partitioner, the plan's predicted time, compiled temp memory
of each side, bytes against the transfer bound; overall the geometric mean, the worst case, the
Spearman rank correlation of predicted vs measured, an A/A control (Shardy's program against
itself), the per-call Python overhead of ``plan(x)``, and the ceiling that structural ties put on
the geometric mean (``ceiling``: where XLA compiled our very program, 1.0x is the best possible),
and two floors per case (``benchmarks.floor``: each side's collectives alone; the refined floor of
``benchmarks.floor_passes``: those plus the local passes XLA:CPU forces around them).

``--random N`` adds N seeded random pairs (``benchmarks.random_pairs``: odd axis orders, several
axes moving at once, ranks 1-4, under 1 MiB a global array) run through the same per-case
machinery with their own time budget; the report gets a random-pairs section (geometric mean,
minimum, count below 0.9x, the worst 10 with plan and XLA's collectives). ``--cases none`` leaves
the named cases out.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import jax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from benchmarks.cases import NAMED_CASES, Case, select_cases  # noqa: E402
from benchmarks.floor import bare_thunks, ceiling_over, floor_s  # noqa: E402
from benchmarks.floor_passes import pass_thunks, refined_names, side_passes  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Clock,
    at_least,
    command_line,
    geomean,
    header,
    suite_parser,
    thunk,
    with_control,
    write_results,
)
from benchmarks.random_pairs import PairSpec, random_pairs  # noqa: E402
from redist import CostModel, Plan, redistribute  # noqa: E402
from redist.arrays import check_output, make_input  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.hlo import collective_sequence, collective_signature, local_writes, parse_collectives  # noqa: E402
from redist.profile import spearman  # noqa: E402
from redist.xla_side import capture_fd2  # noqa: E402
from spmd_types import ShardingType  # noqa: E402
from spmd_types.jax_interop import mesh_to_jax, to_partition_spec  # noqa: E402

SIDES = ("shardy", "gspmd", "ours", "ours_bytes")


def _temp_above_xla(r: Row) -> bool:
    """Ours needs more compiled temp than every XLA partitioner whose result was correct (GSPMD
    drops pending sums, so its 0 B there is no baseline); 64 B of slack for scalars."""
    correct = [r.temp_bytes[side] for side in ("shardy", "gspmd") if r.ok.get(side)]
    return bool(correct) and r.temp_bytes["ours"] > min(correct) + 64


@dataclass(frozen=True)
class Row:
    case: str
    median_s: dict[str, float]
    temp_bytes: dict[str, int]
    collectives: dict[str, str]
    predicted_s: float
    recv_bytes: float
    bytes_recv_bytes: float
    bound_bytes: float
    steps: str
    ok: dict[str, bool]  # the side's result equals the NumPy reference, laid out as the destination
    block_bytes: int = 0  # max(source, destination) local shard
    same_collectives: dict[str, bool] | None = None  # per XLA side: its collectives equal ours (kind, groups, size)
    local_passes: dict[str, float] | None = None  # per side: non-collective writes, in local blocks
    collective_result_bytes: dict[str, int] | None = None  # per side: the collectives' own result buffers
    itemsize: int = 4  # bytes per element of the array
    same_order: dict[str, bool] | None = None  # per XLA side: the same collectives in the same program order
    bytes_predicted_s: float = math.nan  # the bytes objective's plan: its time under the default plan's profile
    bytes_steps: str = ""  # the bytes objective's plan: its steps
    plan_collectives: dict[str, int] | None = None  # per objective ("ours", "ours_bytes"): collectives launched
    floor_s: dict[str, float] | None = None  # per side: its collectives alone, bare (``benchmarks.floor``)
    refined_floor_s: dict[str, float] | None = None  # per side: floor_s plus its unavoidable passes
    floor_passes: dict[str, str] | None = None  # per side: the rules of those passes (``benchmarks.floor_passes``)

    @property
    def floor_ceiling(self) -> float:
        """The speedup no lowering of either side's collectives could beat: the faster XLA
        side's time over the lesser floor of its and our collectives (never below the measured
        speedup: a floor measured above a whole program bounds nothing); ``nan`` without floors."""
        return self._ceiling_over(self.floor_s)

    @property
    def refined_ceiling(self) -> float:
        """``floor_ceiling`` over the refined floors: each side's collectives plus the local
        passes XLA:CPU forces around them (``benchmarks.floor_passes``)."""
        return self._ceiling_over(self.refined_floor_s)

    def _ceiling_over(self, floor: dict[str, float] | None) -> float:
        floors = [f for k, f in (floor or {}).items() if k in ("ours", self.xla_best)]
        return ceiling_over(self.xla_best_s, floors, self.speedup)

    @property
    def xla_best_s(self) -> float:
        """The faster of the XLA partitioners whose result is correct."""
        return min((self.median_s[k] for k in ("shardy", "gspmd") if self.ok[k]), default=math.nan)

    @property
    def speedup(self) -> float:
        return self.xla_best_s / self.median_s["ours"]

    @property
    def xla_best(self) -> str:
        """Which XLA partitioner the speedup is against (the faster correct one)."""
        ok = [k for k in ("shardy", "gspmd") if self.ok[k]]
        return min(ok, key=lambda k: self.median_s[k]) if ok else "shardy"

    @property
    def at_ceiling(self) -> bool:
        """XLA's program runs the same collectives as ours: communication is tied, and only local
        passes (copies, transposes, 16-bit widening) can make either side faster."""
        return bool(self.same_collectives and self.same_collectives.get(self.xla_best))

    @property
    def structural_tie(self) -> bool:
        """The faster correct XLA partitioner compiled the same program as ours, structurally: the
        same collectives (kind, groups, elements) in the same order and as many local passes
        (bytes written besides the collectives, in blocks, to 3 decimals). Then 1.0x is the best
        either side can reach on this backend. Rows without ``same_order`` (older JSON) count
        the collectives as a multiset."""
        x = self.xla_best
        passes = self.local_passes or {}
        in_order = self.same_order.get(x, False) if self.same_order is not None else True
        return self.at_ceiling and in_order and x in passes and passes.get(x) == passes.get("ours")


GEOMEAN_TARGET = 1.3
"""The target for the named cases' geometric-mean speedup against the faster XLA partitioner."""


class Ceiling(NamedTuple):
    """How far the geometric-mean target lies above what structural ties allow (``ceiling``)."""

    ties: int  # cases where XLA compiled structurally our program (``Row.structural_tie``)
    ties_geomean: float  # their measured geometric-mean speedup
    rest: int
    rest_geomean: float  # the other cases' measured geometric-mean speedup
    rest_needed: float  # what the other cases need for ``target`` overall with every tie at 1.0x
    target: float


def ceiling(rows: Sequence[Row], target: float = GEOMEAN_TARGET) -> Ceiling:
    """Why a tie caps the geometric mean: where both sides run one program a tie is the best
    possible, so with those at 1.0x the other ``k`` of ``n`` cases need ``target ** (n / k)`` for
    ``target`` overall (``inf`` if every case is a tie)."""
    return ceiling_of([r.speedup for r in rows], [r.structural_tie for r in rows], target)


def ceiling_of(speedups: Sequence[float], ties: Sequence[bool], target: float = GEOMEAN_TARGET) -> Ceiling:
    """``ceiling`` of bare numbers: each case's speedup and whether it is a structural tie."""
    tied = [s for s, t in zip(speedups, ties) if t]
    rest = [s for s, t in zip(speedups, ties) if not t]
    need = target ** (len(speedups) / len(rest)) if rest else math.inf
    return Ceiling(len(tied), geomean(tied), len(rest), geomean(rest), need, target)


def ceiling_lines(c: Ceiling) -> list[str]:
    """The report's two table rows on the ceiling (see ``ceiling``)."""
    return [
        f"| structural ties: same collectives (kind, groups, bytes) in the same order and as many local passes "
        f"as the faster correct XLA partitioner | {c.ties} (geomean speedup there {c.ties_geomean:.2f}x) |",
        f"| the other cases: geomean speedup / needed for {c.target}x overall with every tie at 1.0x | "
        f"{c.rest_geomean:.2f}x ({c.rest} cases) / {c.rest_needed:.2f}x |"]


def ceiling_note(c: Ceiling, n: int) -> list[str]:
    """The sentence explaining the ceiling rows (numbers from the run)."""
    return ["", f"A structural tie is a case where the faster correct XLA partitioner compiled the same program "
            f"as ours: the same collectives in the same order and the same local passes (`redist.hlo`). "
            f"There 1.0x is the best either side can reach on this backend, so with those {c.ties} cases at "
            f"1.0x a geometric mean of {c.target}x over all {n} needs the other {c.rest} at "
            f"{c.target}^({n}/{c.rest}) = {c.rest_needed:.2f}x; they measured {c.rest_geomean:.2f}x.",
            "", "The collective floor (`benchmarks.floor`) is each program's collectives run alone, each on a flat "
            "buffer split or gathered along its leading dimension, with no local work, interleaved with the "
            "programs; the floor of a program is their sum less one dispatch per extra program. It bounds every "
            "lowering of those collectives, not every program: the destination layout usually needs a local pass "
            "the bare collective skips, so it is an optimistic ceiling, and the gap between a plan and its "
            "floor is what its local work costs. The refined floor adds, per side, the local passes XLA:CPU "
            "cannot avoid around that side's collectives (`benchmarks.floor_passes`: a bf16 result of a gather or "
            "permute is bit-cast in one pass, a bf16 sum is widened before and narrowed after its reduction, a lone "
            "all-gather into a non-major dimension interleaves its result, a lone reduce-scatter from one splits "
            "its operand, a destination smaller than the last collective's result is cut out of it), each timed "
            "as a bare fused pass in the same round robin."]


def floor_lines(rows: Sequence[Row]) -> list[str]:
    """The report's rows on the collective floor (``benchmarks.floor``) and the refined floor
    (``benchmarks.floor_passes``): what no lowering of either side's collectives could beat, as
    geometric means over the cases that have one."""
    return [*_ceiling_line(rows, lambda r: r.floor_ceiling, "collective floor: geomean of (faster XLA / the lesser "
                           "floor of its and our collectives, at least the measured speedup)"),
            *_ceiling_line(rows, lambda r: r.refined_ceiling, "refined floor: the same with the local passes XLA:CPU "
                           "forces around each side's collectives (bf16 widening and bitcasts, interleaving, cutting out a part)")]


def _ceiling_line(rows: Sequence[Row], of: Callable[[Row], float], what: str) -> list[str]:
    c = [r for r in rows if not math.isnan(of(r))]
    if not c:
        return []
    ties = [of(r) for r in c if r.structural_tie]
    rest = [of(r) for r in c if not r.structural_tie]
    return [f"| {what}, all / structural ties / the others | {geomean([of(r) for r in c]):.2f}x / "
            f"{geomean(ties):.2f}x ({len(ties)}) / {geomean(rest):.2f}x ({len(rest)}) |"]


def _floor_cell(r: Row, refined: bool = False) -> str:
    f = (r.refined_floor_s if refined else r.floor_s) or {}
    if "ours" not in f:
        return "-"
    xla = f"{f[r.xla_best] * 1e3:.3f}" if r.xla_best in f else "-"
    if not refined:
        return f"{f['ours'] * 1e3:.3f} / {xla} ({r.floor_ceiling:.2f}x)"
    rules = r.floor_passes or {}
    return (f"{f['ours'] * 1e3:.3f} / {xla} ({r.refined_ceiling:.2f}x) "
            f"[{rules.get('ours') or '-'} / {rules.get(r.xla_best) or '-'}]")


def _xla(case: Case, shardy: bool, x: Any, jmesh: jax.sharding.Mesh) -> Any:
    """XLA's compiled reshard of ``x`` to the destination under one partitioner."""
    old = getattr(jax.config, "jax_use_shardy_partitioner")  # noqa: B009 (not in the type stubs)
    jax.config.update("jax_use_shardy_partitioner", shardy)
    try:
        with capture_fd2():
            return xla_move(case.src_type, case.dst_type, jmesh).lower(x).compile()
    finally:
        jax.config.update("jax_use_shardy_partitioner", old)


def xla_move(src: ShardingType, dst: ShardingType, jmesh: jax.sharding.Mesh) -> Any:
    """XLA's program for ``src -> dst`` (jitted, not lowered): the identity with the destination's
    output sharding, or, from pending sums (which an output sharding would not sum), ``reshard``."""
    sharding = NamedSharding(jmesh, to_partition_spec(dst))
    if src.unreduced:
        return jax.jit(lambda v: jax.sharding.reshard(v, sharding))
    return jax.jit(lambda v: v, out_shardings=sharding)


def run_case(case: Case, seconds: float) -> tuple[Row, float]:
    """One case's row, and the A/A control ratio (Shardy vs itself) measured alongside."""
    src, dst = case.src_type, case.dst_type
    jmesh = mesh_to_jax(case.mesh, explicit=True)
    x, expected = make_input(src, jmesh)
    plan = redistribute(src, dst, case.mesh)
    plan_b = redistribute(src, dst, case.mesh, cost_model=CostModel(objective="bytes"))
    progs = {"shardy": _xla(case, True, x, jmesh), "gspmd": _xla(case, False, x, jmesh),
             "ours": compile_plan(plan, jmesh).lower(x).compile(),
             "ours_bytes": compile_plan(plan_b, jmesh).lower(x).compile()}
    ok = {k: check_output(p(x), expected, dst) is None for k, p in progs.items()}
    thunks: dict[str, Callable[[], Any]] = {k: thunk(p, x) for k, p in progs.items()}
    texts = {k: p.as_text() for k, p in progs.items()}
    hlo = {k: parse_collectives(t) for k, t in texts.items()}
    bare, uses = bare_thunks({k: hlo[k] for k in ("shardy", "gspmd", "ours")}, jmesh.devices.flatten())
    passes = {k: side_passes(src, dst, hlo[k]) for k in uses}
    extra, extra_uses = pass_thunks(passes, jmesh.devices.flatten())
    med, control = with_control({**thunks, **bare, **extra}, "shardy", seconds)
    bare_s = {n: med.pop(n) for n in [*bare, *extra]}
    floors = {k: floor_s([bare_s[n] for n in names], bare_s["dispatch"]) for k, names in uses.items()}
    refined = {k: floor_s([bare_s[n] for n in refined_names(names, extra_uses[k])], bare_s["dispatch"])
               for k, names in uses.items()}
    sig = {k: collective_signature(h) for k, h in hlo.items()}
    seq = {k: collective_sequence(h) for k, h in hlo.items()}
    block = max(src.local_bytes, dst.local_bytes)
    return Row(
        case.name, med,
        {k: int(p.memory_analysis().temp_size_in_bytes) for k, p in progs.items()},
        {k: h.summary() for k, h in hlo.items()},
        plan.time_s, plan.recv_bytes, plan_b.recv_bytes, plan.lower_bound_bytes,
        _steps(plan), ok, block,
        {k: sig[k] == sig["ours"] for k in ("shardy", "gspmd")},
        {k: round(local_writes(t).passes(block), 3) for k, t in texts.items()},
        {k: sum(c.result_bytes for c in h.collectives) for k, h in hlo.items()}, src.itemsize,
        {k: seq[k] == seq["ours"] for k in ("shardy", "gspmd")},
        Plan.build(src, plan_b.steps, plan.cost_model).time_s, _steps(plan_b), {"ours": plan.n_collectives, "ours_bytes": plan_b.n_collectives},
        floors, refined, {k: "+".join(p.rule for p in ps) for k, ps in passes.items()},
    ), control


def _steps(plan: Plan) -> str:
    return " + ".join(str(s) for s in plan.steps) or "(none)"


def above_bound(r: Row) -> bool:
    """The default (time) objective's plan receives more than the transfer bound."""
    return r.recv_bytes > r.bound_bytes * (1 + 1e-9) + 1e-6


def above_bound_section(rows: Sequence[Row], level: str = "##") -> list[str]:
    """Where the time objective's plan moves more bytes than the bound, and why: the bytes
    objective's plan (at the bound) next to it, with both predictions and both measurements.
    The time objective trades bytes for fewer or cheaper collectives when the measured profile
    predicts that faster (section 4.4 of docs/design.md)."""
    above = [r for r in rows if above_bound(r)]
    out = ["", f"{level} Plans above the transfer bound under the time objective ({len(above)} of {len(rows)})", ""]
    if not above:
        return out + ["None: every plan of the default objective receives the bound."]
    out += ["Each receives more than the bound because the measured profile predicts it faster than the bytes "
            "objective's plan, which meets the bound; the measured columns say whether the clock agreed.", "",
            "| case | time plan: recv / bound B, collectives, predicted us, measured ms | "
            "bytes plan: recv B, collectives, predicted us, measured ms | why | bytes plan |", "|---|---|---|---|---|"]
    for r in above:
        n = r.plan_collectives or {}
        gain = (r.bytes_predicted_s - r.predicted_s) * 1e6
        agrees = "agrees" if r.median_s["ours"] <= r.median_s["ours_bytes"] else "disagrees"
        out.append(
            f"| {r.case} | {r.recv_bytes:,.0f} / {r.bound_bytes:,.0f}, {n.get('ours', '?')}, {r.predicted_s * 1e6:.0f}, "
            f"{r.median_s['ours'] * 1e3:.3f} | {r.bytes_recv_bytes:,.0f}, {n.get('ours_bytes', '?')}, "
            f"{r.bytes_predicted_s * 1e6:.0f}, {r.median_s['ours_bytes'] * 1e3:.3f} | predicted {gain:.0f} us faster "
            f"with {r.recv_bytes / max(r.bound_bytes, 1):.2f}x the bytes; the clock {agrees} | {r.bytes_steps} |")
    return out


def lookup_overhead(plan: Plan, x: Any, reps: int = 3000) -> float:
    """Median seconds of the Python ``plan(x)`` adds before dispatch: the cached checks and
    executable lookup (``redist.executor._executable``), without running anything."""
    from redist.executor import _executable

    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        _executable(plan, x.sharding, x.shape, x.dtype)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def call_overhead(plan: Plan, x: Any, reps: int = 300) -> tuple[float, float]:
    """Median seconds of ``plan(x)`` and of calling its compiled executable directly (the
    difference is the per-call Python overhead of the fast path)."""
    exe = compile_plan(plan).lower(x).compile()
    a: list[float] = []
    b: list[float] = []
    plan(x).block_until_ready()
    exe(x).block_until_ready()
    for _ in range(reps):
        t = time.perf_counter()
        y = plan(x)
        a.append(time.perf_counter() - t)
        y.block_until_ready()
        t = time.perf_counter()
        y = exe(x)
        b.append(time.perf_counter() - t)
        y.block_until_ready()
    return statistics.median(a), statistics.median(b)


def report(rows: Sequence[Row], controls: Sequence[float], overhead: tuple[float, float, float], command: str,
           load: tuple[float, float], wall_s: float) -> str:
    sp = [r.speedup for r in rows]
    rho = spearman([r.predicted_s for r in rows], [r.median_s["ours"] for r in rows])
    worst = min(rows, key=lambda r: r.speedup)
    tied = [r for r in rows if r.at_ceiling]
    open_ = [r for r in rows if not r.at_ceiling]
    ceil = ceiling(rows)
    lines = [
        *header("Clock comparison against Shardy and GSPMD", command, load, wall_s),
        "| | value |", "|---|---|",
        f"| named cases | {len(rows)} |",
        f"| geometric-mean speedup vs the faster XLA partitioner | {geomean(sp):.2f}x |",
        f"| worst case | {worst.speedup:.2f}x ({worst.case}) |",
        f"| cases below 0.95x | {sum(s < 0.95 for s in sp)} |",
        f"| geometric mean vs Shardy / vs GSPMD (cases where it is correct) | "
        f"{geomean([r.median_s['shardy'] / r.median_s['ours'] for r in rows if r.ok['shardy']]):.2f}x / "
        f"{geomean([r.median_s['gspmd'] / r.median_s['ours'] for r in rows if r.ok['gspmd']]):.2f}x |",
        f"| bytes objective: geometric-mean speedup | "
        f"{geomean([r.xla_best_s / r.median_s['ours_bytes'] for r in rows]):.2f}x |",
        f"| A/A control (Shardy vs itself): geomean, min, max | {geomean(controls):.3f}, {min(controls):.3f}, "
        f"{max(controls):.3f} |",
        f"| cases where XLA runs the same collectives as ours (kind, groups, bytes): only local passes differ | "
        f"{len(tied)} (geomean speedup there {geomean([r.speedup for r in tied]):.2f}x) |",
        f"| geometric mean on the cases whose collectives differ from XLA's | {geomean([r.speedup for r in open_]):.2f}x "
        f"({len(open_)} cases) |",
        *ceiling_lines(ceil),
        *floor_lines(rows),
        f"| Spearman rank correlation, predicted vs measured (ours) | {rho:.3f} |",
        f"| temp memory above the lesser of the correct XLA partitioners' | {sum(_temp_above_xla(r) for r in rows)} |",
        f"| plans moving more bytes than the bound (time objective; why: below) | {sum(map(above_bound, rows))} |",
        f"| `plan(x)` per call / compiled executable per call / Python lookup before dispatch (us) | "
        f"{overhead[0] * 1e6:.0f} / {overhead[1] * 1e6:.0f} / {overhead[2] * 1e6:.1f} |",
        *(f"| {k}: results equal to the reference | {sum(r.ok[k] for r in rows)} / {len(rows)} |" for k in SIDES),
        *ceiling_note(ceil, len(rows)),
        "", "| case | Shardy ms | GSPMD ms | ours ms | bytes-obj ms | speedup | collectives | predicted us | "
        "temp KiB S/G/ours | ours recv / bound B | floor ms ours / XLA (ceiling) | "
        "refined floor ms ours / XLA (ceiling) [passes ours / XLA] | plan |", "|" + "---|" * 13,
    ]
    for r in rows:
        m, t, wrong = r.median_s, r.temp_bytes, _wrong(r)
        lines.append(
            f"| {r.case} | {m['shardy'] * 1e3:.3f} | {m['gspmd'] * 1e3:.3f} | {m['ours'] * 1e3:.3f} | "
            f"{m['ours_bytes'] * 1e3:.3f} | {r.speedup:.2f}x{wrong} | "
            f"{'same as XLA' if r.at_ceiling else 'differ'} | {r.predicted_s * 1e6:.0f} | "
            f"{t['shardy'] // 1024}/{t['gspmd'] // 1024}/{t['ours'] // 1024} | "
            f"{r.recv_bytes:,.0f} / {r.bound_bytes:,.0f} | {_floor_cell(r)} | {_floor_cell(r, True)} | {r.steps} |")
    return "\n".join(lines + above_bound_section(rows) + temp_section(rows)) + "\n"


def temp_section(rows: Sequence[Row]) -> list[str]:
    """Cases whose compiled temp memory exceeds max(source, destination) shard, and why (from the
    kinds of collectives in the HLO and the comparison with XLA's own program)."""
    over = [r for r in rows if r.block_bytes and r.temp_bytes["ours"] > r.block_bytes + 64]
    out = ["", "## Compiled temp memory above max(source, destination) shard", "",
           f"{len(over)} of {len(rows)} cases. Temp is XLA's buffer assignment for intermediates (input and "
           "output excluded). Collective results: the collectives' own result buffers; local writes: bytes "
           "written by non-collective instructions (in-place updates count in full), both in shards.", "",
           "| case | shard KiB | temp KiB ours / faster XLA | collective results ours / XLA | "
           "local writes ours / XLA | why |", "|---|---|---|---|---|---|"]
    for r in over:
        x = r.xla_best
        res, passes = r.collective_result_bytes or {}, r.local_passes or {}
        out.append(
            f"| {r.case} | {r.block_bytes // 1024} | {r.temp_bytes['ours'] // 1024} / {r.temp_bytes[x] // 1024} | "
            f"{res.get('ours', 0) / r.block_bytes:.2f} / {res.get(x, 0) / r.block_bytes:.2f} | "
            f"{passes.get('ours', 0):.2f} / {passes.get(x, 0):.2f} | {temp_reason(r)} |")
    return out


TEMP_WHY = {
    "all-to-all": "an all-to-all's per-peer send slices and received pieces are separate buffers (about 2 shards)",
    "collective-permute": ("an exchange holds its new block (zero-filled, or joined from its cells) while cells are "
                           "sliced out and in flight"),
    "all-reduce": "an all-reduce writes its sum to a new full block (and an all-reduce + slice keeps only "
                  "a slice of it)",
    "reduce-scatter": "a reduce-scatter's input is laid out with the scattered chunks first",
    "all-gather": "a gather's result is a full block besides the output when the gathered dimension is not "
                  "the major one",
}
"""Why each kind of collective in XLA:CPU's lowering holds more than one shard of intermediates."""


def temp_reason(r: Row) -> str:
    kinds = dict.fromkeys(c.split("(")[0] for c in r.collectives["ours"].split(" + "))
    why = [TEMP_WHY[k] for k in kinds if k in TEMP_WHY]
    if r.itemsize < 4:
        why.insert(0, "XLA:CPU runs 16-bit collectives in f32: their operands and results are widened copies "
                      f"({4 // r.itemsize}x the bytes)")
    extra = r.temp_bytes["ours"] - r.temp_bytes[r.xla_best]
    why.append("no more than XLA's own program" if extra <= 64 else f"{extra // 1024} KiB more than XLA's program")
    return "; ".join(why)


RANDOM_BAR = 0.9
"""The target for random pairs: no pair below this speedup."""


@dataclass(frozen=True)
class RandomRun:
    """The random pairs of one run: how they were drawn, their rows and what failed."""

    spec: PairSpec
    seconds: float  # timing budget per pair
    cases: tuple[Case, ...]
    rows: tuple[Row, ...]
    controls: tuple[float, ...]
    errors: tuple[tuple[str, str], ...] = ()  # (case, error) of pairs that could not be run


def run_random(spec: PairSpec, seconds: float, progress: bool = True) -> RandomRun:
    """Every pair of ``random_pairs(spec)`` through ``run_case``; a pair that raises is recorded
    with its error (a random layout may find a bug on either side: the run goes on)."""
    cases = random_pairs(spec)
    rows: list[Row] = []
    controls: list[float] = []
    errors: list[tuple[str, str]] = []
    for case in cases:
        try:
            row, control = run_case(case, seconds)
        except Exception as e:  # noqa: BLE001 (recorded in the report, not swallowed)
            errors.append((case.name, f"{type(e).__name__}: {e}".splitlines()[0][:200]))
            continue
        rows.append(row)
        controls.append(control)
        if progress:
            print(f"{row.case:28s} {row.speedup:5.2f}x  ours {row.median_s['ours'] * 1e3:7.3f} ms  "
                  f"xla {row.xla_best_s * 1e3:7.3f} ms  {row.steps}", file=sys.stderr, flush=True)
    return RandomRun(spec, seconds, cases, tuple(rows), tuple(controls), tuple(errors))


def random_section(run: RandomRun, worst_n: int = 10) -> list[str]:
    """The random pairs' summary, their worst ``worst_n`` with plans and both sides' collectives,
    and every pair in one line."""
    rows, spec = run.rows, run.spec
    by_name = {c.name: c for c in run.cases}
    sp = [r.speedup for r in rows]
    out = ["", f"## Random pairs ({spec.count}, seed {spec.seed})", "",
           f"`benchmarks.random_pairs.random_pairs({spec})`: meshes 8, 2x4, 4x2, 2x2x2; ranks 1-4; f32, bf16, "
           f"s32; at most {spec.max_bytes:,} B a global array. Timing budget {run.seconds:g} s a pair "
           "(at least 15 rounds of the five programs).", ""]
    if not rows:
        return out + ["No pair could be run."] + _errors(run.errors)
    worst = min(rows, key=lambda r: r.speedup)
    tied = [r for r in rows if r.at_ceiling]
    out += [
        "| | value |", "|---|---|",
        f"| random pairs timed (errors) | {len(rows)} ({len(run.errors)}) |",
        f"| geometric-mean speedup vs the faster correct XLA partitioner | {geomean(sp):.2f}x |",
        f"| min / max speedup | {worst.speedup:.2f}x ({worst.case}) / {max(sp):.2f}x |",
        f"| pairs below {RANDOM_BAR}x | {sum(s < RANDOM_BAR for s in sp)} |",
        f"| geometric mean vs Shardy / vs GSPMD (pairs where it is correct) | "
        f"{geomean([r.median_s['shardy'] / r.median_s['ours'] for r in rows if r.ok['shardy']]):.2f}x / "
        f"{geomean([r.median_s['gspmd'] / r.median_s['ours'] for r in rows if r.ok['gspmd']]):.2f}x |",
        f"| bytes objective: geometric-mean speedup | "
        f"{geomean([r.xla_best_s / r.median_s['ours_bytes'] for r in rows]):.2f}x |",
        f"| A/A control (Shardy vs itself): geomean, min, max | {geomean(run.controls):.3f}, "
        f"{min(run.controls):.3f}, {max(run.controls):.3f} |",
        f"| pairs where XLA runs the same collectives as ours (only local passes differ) | {len(tied)} "
        f"(geomean speedup there {geomean([r.speedup for r in tied]):.2f}x) |",
        *floor_lines(rows),
        f"| Spearman rank correlation, predicted vs measured (ours) | "
        f"{spearman([r.predicted_s for r in rows], [r.median_s['ours'] for r in rows]):.3f} |",
        f"| plans moving more bytes than the bound (time objective; why: below) | {sum(map(above_bound, rows))} |",
        *(f"| {k}: results equal to the reference | {sum(r.ok[k] for r in rows)} / {len(rows)} |" for k in SIDES),
        "", f"### The worst {min(worst_n, len(rows))}", "",
        "Collectives as compiled (`compiled.as_text()`); local passes: non-collective writes in local "
        "blocks (ours / the faster correct XLA partitioner's).", "",
        "| case | src -> dst | Shardy ms | GSPMD ms | ours ms | speedup | predicted us | local passes | "
        "plan | our collectives | XLA's collectives |", "|" + "---|" * 11,
    ]
    for r in sorted(rows, key=lambda r: r.speedup)[:worst_n]:
        c, m, x, passes = by_name[r.case], r.median_s, r.xla_best, r.local_passes or {}
        out.append(
            f"| {r.case} | `{c.src}` -> `{c.dst}` ({c.mesh_text}) | {m['shardy'] * 1e3:.3f} | "
            f"{m['gspmd'] * 1e3:.3f} | {m['ours'] * 1e3:.3f} | {r.speedup:.2f}x{_wrong(r)} | "
            f"{r.predicted_s * 1e6:.0f} | {passes.get('ours', 0):.2f} / {passes.get(x, 0):.2f} | {r.steps} | "
            f"{r.collectives['ours']} | {x}: {r.collectives[x]} |")
    return out + above_bound_section(rows, "###") + _all_pairs(rows, by_name) + _errors(run.errors)


def _wrong(r: Row) -> str:
    return "" if all(r.ok.values()) else " (" + ",".join(k for k in SIDES if not r.ok[k]) + " wrong)"


def _all_pairs(rows: Sequence[Row], by_name: dict[str, Case]) -> list[str]:
    out = ["", "### Every pair", "", "| case | src -> dst | XLA ms (faster correct) | ours ms | speedup | plan |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        c = by_name[r.case]
        out.append(f"| {r.case} | `{c.src}` -> `{c.dst}` ({c.mesh_text}) | {r.xla_best_s * 1e3:.3f} ({r.xla_best}) | "
                   f"{r.median_s['ours'] * 1e3:.3f} | {r.speedup:.2f}x{_wrong(r)} | {r.steps} |")
    return out


def _errors(errors: Sequence[tuple[str, str]]) -> list[str]:
    if not errors:
        return []
    return ["", "### Pairs that could not be run", "", "| case | error |", "|---|---|",
            *(f"| {name} | {err.replace('|', '/')} |" for name, err in errors)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("speed", __doc__, seed="seed of the random pairs",
                      out="directory for <date>-speed.md/.json (<date>-speed-random.* without named cases)")
    ap.add_argument("--cases", nargs="*", default=None,
                    help="case names or families (default: all named; 'none': no named case)")
    ap.add_argument("--seconds", type=float, default=1.5, help="timing budget per named case")
    ap.add_argument("--random", type=at_least(0, int), default=0, metavar="N", help="also run N seeded random pairs")
    ap.add_argument("--random-seconds", type=at_least(0, float), default=0.5, help="timing budget per random pair")
    args = ap.parse_args(argv)
    command, clock = command_line("speed", argv), Clock()
    named = () if args.cases == ["none"] else select_cases(NAMED_CASES, args.cases)
    rows, controls = run_named(named, args.seconds)
    rand = run_random(PairSpec(seed=args.seed, count=args.random), args.random_seconds) if args.random else None
    overhead = measure_overhead() if rows else (math.nan, math.nan, math.nan)
    load, wall = clock.load, clock.wall_s
    if rows:
        text = report(rows, controls, overhead, command, load, wall)
    else:
        text = "\n".join(header("Clock comparison against Shardy and GSPMD: random pairs", command, load, wall))
    if rand is not None:
        text += "\n".join(random_section(rand)) + "\n"
    print(text)
    if args.out:
        write_results(args.out, "speed" if rows else "speed-random", text, {
            "command": command, "rows": [asdict(r) for r in rows], "controls": controls, "overhead_s": overhead,
            "random": None if rand is None else {
                "spec": asdict(rand.spec), "seconds": rand.seconds, "rows": [asdict(r) for r in rand.rows],
                "controls": rand.controls, "errors": rand.errors}})
    return 0


def run_named(cases: Sequence[Case], seconds: float) -> tuple[list[Row], list[float]]:
    rows, controls = [], []
    for case in cases:
        row, control = run_case(case, seconds)
        rows.append(row)
        controls.append(control)
        print(f"{row.case:28s} {row.speedup:5.2f}x  ours {row.median_s['ours'] * 1e3:7.3f} ms  "
              f"shardy {row.median_s['shardy'] * 1e3:7.3f}  gspmd {row.median_s['gspmd'] * 1e3:7.3f}  "
              f"predicted {row.predicted_s * 1e6:7.0f} us", file=sys.stderr, flush=True)
    return rows, controls


def measure_overhead() -> tuple[float, float, float]:
    """``plan(x)`` per call, the compiled executable per call, the Python lookup (seconds) on a
    small named case, where the Python overhead matters most."""
    small = select_cases(NAMED_CASES, ["rank1_gather_minor"])[0]
    x, _ = make_input(small.src_type, small.mesh.to_jax())
    small_plan = redistribute(small.src_type, small.dst_type, small.mesh)
    return (*call_overhead(small_plan, x), lookup_overhead(small_plan, x))


if __name__ == "__main__":
    raise SystemExit(main())
