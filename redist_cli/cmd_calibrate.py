"""``redist calibrate``: time each collective kind on this backend and write a cost profile.

Across processes (``jax.distributed``): run it in every process with ``--coordinator HOST:PORT
--num-processes N --process-id I`` (CPU collectives over Gloo), or let ``--local-processes N``
start N such processes on 127.0.0.1. Every process times the same samples; process 0 writes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("calibrate", help="time every collective kind here; write a profile the planner loads")
    p.add_argument("--out", default="redist-profile.json", help="profile path (JSON)")
    p.add_argument("--reps", type=int, default=30, help="interleaved repetitions per sample")
    p.add_argument("--devices", type=int, default=8,
                   help="simulated CPU devices when on CPU (in all, split over --local-processes)")
    p.add_argument("--kinds", default="", help="only these profile keys, comma-separated (all_to_all,exchange:2)")
    p.add_argument("--sizes-kib", default="", help="local block sizes to time, comma-separated (default 4,64,512,2048)")
    p.add_argument("--local-processes", type=int, default=0,
                   help="start this many processes on 127.0.0.1 (jax.distributed, Gloo) and calibrate across them")
    p.add_argument("--coordinator", default="", help="HOST:PORT of jax.distributed's coordinator (every process)")
    p.add_argument("--num-processes", type=int, default=1, help="processes in all (with --coordinator)")
    p.add_argument("--process-id", type=int, default=0, help="this process's index (with --coordinator)")
    p.add_argument("--refit", nargs="+", default=[], metavar="PROFILE",
                   help="time nothing: fit one profile from the samples of these (runs on one backend)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for --local-processes to finish")
    # redist.coordination.CLOCKS, spelled out: importing redist here would load jax for every command
    p.add_argument("--clock", choices=("span", "own"), default="span",
                   help="across processes, a call's time: span (last start to last end, as the multiprocess "
                        "benchmark times plans) or own (process 0's)")
    p.add_argument("--xla-flags", default=None,
                   help="more XLA flags for every --local-processes process (default: the multiprocess "
                        "benchmark's, single-threaded CPU kernels; '' for XLA's defaults)")
    handlers["calibrate"] = _run


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _spawn(args: argparse.Namespace) -> int:
    """``--local-processes N``: this command N times, joined by a coordinator on 127.0.0.1."""
    from redist.launch import EIGEN_SINGLE, spawn_local

    n = args.local_processes
    if n < 2 or args.devices % n:
        print(f"error: --local-processes {n}: give at least 2 processes that divide --devices {args.devices}",
              file=sys.stderr)
        return 2
    passed = ["--out", args.out, "--reps", str(args.reps), "--kinds", args.kinds, "--sizes-kib", args.sizes_kib,
              "--clock", args.clock]
    results = spawn_local(n, args.devices // n, lambda i, port: [
        "-m", "redist_cli", "calibrate", *passed, "--coordinator", f"127.0.0.1:{port}",
        "--num-processes", str(n), "--process-id", str(i)], args.timeout,
        EIGEN_SINGLE if args.xla_flags is None else args.xla_flags)
    print("\n".join(ln for ln in results[0].stdout.splitlines() if not ln.startswith("[Gloo]")))
    for i, r in enumerate(results):
        if r.returncode:
            print(f"process {i} failed ({r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
    return max(r.returncode for r in results)


def _problem(args: argparse.Namespace) -> str | None:
    """A one-line message for an option no calibration can honour (checked before JAX starts)."""
    sizes = _csv(args.sizes_kib)
    if not all(k.isdigit() and int(k) > 0 for k in sizes):
        return f"--sizes-kib {args.sizes_kib}: give block sizes in KiB as whole numbers >= 1, e.g. 4,64,512"
    if args.reps < 1:
        return f"--reps {args.reps}: give at least 1 timed run per sample"
    if args.devices < 2:
        return f"--devices {args.devices}: calibration times collectives, so it needs at least 2 devices"
    if args.timeout <= 0:
        return f"--timeout {args.timeout:g}: give a positive number of seconds"
    if args.num_processes < 1 or not 0 <= args.process_id < args.num_processes:
        return (f"--process-id {args.process_id} --num-processes {args.num_processes}: give N >= 1 processes "
                f"and an index 0..N-1")
    if args.num_processes > 1 and not args.coordinator:
        return f"--num-processes {args.num_processes} needs --coordinator HOST:PORT (or use --local-processes)"
    return None


def _run(args: argparse.Namespace) -> int:
    import os

    problem = _problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.local_processes:
        return _spawn(args)
    if args.refit:
        from redist.calibrate import refit
        from redist.profile import load_profile

        return _write(refit([load_profile(p) for p in args.refit]), args.out)
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
    if args.coordinator:
        from redist.launch import init_distributed

        init_distributed(args.process_id, args.num_processes, args.coordinator)
    from redist.calibrate import SIZES_KIB, calibrate

    first = args.process_id == 0
    sizes = [int(k) for k in _csv(args.sizes_kib)] or list(SIZES_KIB)
    prof = calibrate(args.reps, _csv(args.kinds) or None, progress=print if first else None, sizes_kib=sizes,
                     clock=args.clock)
    if args.coordinator:
        import jax

        jax.distributed.shutdown()
    return _write(prof, args.out) if first else 0


def _write(prof: Any, out: str) -> int:
    """Write the profile and print its fits."""
    with open(out, "w") as f:
        f.write(prof.to_json())
    print(f"\nbackend {prof.backend} ({prof.device_kind}); local copy {prof.copy_Bps / 1e9:.2f} GB/s")
    for title, table in (("in-process", prof.kinds), ("across processes", prof.cross_kinds)):
        if table and prof.cross_kinds:
            print(title)
        for kind, kc in table:
            print(f"  {kind:18s} overhead {kc.overhead_s * 1e6:8.1f} us  latency {kc.latency_s * 1e6:8.1f} us"
                  f"  bandwidth {kc.bandwidth_Bps / 1e9:7.2f} GB/s")
    print(f"wrote {out}; use it with load_cost_model({out!r})")
    return 0
