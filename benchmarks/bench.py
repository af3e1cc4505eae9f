"""The redistribution benchmark against the XLA SPMD partitioner, as a command (``redist bench``).

``python -m benchmarks.bench [--quick] ...`` from a source checkout (``redist bench`` runs it there).
Writes ``<date>.md`` and ``<date>.json`` (``<date>-quick.*`` with ``--quick``) and the PNG plots
into ``./redist-bench-results/<date>/`` (``--out`` to choose), never into the installed package.
matplotlib (for the plots) is checked before anything runs; ``--plots-from REPORT.json`` redraws a
report's plots without running the benchmark. ``XLA_FLAGS`` asks for 8 simulated CPU devices before
JAX is imported (the benchmark modules import it).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

DEFAULT_OUT = Path("redist-bench-results")
"""Relative to the working directory; a dated folder inside it per run."""
DEVICES = 8
DEVICE_FLAG = f"--xla_force_host_platform_device_count={DEVICES}"
PLOTS_HINT = "the benchmark plots need matplotlib, which is not installed: pip install -e '.[bench]' (or pass --no-plots)"


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the help, exit status 2 (as every ``redist`` command)."""

    def error(self, message: str) -> NoReturn:
        sys.exit(error(f"{message} (see '{self.prog} --help')"))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="redist bench",
                                description="Compare redistributions against the XLA SPMD partitioner "
                                            "on 8 simulated CPU devices: bytes, memory and time per case.")
    p.add_argument("--quick", action="store_true", help="a minute-long subset (8 named cases, 12 random pairs)")
    p.add_argument("--partitioner", action="store_true", help="also run the partitioner benchmark (benchmarks/partitioner.py)")
    p.add_argument("--out", type=Path, default=None, help=f"output folder (default ./{DEFAULT_OUT}/<date>/)")
    p.add_argument("--cases", nargs="*", default=None, help="named cases or families to run (default all)")
    p.add_argument("--pairs", type=int, default=None, help="number of random pairs (default 200; quick 12)")
    p.add_argument("--seed", type=int, default=0, help="random-pair seed")
    p.add_argument("--reps", type=int, default=None, help="timed runs per side, named cases (default 21; quick 9)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots (then matplotlib is not needed)")
    p.add_argument("--plots-from", type=Path, default=None, metavar="REPORT.json",
                   help="only redraw the plots of an earlier report (next to it, or into --out)")
    return p


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


def error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def bad_counts(args: argparse.Namespace) -> str | None:
    """A message for a count that cannot mean anything (negative pairs, fewer than 1 timed run)."""
    if args.pairs is not None and args.pairs < 0:
        return f"--pairs {args.pairs}: give 0 or more random pairs"
    if args.reps is not None and args.reps < 1:
        return f"--reps {args.reps}: give at least 1 timed run per side"
    return None


def ensure_devices() -> str | None:
    """Ask for 8 CPU devices before JAX starts; an error message if JAX already has fewer."""
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (flags + " " + DEVICE_FLAG).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.device_count() < DEVICES:
        return (f"the benchmark needs {DEVICES} devices but JAX has {jax.device_count()}; "
                f"set XLA_FLAGS={DEVICE_FLAG} before JAX is imported")
    return None


def _replot(args: argparse.Namespace) -> int:
    if not args.plots_from.is_file():
        return error(f"--plots-from {args.plots_from}: no such report; give a .json that redist bench wrote")
    from benchmarks.plots import plots_from_json

    for path in plots_from_json(args.plots_from, args.out):
        print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = bad_counts(args)
    if problem:
        return error(problem)
    if (args.plots_from is not None or not args.no_plots) and importlib.util.find_spec("matplotlib") is None:
        return error(PLOTS_HINT)
    problem = ensure_devices()
    if problem:
        return error(problem)
    if args.plots_from is not None:
        return _replot(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markdown import Markdown

    from benchmarks.cases import NAMED_CASES, QUICK_CASES, select_cases
    from benchmarks.random_pairs import PairSpec, random_pairs
    from benchmarks.report import summarize, summary_table, write_report
    from benchmarks.run import run_suite

    names = args.cases if args.cases is not None else (list(QUICK_CASES) if args.quick else None)
    named = select_cases(NAMED_CASES, names)
    if args.cases and not named:
        return error(f"--cases {' '.join(args.cases)}: no named case or family matches; "
                     f"names are in benchmarks/cases.py")
    count = args.pairs if args.pairs is not None else (12 if args.quick else 200)
    spec = PairSpec(seed=args.seed, count=count)
    pairs = random_pairs(spec) if count > 0 else ()
    reps = args.reps if args.reps is not None else (9 if args.quick else 21)
    suite = run_suite(
        named, pairs, command=command_line(args), reps_named=reps, reps_random=max(5, reps // 3),
        pair_spec=spec if pairs else None,
        budget_named_s=0.5 if args.quick else 2.0, budget_random_s=0.2 if args.quick else 0.5,
    )
    if args.partitioner:
        suite.extra.update(_partitioner(args))
    out = args.out if args.out is not None else DEFAULT_OUT / suite.date
    written = write_report(suite, out, plots=not args.no_plots)
    con = Console(highlight=False, width=120 if not sys.stdout.isatty() else None)
    con.print(Markdown("\n".join(summary_table(summarize(suite.named), summarize(suite.random)))))
    for path in written:
        con.print(f"wrote {path}")
    return 0


def _partitioner(args: argparse.Namespace) -> dict[str, Any]:
    """``benchmarks.partitioner.run_partitioner_bench``'s table, or why it is missing."""
    from benchmarks import partitioner

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


if __name__ == "__main__":
    sys.exit(main())
