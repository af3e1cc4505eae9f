"""Plans across real processes: ``jax.distributed`` on localhost, CPU collectives over Gloo.

Every byte a collective moves between processes crosses a TCP socket, unlike the in-process
simulated devices of the other benchmarks. Cases with unreduced sources, and meshes that leave a
process without a device (6-device meshes over 4 processes), are skipped. ``python -m benchmarks.multiprocess --processes 2
[--cases NAME...] [--reps N]`` starts the processes (each with ``8 / processes`` CPU devices),
plans every case in each of them (plans are deterministic, so all processes build the same
program), checks every addressable block against the NumPy reference, and, with ``--reps``,
times ours against XLA's (Shardy), both as compiled executables, paired per repetition with an
A/A control (XLA's program compiled a second time: the spread of identical work), the processes
lined up before each call and each call's span taken across all of them (``Timer``); ratios are
medians of per-repetition ratios with a 95% interval (``benchmarks.paired``). ``--seconds`` adds
repetitions, in chunks process 0 decides on, until that many seconds pass per case (every process
must issue the same collectives). ``plan(x)``'s extra time over our executable, the per-call
Python, is timed apart and printed as ``call``; process 0 prints one line per case and a summary.
``--profile`` plans with a profile from ``redist calibrate`` (default: the shipped one for the
runtime, ``redist.profile.runtime_profile``); ``--steps`` also times each step of a multi-step plan
alone; ``--hlo`` says whether XLA's program is structurally ours (``hlo_verdict``) and prints the
ceiling that such ties put on the geometric mean; ``--floor`` also times each program's
collectives alone across the same processes (``benchmarks.floor``, interleaved with the
programs) and prints each case's collective floor and the ceiling it puts on the speedup;
``--autotune`` runs ``redist.autotune``'s plan (timed across the same processes, one choice for
all) instead of the model's, and marks the cases where they differ ``(autotuned)``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from benchmarks.harness import geomean, round_robin, suite_parser, thunk
from benchmarks.paired import balanced_order, paired_ratio
from redist import coordination
from redist.launch import EIGEN_SINGLE, init_distributed, spawn_local, without_gloo_logs
from redist.plan import Plan

DEVICES = 8
CASE_LINE = re.compile(r"\b[a-z0-9_]+ +(?:OK|WRONG) \d+ steps[^\n\[]*")
FLOOR = re.compile(r"floor ours +[\d.]+ / xla +[\d.]+ ms \(ceiling ([\d.]+)x\)")
STEP_LINE = re.compile(r" +[a-z0-9_]+#\d+ +[a-z_]+ +ours +[\d.]+ ms +predicted +[\d.]+ ms")
"""With ``--steps``: one step of a case's plan timed alone (a single-step plan on its input type)."""
SPEED = re.compile(r"xla +([\d.]+) ms +ours +([\d.]+) ms +([\d.]+)x .*predicted +([\d.]+) ms +A/A +([\d.]+)x")
"""A case's line in process 0's output (Gloo logs there too, sometimes in the middle of a line)."""


def launch(processes: int, args: Sequence[str], timeout_s: float,
           xla_flags: str = "") -> list[subprocess.CompletedProcess[str]]:
    """Run ``processes`` benchmark workers on 127.0.0.1; their results, in process order."""
    return spawn_local(processes, DEVICES // processes,
                       lambda i, port: ["-m", "benchmarks.multiprocess", "--worker", str(i), "--processes",
                                        str(processes), "--port", str(port), *args], timeout_s, xla_flags)


class TimerArgs(NamedTuple):
    """How ``Timer`` measures (the command line's ``--no-align``, ``--clock``, ``--warmup``, ``--seconds``,
    ``--floor``)."""

    align: bool = True
    clock: str = "span"
    warmup: int = 5
    seconds: float = 0.0
    floor: bool = False


def worker(index: int, processes: int, port: int, cases: Sequence[str], reps: int, profile: str = "",
           steps: bool = False, hlo: bool = False, timer_args: TimerArgs | None = None, tune: bool = False) -> int:
    init_distributed(index, processes, f"127.0.0.1:{port}")
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from benchmarks.cases import NAMED_CASES, select_cases
    from redist import autotune, redistribute
    from redist.arrays import make_input
    from redist.profile import load_profile, process_crossing_axes

    timer_args = timer_args or TimerArgs()
    timer = Timer(index, processes, timer_args.align, timer_args.clock)
    for case in select_cases(NAMED_CASES, list(cases)):
        src, dst = case.src_type, case.dst_type
        jm = case.mesh.to_jax()
        if len({d.process_index for d in jm.devices.flat}) < processes:
            continue  # a process without a device in the mesh runs ahead and desynchronises the rest
        x, total = make_input(src, jm)  # pending sums: each process places its devices' partials
        # default: the shipped profile for this runtime (cpu-gloo across processes), cross costs on
        # the axes that span processes; --profile: a profile from `redist calibrate` instead
        cm = load_profile(profile).cost_model("measured", process_crossing_axes(case.mesh)) if profile else None
        plan = redistribute(src, dst, case.mesh, cost_model=cm)
        tuned = autotune(src, dst, case.mesh, cost_model=cm).plan if tune else plan  # every process: process 0's pick
        changed = tuned.steps != plan.steps
        plan = tuned
        y = plan(x)
        ok = all(np.array_equal(np.asarray(s.data), total[s.index]) for s in y.addressable_shards)
        line = f"{case.name:28s} {'OK' if ok else 'WRONG'} {len(plan.steps)} steps{' (autotuned)' if changed else ''}"
        if reps > 0 or hlo:
            xla, ours = compiled(plan, jm, x)
        if reps > 0:
            again = xla_program(jm, x, plan)  # XLA's program compiled a second time: the A/A control
            line += "  " + time_case(timer, case.name, plan, x, reps, xla, ours, again, timer_args.warmup,
                                     timer_args.seconds, timer_args.floor)
        if hlo:
            line += "  " + compare_hlo(xla, ours, max(src.local_bytes, dst.local_bytes))
        if index == 0:
            print(line, flush=True)
        if steps and reps > 0 and len(plan.steps) > 1:
            for i, text in enumerate(time_steps(plan, jm, reps)):
                if index == 0:
                    print(f"  {case.name}#{i} {text}", flush=True)
        if not ok:
            return 1
        multihost_utils.sync_global_devices(case.name)
    jax.distributed.shutdown()
    return 0


def xla_program(jm: Any, x: Any, plan: Plan) -> Any:
    """XLA's (Shardy) program for ``plan``'s move of ``x``, compiled (``benchmarks.speed.xla_move``)."""
    from benchmarks.speed import xla_move

    return xla_move(plan.src, plan.dst, jm).lower(x).compile()


def compiled(plan: Plan, jm: Any, x: Any) -> tuple[Any, Any]:
    """XLA's program and ours, compiled once for both the timing and the HLO comparison."""
    from redist.executor import compile_plan

    return xla_program(jm, x, plan), compile_plan(plan, jm).lower(x).compile()


def compare_hlo(xla: Any, ours: Any, block_bytes: int) -> str:
    """How our compiled program compares with XLA's (Shardy) across the processes (``hlo_verdict``),
    then both collective summaries."""
    from redist.hlo import parse_collectives

    texts = [p.as_text() or "" for p in (xla, ours)]
    theirs, mine = (parse_collectives(t) for t in texts)
    return f"hlo {hlo_verdict(texts[0], texts[1], block_bytes)}: ours {mine.summary()}; xla {theirs.summary()}"


def hlo_verdict(xla_text: str, ours_text: str, block_bytes: int) -> str:
    """``tie``: a structural tie as ``benchmarks.speed`` defines it (``Row.structural_tie``): the
    same collectives (kind, groups, elements) in the same order and as many local passes (bytes
    written besides the collectives, in blocks of ``block_bytes``, to 3 decimals), so 1.0x is the
    best either side can reach; ``same``: the same collectives in another order or with other local
    passes; ``differs``: other collectives."""
    from redist.hlo import collective_sequence, collective_signature, local_writes, parse_collectives

    theirs, mine = parse_collectives(xla_text), parse_collectives(ours_text)
    if collective_signature(mine) != collective_signature(theirs):
        return "differs"
    passes = [round(local_writes(t).passes(block_bytes), 3) for t in (xla_text, ours_text)]
    in_order = collective_sequence(mine) == collective_sequence(theirs)
    return "tie" if in_order and passes[0] == passes[1] else "same"


TIMED_SIDES = ("xla", "ours", "xla_again", "call")
"""The programs timed in every repetition: XLA's (Shardy), ours, XLA's compiled a second time (the
A/A control: the spread of identical work) and ``plan(x)`` (our executable plus the per-call Python)."""


CHUNK = 16
"""Repetitions per chunk once the minimum count has run: a multiple of ``period(len(sides))`` for
2 and 4 sides (``TIMED_SIDES``), so ``balanced_order`` stays balanced chunk by chunk."""
MAX_REPS = 2000
CALL_REPS = 32
"""Repetitions of ``plan(x)`` against our executable: only its extra Python is read off them."""


class Timer:
    """Times compiled programs across the processes of one host, paired and aligned.

    Every repetition runs every side once, in ``balanced_order``; before each call all processes
    meet at a barrier of the coordination service (``align``; not a Gloo collective, so it adds no
    traffic to the sockets measured); each process records its start and end on CLOCK_MONOTONIC,
    which all processes of one host share. Process 0 gathers them through the coordinator's
    key-value store and takes each call's ``spans`` (``clock="span"``: last start to last end) or its
    own (``clock="own"``: what the harness measured before, including the wait for a late peer)."""

    def __init__(self, index: int, processes: int, align: bool = True, clock: str = "span") -> None:
        self.index, self.processes, self.align, self.clock = index, processes, align, clock
        client = coordination.client()
        if client is None:
            raise RuntimeError("Timer needs jax.distributed to be initialized (init_distributed)")
        self.client: Any = client
        self.barriers = 0

    def barrier(self) -> None:
        if self.align:
            self.barriers += 1
            coordination.barrier(f"mp-timer-{self.barriers}")

    def run(self, tag: str, sides: dict[str, Callable[[], Any]], reps: int, warmup: int,
            seconds: float = 0.0) -> dict[str, list[float]]:
        """Seconds per call of each side (process 0; ``{}`` elsewhere): at least ``reps`` repetitions,
        then more, a chunk at a time, until ``seconds`` have passed (at most ``MAX_REPS``). Every
        process must issue the same calls, so process 0 decides whether another chunk runs and
        tells the others through the key-value store: cheap cases get many more samples."""
        names = list(sides)
        for _ in range(warmup):
            for n in names:
                self.barrier()
                sides[n]().block_until_ready()
        t: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
        start, r = time.monotonic(), 0
        while r < reps or self.another_chunk(f"{tag}/{r}", seconds > time.monotonic() - start and r < MAX_REPS):
            for _ in range(CHUNK if r >= reps else reps):
                for n in balanced_order(names, r):
                    self.barrier()
                    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
                    sides[n]().block_until_ready()
                    t[n][0].append(t0)
                    t[n][1].append(time.clock_gettime(time.CLOCK_MONOTONIC))
                r += 1
        return self.gather(tag, t)

    def another_chunk(self, key: str, go: bool) -> bool:
        """Process 0's ``go``, the same on every process."""
        if self.index == 0:
            self.client.key_value_set(f"mp-go/{key}", "1" if go else "0")
            return go
        return self.client.blocking_key_value_get(f"mp-go/{key}", coordination.TIMEOUT_MS) == "1"

    def gather(self, tag: str, t: dict[str, tuple[list[float], list[float]]]) -> dict[str, list[float]]:
        rows = [json.loads(r) for r in coordination.gather(f"mp-times/{tag}", json.dumps(t))]
        if self.index != 0:
            return {}
        if self.clock == "own":
            return {n: [e - s for s, e in zip(*t[n])] for n in t}
        return {n: coordination.spans([r[n][0] for r in rows], [r[n][1] for r in rows]) for n in t}


def time_case(timer: Timer, tag: str, plan: Plan, x: Any, reps: int, xla: Any, ours: Any, again: Any,
              warmup: int = 5, seconds: float = 0.0, floor: bool = False) -> str:
    """Ours against XLA's (Shardy) program, both called as compiled executables (as in
    ``benchmarks.speed``), paired per repetition with the A/A control and ``plan(x)`` (``Timer``).
    Ratios are medians of per-repetition ratios with their ~95% interval (``paired_ratio``); the
    times printed are medians. Timing ``plan(x)`` as "ours" charged its Python, about 0.1 ms a call
    on a loaded 2-core machine, to the plan; it is shown apart (``call``)."""
    sides = {"xla": thunk(xla, x), "ours": thunk(ours, x), "xla_again": thunk(again, x)}
    bare, uses = floor_sides(xla, ours, x) if floor else ({}, {})
    t = timer.run(tag, {**sides, **bare}, reps, warmup, seconds)
    # plan(x) apart: in the rotation it would stand between the sides compared
    c = timer.run(f"{tag}/call", {"ours": thunk(ours, x), "call": thunk(plan, x)}, CALL_REPS, 1)
    if not t:
        return ""
    if os.environ.get("REDIST_MP_DUMP"):  # the raw per-call seconds, for a closer look at the noise
        with open(os.path.join(os.environ["REDIST_MP_DUMP"], f"{tag}.json"), "w") as f:
            json.dump(t, f)
    med = {n: statistics.median(v) for n, v in t.items()}
    speed, aa = paired_ratio(t["xla"], t["ours"]), paired_ratio(t["xla"], t["xla_again"])
    return (f"xla {med['xla'] * 1e3:8.3f} ms  ours {med['ours'] * 1e3:8.3f} ms  {speed.median:.2f}x"
            f" ({speed.lo:.2f}-{speed.hi:.2f})  predicted {plan.time_s * 1e3:8.3f} ms"
            f"  A/A {aa.median:.2f}x ({aa.lo:.2f}-{aa.hi:.2f})"
            f"  call {(statistics.median(c['call']) - statistics.median(c['ours'])) * 1e3:+.3f} ms  reps {len(t['xla'])}"
            + floor_text(med, uses, speed.median))


def floor_sides(xla: Any, ours: Any, x: Any) -> tuple[dict[str, Callable[[], Any]], dict[str, list[str]]]:
    """``benchmarks.floor``'s bare collectives of both programs (each alone, on its leading
    dimension, across the same processes) and a dispatch program, to time beside them."""
    from benchmarks.floor import bare_thunks
    from redist.hlo import parse_collectives

    texts = {"xla": xla.as_text() or "", "ours": ours.as_text() or ""}
    devices = x.sharding.mesh.devices.flatten()
    return bare_thunks({k: parse_collectives(t) for k, t in texts.items()}, devices)


def floor_text(med: dict[str, float], uses: dict[str, list[str]], speedup: float) -> str:
    """The collective floor of each side and the ceiling it puts on this case's speedup: XLA's time
    over the lesser floor, at least the measured speedup (``benchmarks.speed``'s collective floor)."""
    from benchmarks.floor import ceiling_over, floor_s

    floors = {k: floor_s([med[n] for n in names], med["dispatch"]) for k, names in uses.items()}
    if set(floors) != {"xla", "ours"}:
        return ""
    c = ceiling_over(med["xla"], list(floors.values()), speedup)
    return f"  floor ours {floors['ours'] * 1e3:.3f} / xla {floors['xla'] * 1e3:.3f} ms (ceiling {c:.2f}x)"


def time_steps(plan: Plan, jm: Any, reps: int) -> list[str]:
    """Each step of ``plan`` timed alone (a single-step plan on an input of its source type), with its
    predicted time: where a multi-step plan's time goes."""
    from redist.arrays import make_input
    from redist.errors import ExecutionError
    from redist.executor import compile_plan
    from spmd_types.errors import ShardingTypeError

    out = []
    for step, before, m in zip(plan.steps, plan.all_types, plan.measures):
        one = Plan.build(before, (step,), plan.cost_model)
        try:
            compile_plan(one, jm)
        except (ExecutionError, ShardingTypeError):
            continue  # an end type a PartitionSpec cannot express (a sub-axis): only inside a plan
        x, _ = make_input(before, jm)
        med = round_robin({"one": thunk(one, x)}, 0.0, min_reps=reps)
        out.append(f"{step.kind:16s} ours {med['one'] * 1e3:8.3f} ms  predicted {m.time_s * 1e3:8.3f} ms")
    return out


def summary(lines: Sequence[str]) -> str:
    """Geometric-mean speedup, worst case, the A/A control's spread, predicted-vs-measured rank
    correlation, and (with ``--hlo``) the ceiling that structural ties put on the geometric mean."""
    from benchmarks.speed import ceiling_of
    from redist.profile import spearman

    hits = [(ln.split()[0], m, ln) for ln in lines if (m := SPEED.search(ln))]
    if not hits:
        return ""
    names = [h[0] for h in hits]
    rows = [[float(g) for g in m.groups()] for _, m, _ in hits]
    speed = [r[2] for r in rows]
    aa = [r[4] for r in rows]
    worst = min(range(len(rows)), key=speed.__getitem__)
    rho = spearman([r[3] for r in rows], [r[1] for r in rows])
    out = (f"{len(rows)} cases: geomean {geomean(speed):.2f}x, worst {speed[worst]:.2f}x ({names[worst]}), "
           f"{sum(v < 0.95 for v in speed)} below 0.95x; A/A control (XLA vs XLA) geomean {geomean(aa):.2f}x, "
           f"range {min(aa):.2f}-{max(aa):.2f}x; predicted vs measured (ours) Spearman {rho:.2f}")
    ties = [" hlo tie:" in ln for _, _, ln in hits]
    if all(" hlo " in ln for _, _, ln in hits):
        out += "\n" + ceiling_sentence(ceiling_of(speed, ties), len(rows))
    ceil = [(float(m.group(1)), tie) for (_, _, ln), tie in zip(hits, ties) if (m := FLOOR.search(ln))]
    if len(ceil) == len(rows):
        part = [geomean([v for v, t in ceil if t == want] or [1.0]) for want in (True, False)]
        out += (f"\ncollective floor: geomean ceiling (XLA over the lesser floor of its and our collectives, at least "
                f"the measured speedup) {geomean([v for v, _ in ceil]):.2f}x over all {len(ceil)}; "
                f"{part[0]:.2f}x on the {sum(ties)} structural ties, {part[1]:.2f}x on the other {len(ceil) - sum(ties)}")
    return out


def ceiling_sentence(c: Any, n: int) -> str:
    """``benchmarks.speed``'s ceiling (a ``Ceiling``) in one sentence for this harness's summary."""
    if not c.rest:
        return f"ceiling: all {n} cases are structural ties with XLA (1.0x is the best possible on each)"
    if not c.ties:
        return f"ceiling: no case is a structural tie with XLA; the {n} measured {c.rest_geomean:.2f}x"
    return (f"ceiling: {c.ties} of {n} cases are structural ties with XLA (same collectives in the same order, "
            f"same local passes: 1.0x is the best possible there; measured geomean {c.ties_geomean:.2f}x); "
            f"with those at 1.0x, {c.target}x overall needs the other {c.rest} at {c.target}^({n}/{c.rest}) = "
            f"{c.rest_needed:.2f}x; they measured {c.rest_geomean:.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("multiprocess", __doc__)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=[])
    ap.add_argument("--reps", type=int, default=0, help="timed runs per side (0: check only)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--steps", action="store_true", help="also time each step of multi-step plans alone")
    ap.add_argument("--hlo", action="store_true", help="also say whether ours runs the same collectives as XLA's")
    ap.add_argument("--profile", default="", help="plan with this cost profile (default: the shipped one for "
                                                   "the runtime, redist/profiles/cpu-gloo.json across processes)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed repetitions before the timed ones")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="after --reps, more repetitions per case until this many seconds pass")
    ap.add_argument("--floor", action="store_true",
                    help="also time each program's collectives alone (benchmarks.floor) and print the ceiling")
    ap.add_argument("--no-align", action="store_true",
                    help="no barrier before each timed call (the processes drift against each other)")
    ap.add_argument("--clock", choices=coordination.CLOCKS, default="span",
                    help="span: a call lasts from the last process's start to the last one's end; "
                         "own: process 0's own time (includes waiting for a late peer)")
    ap.add_argument("--xla-flags", default=EIGEN_SINGLE,
                    help=f"XLA flags for every process (default {EIGEN_SINGLE!r}; '' for XLA's defaults)")
    ap.add_argument("--autotune", action="store_true",
                    help="run redist.autotune's plan (timed across the processes, process 0's pick) instead of the model's")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        return worker(a.worker, a.processes, a.port, a.cases, a.reps, a.profile, a.steps, a.hlo,
                      TimerArgs(not a.no_align, a.clock, a.warmup, a.seconds, a.floor), a.autotune)
    rest = ["--reps", str(a.reps), "--profile", a.profile, "--warmup", str(a.warmup), "--clock", a.clock,
            "--seconds", str(a.seconds),
            *(["--no-align"] if a.no_align else []), *(["--steps"] if a.steps else []),
            *(["--hlo"] if a.hlo else []), *(["--floor"] if a.floor else []), *(["--autotune"] if a.autotune else []),
            "--cases", *a.cases]
    results = launch(a.processes, rest, a.timeout, a.xla_flags)
    out = without_gloo_logs(results[0].stdout)
    lines = [m.group(0) for m in CASE_LINE.finditer(out)]
    either = re.compile(f"{CASE_LINE.pattern}|{STEP_LINE.pattern}")
    print("\n".join(m.group(0).rstrip() for m in either.finditer(out)))
    print(summary(lines))
    for i, r in enumerate(results):
        if r.returncode:
            print(f"process {i} failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
    return max(r.returncode for r in results)


if __name__ == "__main__":
    raise SystemExit(main())
