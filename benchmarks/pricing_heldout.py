"""How well cost profiles rank plans on moves not used to fit them: time once, price under each.

Why: a profile is fitted to ``redist calibrate``'s single-step samples; what the planner needs is
the right order among the candidate plans of real moves. This times, for seeded random pairs
(``benchmarks.random_pairs``, a seed no calibration uses), the planner's best ``--top`` plans
interleaved (``redist.timing.interleaved_runs``, medians), once, and then prices those same plans
under every profile given, so profiles are compared on identical measurements:

- Spearman rank correlation of predicted vs measured time over every (move, plan);
- within a move, how often the profile's cheapest timed plan is the measured fastest (within
  ``--within``), and the geometric mean of its measured time over the fastest (its regret).

Measurements are written to ``--json`` and can be re-priced without timing (``--from-json``).

Command (small): ``python -m benchmarks.pricing_heldout --seed 23 --count 24 --top 3 --seconds 1``
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.random_pairs import PairSpec, random_pairs  # noqa: E402
from benchmarks.steps_text import parse_steps  # noqa: E402
from redist.calibrate import _input  # noqa: E402
from redist.cost import CostModel  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.plan import Plan  # noqa: E402
from redist.profile import load_profile, packaged_profile, spearman  # noqa: E402
from redist.synth.driver import ranked  # noqa: E402
from redist.timing import interleaved_runs  # noqa: E402
from spmd_types import Mesh, parse_type  # noqa: E402


def _model(name: str) -> CostModel:
    """A profile by shipped name (``cpu``) or path, as the one-process planner uses it."""
    prof = packaged_profile(name) if os.sep not in name and not name.endswith(".json") else load_profile(name)
    if prof is None:
        raise SystemExit(f"no shipped profile {name!r}")
    return prof.cost_model("measured")


def measure(spec: PairSpec, top: int, seconds: float, cm: CostModel) -> list[dict[str, Any]]:
    """Each pair's top plans under ``cm`` timed interleaved: one record per pair."""
    out = []
    for case in random_pairs(spec):
        mesh = Mesh(case.mesh_axes)
        src, dst = parse_type(case.src, mesh), parse_type(case.dst, mesh)
        plans = [p for p in ranked(src, dst, cm, top) if p.steps]
        if len(plans) < 2 or src.unreduced:
            continue
        x = _input(src)
        times = interleaved_runs([(compile_plan(p), x) for p in plans], reps=9, warmup=2, budget_s=seconds)
        out.append({"name": case.name, "mesh": dict(case.mesh_axes), "src": case.src, "dst": case.dst,
                    "plans": [repr(p.steps) for p in plans], "measured_s": [statistics.median(t) for t in times]})
        print(case.name, case.src, "->", case.dst, [f"{statistics.median(t) * 1e3:.3f}" for t in times], flush=True)
    return out


def score(records: Sequence[dict[str, Any]], cm: CostModel, within: float) -> dict[str, float]:
    """The profile's figures on the measured records (see the module docstring)."""
    pred, meas, hits, regret = [], [], 0, []
    for r in records:
        mesh = Mesh(tuple(r["mesh"].items()))
        src = parse_type(r["src"], mesh)
        prices = [Plan.build(src, parse_steps(s), cm).time_s for s in r["plans"]]
        pred += prices
        meas += r["measured_s"]
        pick = min(range(len(prices)), key=lambda i: (round(prices[i], 12), i))
        best = min(r["measured_s"])
        hits += r["measured_s"][pick] <= best * (1 + within)
        regret.append(r["measured_s"][pick] / best)
    return {"spearman": spearman(pred, meas), "picks_fastest": hits / max(len(records), 1),
            "regret_geomean": math.exp(statistics.fmean(math.log(x) for x in regret)) if regret else math.nan,
            "moves": len(records)}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pricing_heldout", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--max-bytes", type=int, default=8 << 20, help="per global array")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing budget per move")
    ap.add_argument("--within", type=float, default=0.05, help="a pick this close to the fastest counts")
    ap.add_argument("--plan-with", default="cpu", help="the profile whose candidates are timed")
    ap.add_argument("--profiles", nargs="*", default=["cpu"], help="profiles to score (names or paths)")
    ap.add_argument("--json", default="", help="write the measurements here")
    ap.add_argument("--from-json", default="", help="score these measurements instead of timing")
    a = ap.parse_args(argv)
    t0 = time.time()
    if a.from_json:
        records = json.loads(open(a.from_json).read())["records"]
    else:
        spec = PairSpec(seed=a.seed, count=a.count, max_bytes=a.max_bytes)
        records = measure(spec, a.top, a.seconds, _model(a.plan_with))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"seed": a.seed, "count": a.count, "max_bytes": a.max_bytes, "top": a.top,
                           "records": records}, f, indent=1)
    load = os.getloadavg()[0]
    print(f"{len(records)} moves with 2+ plans; {time.time() - t0:.0f} s; load average {load:.1f}")
    for name in a.profiles:
        s = score(records, _model(name), a.within)
        print(f"{name}: Spearman {s['spearman']:.3f}, picks the fastest (within {a.within:.0%}) "
              f"{s['picks_fastest']:.0%}, regret {s['regret_geomean']:.3f}x over {s['moves']} moves")


if __name__ == "__main__":
    main()
