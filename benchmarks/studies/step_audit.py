"""Each step of our plans, timed alone, against its price: where the cost model errs, by step kind.

Why: ``benchmarks.speed`` compares whole plans' predicted and measured times (one rank
correlation over cases); a profile is fitted per step kind on ``redist calibrate``'s synthetic
samples, so its errors show up per kind, on the steps plans really run. This audit times every
communicating step of the plans ``redistribute`` picks for random pairs
(``benchmarks.random_pairs``), each compiled alone as a single-step plan and timed the way
``redist calibrate`` times its samples (``redist.calibrate.samples``: every call paired with an
empty program, all steps of one block size interleaved), and prices it under each profile named.

Steps over sub-axes are left out: no ``PartitionSpec`` expresses their types alone. For 16-bit
floats, which the executor moves as bit patterns (``redist.executor._on_bits``), the same step
on ``u16`` is timed alongside: XLA:CPU runs each ``bitcast-convert`` at a plan's ends as a pass
of its own, which no profile key prices (16-bit moves read the plain kind), and the ratio of the
two measurements shows what those passes cost.

``python -m benchmarks.studies.step_audit [--count N] [--seed S] [--reps R] [--profile P ...]``
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from typing import NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from benchmarks.harness import at_least, suite_parser  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from benchmarks.random_pairs import PairSpec, random_pairs  # noqa: E402
from redist import Plan, redistribute  # noqa: E402
from redist.calibrate import samples, size_classes  # noqa: E402
from redist.cost import CostModel  # noqa: E402
from redist.profile import PROFILE_DIR, load_profile  # noqa: E402
from redist.steps import Comm  # noqa: E402
from spmd_types import ShardingType  # noqa: E402
from spmd_types.dtypes import is_16bit_float  # noqa: E402


class Audited(NamedTuple):
    """One step alone: its plan, the measured seconds, and for 16-bit floats the same step on u16."""

    plan: Plan
    seconds: float
    bits_seconds: float | None


def steps_of(spec: PairSpec) -> list[Plan]:
    """The communicating steps of the default plans for ``spec``'s pairs, each as a one-step plan."""
    out: list[Plan] = []
    for case in random_pairs(spec):
        plan = redistribute(case.src_type, case.dst_type, case.mesh)
        for before, step in zip(plan.all_types, plan.steps):
            if step.comm is Comm.LOCAL or any(":" in str(t) for t in (before, step.apply(before))):
                continue
            out.append(Plan.build(before, (step,), plan.cost_model))
    return out


def _as_u16(plan: Plan) -> Plan:
    src = plan.src
    return Plan.build(ShardingType(src.shape, "u16", src.dims, src.mesh, src.unreduced), plan.steps, plan.cost_model)


def audit(plans: Sequence[Plan], reps: int) -> list[Audited]:
    """Every plan timed alone; 16-bit float moves (no pending sums) with their u16 twin."""
    twins = {i: _as_u16(p) for i, p in enumerate(plans) if is_16bit_float(p.src.dtype) and not p.src.unreduced}
    timed = [*plans, *twins.values()]
    secs: dict[int, float] = {}
    for group in size_classes(timed):
        for p, s in zip(group, samples(group, reps)):
            secs[id(p)] = s.seconds
    return [Audited(p, secs[id(p)], secs[id(twins[i])] if i in twins else None) for i, p in enumerate(plans)]


def _ratio(values: Sequence[float]) -> str:
    """Median, 10th and 90th percentile of ratios, as ``1.23x (0.90-1.50)``."""
    v = sorted(values)
    pick = lambda q: v[min(int(q * len(v)), len(v) - 1)]  # noqa: E731
    return f"{statistics.median(v):.2f}x ({pick(0.1):.2f}-{pick(0.9):.2f})"


def table(rows: Sequence[Audited], models: dict[str, CostModel]) -> list[str]:
    """Per (step class, width): priced over measured under each model; 16-bit floats over u16."""
    groups: dict[tuple[str, str], list[Audited]] = {}
    for a in rows:
        width = "16-bit float" if is_16bit_float(a.plan.src.dtype) else "other"
        groups.setdefault((type(a.plan.steps[0]).__name__, width), []).append(a)
    head = ["step", "data", "steps", *(f"priced / measured, {name}" for name in models), "16-bit float / same step on u16"]
    body = []
    for (kind, width), group in sorted(groups.items()):
        priced = [_ratio([_price(a.plan, cm) / max(a.seconds, 1e-7) for a in group]) for cm in models.values()]
        bits = [a.seconds / max(a.bits_seconds, 1e-7) for a in group if a.bits_seconds]
        body.append([kind, width, len(group), *priced, _ratio(bits) if bits else "-"])
    lines = md_table(head, body)
    for name, cm in models.items():
        errs = [abs(math.log(_price(a.plan, cm) / max(a.seconds, 1e-7))) for a in rows]
        lines.append(f"\n{name}: median error {math.expm1(statistics.median(errs)):.0%} over {len(rows)} steps "
                     f"(the factor by which price and measurement differ, either way)")
    return lines


def _price(plan: Plan, cm: CostModel) -> float:
    return Plan.build(plan.src, plan.steps, cm).time_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("studies.step_audit", __doc__)
    parser.add_argument("--count", type=at_least(1, int), default=200, help="random pairs whose plans' steps are audited")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random pairs")
    parser.add_argument("--reps", type=at_least(1, int), default=11, help="interleaved calls per step")
    parser.add_argument("--profile", nargs="*", default=[str(PROFILE_DIR / "cpu.json")],
                        help="profiles to price the steps under (default: the shipped CPU profile)")
    args = parser.parse_args(argv)
    default = parser.get_default("profile")
    named = "" if args.profile == default else " --profile " + " ".join(args.profile)
    print(f"Command: `python -m benchmarks.studies.step_audit --count {args.count} --seed {args.seed} --reps {args.reps}{named}`\n")
    rows = audit(steps_of(PairSpec(seed=args.seed, count=args.count)), args.reps)
    models = {os.path.basename(p): load_profile(p).cost_model("measured") for p in args.profile}
    print("\n".join(table(rows, models)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
