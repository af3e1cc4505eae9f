"""Plans across real processes: ``jax.distributed`` on localhost, CPU collectives over Gloo.

Every byte a collective moves between processes crosses a TCP socket, unlike the in-process
simulated devices of the other benchmarks. Cases with unreduced sources, and meshes that leave a
process without a device (6-device meshes over 4 processes), are skipped. ``python -m benchmarks.multiprocess --processes 2
[--cases NAME...] [--reps N]`` starts the processes (each with ``8 / processes`` CPU devices),
plans every case in each of them (plans are deterministic, so all processes build the same
program), checks every addressable block against the NumPy reference, and, with ``--reps``,
times ours against XLA's (Shardy), both as compiled executables, interleaved with an A/A control
(XLA's program compiled a second time: the spread of identical work) and with ``plan(x)`` (its
extra time over our executable, the per-call Python, is printed as ``call``), a fixed number of
runs (every process must issue the same collectives, so no time budget); process 0 prints one
line per case and a summary. ``--profile`` plans with a profile from ``redist calibrate``
(default: the shipped one for the runtime, ``redist.profile.runtime_profile``); ``--steps`` also
times each step of a multi-step plan alone; ``--hlo`` says whether our program runs the same
collectives as XLA's.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from redist.plan import Plan

DEVICES = 8
CASE_LINE = re.compile(r"\b[a-z0-9_]+ +(?:OK|WRONG) \d+ steps[^\n\[]*")
STEP_LINE = re.compile(r" +[a-z0-9_]+#\d+ +[a-z_]+ +ours +[\d.]+ ms +predicted +[\d.]+ ms")
"""With ``--steps``: one step of a case's plan timed alone (a single-step plan on its input type)."""
SPEED = re.compile(r"xla +([\d.]+) ms +ours +([\d.]+) ms .*predicted +([\d.]+) ms +A/A +([\d.]+)x")
"""A case's line in process 0's output (Gloo logs there too, sometimes in the middle of a line)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(processes: int, args: Sequence[str], timeout_s: float) -> list[subprocess.CompletedProcess[str]]:
    """Run ``processes`` benchmark workers on 127.0.0.1; their results, in process order."""
    return spawn_local(processes, DEVICES // processes,
                       lambda i, port: ["-m", "benchmarks.multiprocess", "--worker", str(i), "--processes",
                                        str(processes), "--port", str(port), *args], timeout_s)


def spawn_local(processes: int, devices_per_process: int, argv: Callable[[int, int], Sequence[str]],
                timeout_s: float) -> list[subprocess.CompletedProcess[str]]:
    """Run ``python argv(i, port)`` for each process ``i`` (CPU only, ``devices_per_process``
    devices each; ``port`` a free coordinator port on 127.0.0.1); results in process order. On a
    timeout every process is killed and ``TimeoutExpired`` raised."""
    port = free_port()
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
               JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, *argv(i, port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(processes)]
    out = []
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def init_distributed(index: int, processes: int, coordinator: str) -> None:
    """Join ``jax.distributed`` as process ``index`` of ``processes``, CPU collectives over Gloo."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=processes,
                               process_id=index, initialization_timeout=60)


def worker(index: int, processes: int, port: int, cases: Sequence[str], reps: int, profile: str = "",
           steps: bool = False, hlo: bool = False) -> int:
    init_distributed(index, processes, f"127.0.0.1:{port}")
    import jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding

    from benchmarks.arrays import reference_values
    from benchmarks.cases import NAMED_CASES, select_cases
    from redist import redistribute
    from redist.profile import load_profile, process_crossing_axes
    from spmd_types.jax_interop import to_partition_spec

    for case in select_cases(NAMED_CASES, list(cases)):
        src, dst = case.src_type, case.dst_type
        if src.unreduced:  # a global value cannot express per-device partials across processes
            continue
        jm = case.mesh.to_jax()
        if len({d.process_index for d in jm.devices.flat}) < processes:
            continue  # a process without a device in the mesh runs ahead and desynchronises the rest
        _, total = reference_values(src)
        x = jax.make_array_from_callback(src.shape, NamedSharding(jm, to_partition_spec(src)), total.__getitem__)
        # default: the shipped profile for this runtime (cpu-gloo across processes), cross costs on
        # the axes that span processes; --profile: a profile from `redist calibrate` instead
        cm = load_profile(profile).cost_model("time", process_crossing_axes(case.mesh)) if profile else None
        plan = redistribute(src, dst, case.mesh, cost_model=cm)
        y = plan(x)
        ok = all(np.array_equal(np.asarray(s.data), total[s.index]) for s in y.addressable_shards)
        line = f"{case.name:28s} {'OK' if ok else 'WRONG'} {len(plan.steps)} steps"
        if reps > 0 or hlo:
            xla, ours = compiled(plan, jm, x, dst)
        if reps > 0:
            line += "  " + time_case(plan, jm, x, dst, reps, xla, ours)
        if hlo:
            line += "  " + compare_hlo(xla, ours)
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


def xla_program(jm: Any, x: Any, dst: Any) -> Any:
    """XLA's (Shardy) program for the move of ``x`` to ``dst``, compiled."""
    import jax
    from jax.sharding import NamedSharding

    from spmd_types.jax_interop import to_partition_spec

    return jax.jit(lambda v: v, out_shardings=NamedSharding(jm, to_partition_spec(dst))).lower(x).compile()


def compiled(plan: Plan, jm: Any, x: Any, dst: Any) -> tuple[Any, Any]:
    """XLA's program and ours, compiled once for both the timing and the HLO comparison."""
    from redist.executor import compile_plan

    return xla_program(jm, x, dst), compile_plan(plan, jm).lower(x).compile()


def compare_hlo(xla: Any, ours: Any) -> str:
    """Whether our compiled program runs the same collectives as XLA's (Shardy) across the
    processes (``benchmarks.hlo.collective_signature``): where it does, only local passes or the
    clock's noise can tell them apart. ``same`` or ``differs``, then both collective summaries."""
    from benchmarks.hlo import collective_signature, parse_collectives

    theirs, mine = (parse_collectives(p.as_text() or "") for p in (xla, ours))
    same = collective_signature(mine) == collective_signature(theirs)
    return f"hlo {'same' if same else 'differs'}: ours {mine.summary()}; xla {theirs.summary()}"


def time_case(plan: Plan, jm: Any, x: Any, dst: Any, reps: int, xla: Any, ours: Any) -> str:
    """Ours against XLA's (Shardy) program, both called as compiled executables (as in
    ``benchmarks.speed``), interleaved with the A/A control and with ``plan(x)``, whose extra time
    over our executable is the per-call Python of the fast path, shown apart (``call``). Timing
    ``plan(x)`` as "ours" charged that Python, about 0.1 ms a call on a loaded 2-core machine,
    to the plan: the same single collective-permute as XLA's measured 0.71-0.86x."""
    from benchmarks.speed import round_robin, thunk

    again = xla_program(jm, x, dst)  # XLA's program compiled a second time: the A/A control
    # a fixed count, never a time budget: every process must issue the same collectives
    med = round_robin({"xla": thunk(xla, x), "ours": thunk(ours, x), "xla_again": thunk(again, x),
                       "call": thunk(plan, x)}, 0.0, min_reps=reps)
    return (f"xla {med['xla'] * 1e3:8.3f} ms  ours {med['ours'] * 1e3:8.3f} ms  {med['xla'] / med['ours']:.2f}x"
            f"  predicted {plan.time_s * 1e3:8.3f} ms  A/A {med['xla'] / med['xla_again']:.2f}x"
            f"  call {(med['call'] - med['ours']) * 1e3:+.3f} ms")


def time_steps(plan: Plan, jm: Any, reps: int) -> list[str]:
    """Each step of ``plan`` timed alone (a single-step plan on an input of its source type), with its
    predicted time: where a multi-step plan's time goes (steps from unreduced types are skipped)."""
    import jax
    from jax.sharding import NamedSharding

    from benchmarks.arrays import reference_values
    from benchmarks.speed import round_robin, thunk
    from redist.errors import ExecutionError
    from redist.executor import compile_plan
    from spmd_types.errors import ShardingTypeError
    from spmd_types.jax_interop import to_partition_spec

    out = []
    for step, before, m in zip(plan.steps, plan.all_types, plan.measures):
        one = Plan.build(before, (step,), plan.cost_model)
        try:
            spec = to_partition_spec(before)
            compile_plan(one, jm)
        except (ExecutionError, ShardingTypeError):
            continue  # an end type a PartitionSpec cannot express (a sub-axis): only inside a plan
        if before.unreduced:
            continue
        _, total = reference_values(before)
        x = jax.make_array_from_callback(before.shape, NamedSharding(jm, spec), total.__getitem__)
        med = round_robin({"one": thunk(one, x)}, 0.0, min_reps=reps)
        out.append(f"{step.kind:16s} ours {med['one'] * 1e3:8.3f} ms  predicted {m.time_s * 1e3:8.3f} ms")
    return out


def summary(lines: Sequence[str]) -> str:
    """Geometric-mean speedup, worst case, and predicted-vs-measured rank correlation of case lines."""
    from redist.profile import spearman

    names = [ln.split()[0] for ln in lines if SPEED.search(ln)]
    rows = [[float(g) for g in m.groups()] for ln in lines if (m := SPEED.search(ln))]
    if not rows:
        return ""
    speed = [x / o for x, o, _, _ in rows]
    aa = [r[3] for r in rows]
    worst = min(range(len(rows)), key=speed.__getitem__)
    rho = spearman([r[2] for r in rows], [r[1] for r in rows])
    return (f"{len(rows)} cases: geomean {geomean(speed):.2f}x, worst {speed[worst]:.2f}x ({names[worst]}); "
            f"A/A control (XLA vs XLA) geomean {geomean(aa):.2f}x, range {min(aa):.2f}-{max(aa):.2f}x; "
            f"predicted vs measured (ours) Spearman {rho:.2f}")


def geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.multiprocess", description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=[])
    ap.add_argument("--reps", type=int, default=0, help="timed runs per side (0: check only)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--steps", action="store_true", help="also time each step of multi-step plans alone")
    ap.add_argument("--hlo", action="store_true", help="also say whether ours runs the same collectives as XLA's")
    ap.add_argument("--profile", default="", help="plan with this cost profile (default: the shipped one for "
                                                   "the runtime, redist/profiles/cpu-gloo.json across processes)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        return worker(a.worker, a.processes, a.port, a.cases, a.reps, a.profile, a.steps, a.hlo)
    rest = ["--reps", str(a.reps), "--profile", a.profile, *(["--steps"] if a.steps else []),
            *(["--hlo"] if a.hlo else []), "--cases", *a.cases]
    results = launch(a.processes, rest, a.timeout)
    # Gloo logs its connections to stdout, sometimes mid-line: keep only the case lines
    lines = [m.group(0) for m in CASE_LINE.finditer(results[0].stdout)]
    either = re.compile(f"{CASE_LINE.pattern}|{STEP_LINE.pattern}")
    print("\n".join(m.group(0).rstrip() for m in either.finditer(results[0].stdout)))
    print(summary(lines))
    for i, r in enumerate(results):
        if r.returncode:
            print(f"process {i} failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
    return max(r.returncode for r in results)


if __name__ == "__main__":
    raise SystemExit(main())
