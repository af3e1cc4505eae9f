"""``redist bench``: our redistributions against the XLA SPMD partitioner (tracker issue 5).

Writes ``benchmarks/results/<date>.md`` and ``<date>.json`` (``<date>-quick.*`` with ``--quick``)
and the PNG plots next to them. The benchmark layer is imported only when the command runs, after
``XLA_FLAGS`` asks for 8 simulated CPU devices (it must be set before JAX is imported).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
DEVICE_FLAG = "--xla_force_host_platform_device_count=8"


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("bench", help="compare redistributions against the XLA SPMD partitioner")
    p.add_argument("--quick", action="store_true", help="a minute-long subset (8 named cases, 12 random pairs)")
    p.add_argument("--partitioner", action="store_true",
                   help="also run the partitioner benchmark (benchmarks/partitioner.py) if present")
    p.add_argument("--out", type=Path, default=None, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--cases", nargs="*", default=None, help="named cases or families to run (default all)")
    p.add_argument("--pairs", type=int, default=None, help="number of random pairs (default 200; quick 12)")
    p.add_argument("--seed", type=int, default=0, help="random-pair seed")
    p.add_argument("--reps", type=int, default=None, help="timed runs per side, named cases (default 21; quick 9)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    handlers["bench"] = run_bench


def command_line(args: argparse.Namespace) -> str:
    """The canonical command that reproduces a run (printed above every table)."""
    parts = ["redist", "bench"]
    if args.quick:
        parts.append("--quick")
    if args.partitioner:
        parts.append("--partitioner")
    if args.cases:
        parts += ["--cases", *args.cases]
    if args.pairs is not None:
        parts += ["--pairs", str(args.pairs)]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.reps is not None:
        parts += ["--reps", str(args.reps)]
    return " ".join(parts)


def _ensure_devices() -> str | None:
    """Ask for 8 CPU devices before JAX starts; an error message if JAX already has fewer."""
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " " + DEVICE_FLAG).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.device_count() < 8:
        return (f"the benchmarks need 8 devices but JAX has {jax.device_count()}; "
                f"set XLA_FLAGS={DEVICE_FLAG} before JAX is imported")
    return None


def run_bench(args: argparse.Namespace) -> int:
    problem = _ensure_devices()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from benchmarks import our_side
    from benchmarks.cases import NAMED_CASES, QUICK_CASES, select_cases
    from benchmarks.random_pairs import PairSpec, random_pairs
    from benchmarks.report import summarize, write_report
    from benchmarks.run import run_suite

    names = args.cases if args.cases is not None else (list(QUICK_CASES) if args.quick else None)
    named = select_cases(NAMED_CASES, names)
    if args.cases and not named:
        print(f"error: no named case or family matches {args.cases}", file=sys.stderr)
        return 2
    count = args.pairs if args.pairs is not None else (12 if args.quick else 200)
    spec = PairSpec(seed=args.seed, count=count)
    pairs = random_pairs(spec) if count > 0 else ()
    reps = args.reps if args.reps is not None else (9 if args.quick else 21)
    if not our_side.available():
        print("note: redist.redistribute is not available yet; measuring the XLA side only", file=sys.stderr)
    elif not our_side.executor_available():
        print("note: redist.executor is not available yet; recording plans, not running them", file=sys.stderr)
    suite = run_suite(
        named, pairs, command=command_line(args), reps_named=reps, reps_random=max(5, reps // 3),
        pair_spec=spec if pairs else None,
        budget_named_s=0.5 if args.quick else 2.0, budget_random_s=0.2 if args.quick else 0.5,
    )
    if args.partitioner:
        suite.extra.update(_partitioner(args))
    out = args.out if args.out is not None else DEFAULT_OUT
    written = write_report(suite, out, plots=not args.no_plots)
    s = summarize(suite.named)
    gm = "n/a" if s.geomean_speedup is None else f"{s.geomean_speedup:.2f}x"
    print(f"named cases: geometric-mean speedup {gm}, fewer/equal/more bytes "
          f"{s.fewer_bytes}/{s.equal_bytes}/{s.more_bytes}, XLA rematerializations {s.xla_remat}")
    for path in written:
        print(f"wrote {path}")
    return 0


def _partitioner(args: argparse.Namespace) -> dict[str, Any]:
    """Call ``benchmarks.partitioner.run_partitioner_bench`` if the partitioner engineer wrote it."""
    try:
        from benchmarks import partitioner  # type: ignore[attr-defined]
    except ImportError:
        print("note: benchmarks/partitioner.py is not available; --partitioner skipped", file=sys.stderr)
        return {"Partitioner benchmark": "not available (benchmarks/partitioner.py missing)"}
    fn = getattr(partitioner, "run_partitioner_bench", None)
    if fn is None:
        return {"Partitioner benchmark": "benchmarks/partitioner.py has no run_partitioner_bench"}
    offered: dict[str, Any] = {"quick": args.quick, "out": args.out, "out_dir": args.out}
    if args.quick:
        offered["runs"] = 2
    accepted = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in offered.items() if k in accepted}
    try:
        result = fn(**kwargs)
    except Exception as e:  # the partitioner's failure must not lose the redistribution report
        return {"Partitioner benchmark": f"failed: {type(e).__name__}: {e}"}
    # the partitioner returns (rows, markdown table); keep the table, whatever else comes with it
    if isinstance(result, tuple):
        text = [part for part in result if isinstance(part, str)]
        if text:
            return {"Partitioner benchmark": "\n\n".join(text)}
    return {"Partitioner benchmark": result if isinstance(result, str) else repr(result)}
