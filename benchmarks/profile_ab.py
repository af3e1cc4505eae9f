"""Two cost profiles judged on the clock: every golden move whose plan they choose differently,
both choices timed next to XLA's faster program and an A/A copy, interleaved, one process.

Why: a recalibrated profile changes the default plan of some moves; whether that is better is a
question for the clock, not for either profile's own prices. Only moves where the two profiles
choose different steps are timed; the A/A row (profile B's choice compiled twice) gives the noise
of the run.

Command: ``python -m benchmarks.profile_ab OLD.json NEW.json --seconds 4`` (8 simulated CPU devices).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import math  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import NamedTuple  # noqa: E402

from benchmarks.cases import Case  # noqa: E402
from benchmarks.golden import golden_cases  # noqa: E402
from benchmarks.harness import round_robin_times, suite_parser, thunk  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from redist import CostModel, Plan, redistribute  # noqa: E402
from redist.calibrate import _input  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.profile import load_cost_model  # noqa: E402
from redist.xla_side import compile_with_log, xla_programs  # noqa: E402
from spmd_types.jax_interop import mesh_to_jax  # noqa: E402


class Row(NamedTuple):
    """One move the two profiles plan differently: medians in seconds."""

    case: str
    steps_a: str
    steps_b: str
    a_s: float
    b_s: float
    b_again_s: float
    xla_s: float


def _steps(plan: Plan) -> str:
    return " + ".join(type(s).__name__ for s in plan.steps) or "(none)"


def differing(cases: Sequence[Case], a: CostModel, b: CostModel) -> list[tuple[Case, Plan, Plan]]:
    """The cases whose plans under ``a`` and ``b`` differ in their steps."""
    out = []
    for c in cases:
        pa, pb = redistribute(c.src_type, c.dst_type, cost_model=a), redistribute(c.src_type, c.dst_type, cost_model=b)
        if pa.steps != pb.steps:
            out.append((c, pa, pb))
    return out


def measure(case: Case, pa: Plan, pb: Plan, seconds: float) -> Row:
    x = _input(case.src_type)
    fns = {"a": thunk(compile_plan(pa), x), "b": thunk(compile_plan(pb), x), "b again": thunk(compile_plan(pb), x)}
    mesh = case.mesh
    for method, (fn, used) in xla_programs(case.src_type, case.dst_type, mesh_to_jax(mesh, explicit=False),
                                           mesh_to_jax(mesh, explicit=True)).items():
        arg = _input(case.src_type, used)
        fns[f"xla {method}"] = thunk(compile_with_log(fn, arg)[0], arg)
    med = {n: statistics.median(t) for n, t in round_robin_times(fns, seconds).items()}
    xla = min(v for n, v in med.items() if n.startswith("xla"))
    return Row(case.name, _steps(pa), _steps(pb), med["a"], med["b"], med["b again"], xla)


def report(rows: Sequence[Row], a_name: str, b_name: str) -> str:
    head = ["case", f"A: {a_name}", f"B: {b_name}", "A vs XLA", "B vs XLA", "B vs A", "A/A (B twice)"]
    body = [[r.case, r.steps_a, r.steps_b, f"{r.xla_s / r.a_s:.2f}x", f"{r.xla_s / r.b_s:.2f}x",
             f"{r.a_s / r.b_s:.2f}x", f"{r.b_again_s / r.b_s:.2f}x"] for r in rows]
    out = "\n".join(md_table(head, body))
    if rows:
        geo = math.exp(statistics.mean(math.log(r.a_s / r.b_s) for r in rows))
        aa = max(abs(math.log(r.b_again_s / r.b_s)) for r in rows)
        out += (f"\n\nGeomean B vs A over {len(rows)} moves: {geo:.3f}x (above 1: B's choices faster); "
                f"largest A/A gap {math.exp(aa):.2f}x; load average {os.getloadavg()[0]:.1f}.\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("profile_ab", __doc__)
    ap.add_argument("a", help="profile A (JSON written by redist calibrate)")
    ap.add_argument("b", help="profile B")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing budget per move")
    ap.add_argument("--cases", nargs="*", default=None, help="only these golden case names")
    args = ap.parse_args(argv)
    cases = [c for c in golden_cases() if args.cases is None or c.name in args.cases]
    pairs = differing(cases, load_cost_model(args.a), load_cost_model(args.b))
    print(f"{len(pairs)} of {len(cases)} moves planned differently", flush=True)
    rows = []
    for c, pa, pb in pairs:
        rows.append(measure(c, pa, pb, args.seconds))
        print(f"  {c.name}: B vs A {rows[-1].a_s / rows[-1].b_s:.2f}x", flush=True)
    print(report(rows, os.path.basename(args.a), os.path.basename(args.b)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
