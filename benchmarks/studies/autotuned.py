"""The model's plan, the autotuned plan (``redist.autotune``) and XLA's reshards, on the clock.

Why: near-ties on the measured model are where plans lose to XLA (design 13.3); autotuning times
the planner's best few plans and keeps the fastest. This benchmark says what that buys: for each
case, ``autotune`` (its own timing, then discarded), then the model's choice, the tuned plan,
Shardy and GSPMD timed interleaved in one process (``benchmarks.harness.round_robin``), speedups
against the faster correct XLA partitioner. Every side's result is checked against NumPy.

``python -m benchmarks.studies.autotuned [--cases none|NAME ...] [--random N] [--seconds S] [--top K] [--reps R] [--margin M]``
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from typing import NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from benchmarks.cases import NAMED_CASES, Case, select_cases  # noqa: E402
from benchmarks.harness import at_least, geomean, round_robin, suite_parser, thunk  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from benchmarks.random_pairs import PairSpec, random_pairs  # noqa: E402
from benchmarks.speed import _steps, _xla  # noqa: E402
from redist import autotune, redistribute  # noqa: E402
from redist.arrays import check_output, make_input  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.tuning import DEFAULT_MARGIN, DEFAULT_REPS, DEFAULT_TOP  # noqa: E402
from spmd_types.jax_interop import mesh_to_jax  # noqa: E402


class Result(NamedTuple):
    name: str
    model: float
    """Speedup of the model's plan over the faster correct XLA partitioner."""
    tuned: float
    """The same for the autotuned plan."""
    tune_s: float
    """Seconds ``autotune`` took (compiling and timing its candidates)."""
    model_steps: str
    tuned_steps: str


def run_case(case: Case, seconds: float, top: int, reps: int, margin: float) -> Result:
    src, dst = case.src_type, case.dst_type
    jmesh = mesh_to_jax(case.mesh, explicit=True)
    x, expected = make_input(src, jmesh)
    model = redistribute(src, dst, case.mesh)
    t0 = time.perf_counter()
    tuned = autotune(src, dst, case.mesh, top=top, reps=reps, margin=margin).plan
    tune_s = time.perf_counter() - t0
    progs = {"model": compile_plan(model, jmesh).lower(x).compile(), "tuned": compile_plan(tuned, jmesh).lower(x).compile()}
    if not dst.unreduced:
        progs.update(shardy=_xla(case, True, x, jmesh), gspmd=_xla(case, False, x, jmesh))
    ok = {k: dst.unreduced or check_output(p(x), expected, dst) is None for k, p in progs.items()}
    if not (ok["model"] and ok["tuned"]):
        raise AssertionError(f"{case.name}: our result differs from the reference ({ok})")
    med = round_robin({k: thunk(p, x) for k, p in progs.items() if ok[k]}, seconds)
    xla = min([v for k, v in med.items() if k in ("shardy", "gspmd")] or [med["model"]])
    return Result(case.name, xla / med["model"], xla / med["tuned"], tune_s, _steps(model), _steps(tuned))


def report(rows: Sequence[Result], command: str, low: float = 0.9) -> list[str]:
    changed = [r for r in rows if r.model_steps != r.tuned_steps]
    lines = [f"Command: `{command}`", ""]
    lines += md_table(["", "model's plan", "autotuned"], [
        ["geometric-mean speedup vs the faster correct XLA", f"{geomean([r.model for r in rows]):.2f}x",
         f"{geomean([r.tuned for r in rows]):.2f}x"],
        ["min speedup", f"{min(r.model for r in rows):.2f}x", f"{min(r.tuned for r in rows):.2f}x"],
        [f"cases below {low}x", sum(r.model < low for r in rows), sum(r.tuned < low for r in rows)],
    ])
    lines += ["", f"{len(rows)} cases; autotuning changed the plan in {len(changed)}; it took "
              f"{statistics.median(r.tune_s for r in rows):.2f} s a case (median), "
              f"{max(r.tune_s for r in rows):.2f} s at most.", ""]
    if changed:
        lines += md_table(["case", "model's plan", "speedup", "autotuned plan", "speedup"],
                          [[r.name, r.model_steps, f"{r.model:.2f}x", r.tuned_steps, f"{r.tuned:.2f}x"] for r in changed])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("studies.autotuned", __doc__)
    parser.add_argument("--cases", nargs="*", default=None, help="named cases (default all; 'none' for none)")
    parser.add_argument("--random", type=at_least(0, int), default=0, help="random pairs (benchmarks.random_pairs, seed 0)")
    parser.add_argument("--seconds", type=at_least(0, float), default=0.6, help="timing budget per case")
    parser.add_argument("--top", type=at_least(1, int), default=DEFAULT_TOP, help="plans autotune times")
    parser.add_argument("--reps", type=at_least(1, int), default=DEFAULT_REPS, help="autotune's calls per plan")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="how much faster another plan must measure")
    args = parser.parse_args(argv)
    named = () if args.cases == ["none"] else select_cases(NAMED_CASES, args.cases)
    cases = [*named, *(random_pairs(PairSpec(count=args.random)) if args.random else ())]
    cmd = " ".join(["python -m benchmarks.studies.autotuned", *(["--cases", *args.cases] if args.cases else []),
                    f"--random {args.random}", f"--seconds {args.seconds}", f"--top {args.top}", f"--reps {args.reps}", f"--margin {args.margin}"])
    rows = []
    for case in cases:
        rows.append(run_case(case, args.seconds, args.top, args.reps, args.margin))
        r = rows[-1]
        print(f"{r.name:32s} model {r.model:5.2f}x  tuned {r.tuned:5.2f}x  ({r.tune_s:.2f} s)", flush=True)
    print()
    print("\n".join(report(rows, cmd)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
