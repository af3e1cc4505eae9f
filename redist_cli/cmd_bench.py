"""``redist bench``: our redistributions against the XLA SPMD partitioner (tracker issue 5).

Writes ``<date>.md`` and ``<date>.json`` (``<date>-quick.*`` with ``--quick``) and the PNG plots
into ``./redist-bench-results/<date>/`` (``--out`` to choose), never into the installed package.
Optional dependencies (matplotlib for the plots) are checked before anything runs.
``--plots-from REPORT.json`` redraws a report's plots without running the benchmark. The benchmark
layer is imported only when the command runs, after ``XLA_FLAGS`` asks for 8 simulated CPU devices
(it must be set before JAX is imported).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from redist_cli.ui import console, error

DEFAULT_OUT = Path("redist-bench-results")
"""Relative to the working directory; a dated folder inside it per run."""
DEVICE_FLAG = "--xla_force_host_platform_device_count=8"


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("bench", help="compare redistributions against the XLA SPMD partitioner")
    p.add_argument("--quick", action="store_true", help="a minute-long subset (8 named cases, 12 random pairs)")
    p.add_argument("--partitioner", action="store_true",
                   help="also run the partitioner benchmark (benchmarks/partitioner.py) if present")
    p.add_argument("--out", type=Path, default=None,
                   help=f"output folder (default ./{DEFAULT_OUT}/<date>/)")
    p.add_argument("--cases", nargs="*", default=None, help="named cases or families to run (default all)")
    p.add_argument("--pairs", type=int, default=None, help="number of random pairs (default 200; quick 12)")
    p.add_argument("--seed", type=int, default=0, help="random-pair seed")
    p.add_argument("--reps", type=int, default=None, help="timed runs per side, named cases (default 21; quick 9)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots (then matplotlib is not needed)")
    p.add_argument("--plots-from", type=Path, default=None, metavar="REPORT.json",
                   help="only redraw the plots of an earlier report (next to it, or into --out)")
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


def _replot(args: argparse.Namespace) -> int:
    from benchmarks.plots import matplotlib_missing, plots_from_json

    problem = matplotlib_missing()
    if problem:
        error(problem)
        return 2
    for path in plots_from_json(args.plots_from, args.out):
        print(f"wrote {path}")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    if args.plots_from is not None:
        return _replot(args)
    if not args.no_plots:
        from benchmarks.plots import matplotlib_missing

        missing = matplotlib_missing()
        if missing:
            error(missing)
            return 2
    problem = _ensure_devices()
    if problem:
        error(problem)
        return 2
    from benchmarks import our_side
    from benchmarks.cases import NAMED_CASES, QUICK_CASES, select_cases
    from benchmarks.random_pairs import PairSpec, random_pairs
    from benchmarks.report import summarize, write_report
    from benchmarks.run import run_suite

    names = args.cases if args.cases is not None else (list(QUICK_CASES) if args.quick else None)
    named = select_cases(NAMED_CASES, names)
    if args.cases and not named:
        error(f"no named case or family matches {args.cases}")
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
    out = args.out if args.out is not None else DEFAULT_OUT / suite.date
    written = write_report(suite, out, plots=not args.no_plots)
    from rich.markdown import Markdown

    from benchmarks.report import summary_table

    con = console()
    con.print(Markdown("\n".join(summary_table(summarize(suite.named), summarize(suite.random)))))
    for path in written:
        con.print(f"wrote {path}")
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
