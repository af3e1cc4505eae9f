"""What each family of typed candidates buys: the plans it wins and the planning time it costs.

Why: the planning target (mean <= 5 ms a pair up to 8,192 devices) is met on the realistic
ladder rungs and missed on the binary ones (8, 12 and 13 axes of 2), where the search is a flat
profile of many candidates (``docs/design.md`` 13.3). The way left to a smaller mean is to build
fewer candidates, which is only free if a family never decides a plan. This drops one family at a
time (``redist.synth.BUILDERS``, and ``permute_last``: the mirrored permutes) and reports:

- over a seeded corpus (the ladder's rungs up to 8,192 devices and four small meshes, under each
  ladder objective), how many chosen plans change, how many get worse by more than 1% in the
  objective's figure (received bytes under ``bytes``, modelled time otherwise), the worst ratio,
  and (``bytes`` only) how many lose the transfer bound;
- the planning time of the binary rungs with the family dropped, timed interleaved with every
  family kept, in one process (plan caches cold per pair, as ``redist bench-plan --ladder``),
  the mean over pairs of each pair's median;
- the same with only the greedy pass kept: the least planning time any trimming of the families
  could reach, and what it would cost in plans.

``python -m benchmarks.studies.families [--pairs N] [--reps R]``.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import NamedTuple
from unittest import mock

from benchmarks.harness import at_least, suite_parser
from benchmarks.markdown import md_table
from benchmarks.planning import (
    LADDER,
    LADDER_OBJECTIVES,
    above_bound,
    ladder_cost_model,
    ladder_pair,
    random_type,
)
from redist import synth
from redist.caches import clear_caches
from redist.cost import CostModel
from redist.errors import RedistError
from redist.plan import Plan
from redist.synth import families as synth_families  # where typed_candidates reads them
from spmd_types import Mesh, ShardingType
from spmd_types.errors import IndivisibleDimensionError

ALL = "(none)"
"""The row that drops no family."""

ONLY_GREEDY = "all but greedy"
"""The row that keeps only the greedy pass (and the exchanges): the least any trimming of the
families could plan in."""

MIRRORS = "permute_last"

SMALL_MESHES = ({"x": 2, "y": 2, "z": 2}, {"x": 2, "y": 4}, {"x": 6, "y": 2}, {"a": 3, "b": 2})

BINARY_RUNGS = tuple(i for i, shape in enumerate(LADDER)
                     if len(shape) > 4 and set(shape.values()) == {2} and 2 ** len(shape) <= 8192)
"""The ladder's binary rungs within the planning target (8, 12 and 13 axes of 2)."""


def families() -> tuple[str, ...]:
    return (*synth.BUILDERS, MIRRORS)


@contextmanager
def dropped(family: str) -> Iterator[None]:
    """Plan without ``family`` (``ALL``: with every family; ``ONLY_GREEDY``: without every other);
    plan caches are cleared on entry and exit, since cached plans were chosen with the other set
    of candidates."""
    if family not in (ALL, ONLY_GREEDY, *families()):
        raise RedistError(f"unknown candidate family {family!r}; the families are {', '.join(families())}")
    gone = set(families()) - {"greedy"} if family == ONLY_GREEDY else {family}
    with ExitStack() as stack:
        if MIRRORS in gone:
            stack.enter_context(mock.patch.object(synth_families, "_permute_last_candidates", _no_mirrors))
        if gone & set(synth.BUILDERS):
            kept = {k: v for k, v in synth.BUILDERS.items() if k not in gone}
            stack.enter_context(mock.patch.object(synth_families, "BUILDERS", kept))
        clear_caches("plans")
        try:
            yield
        finally:
            clear_caches("plans")


def _no_mirrors(src: ShardingType, dst: ShardingType, cm: CostModel, candidates: object) -> list[object]:
    return []


class Case(NamedTuple):
    objective: str
    src: ShardingType
    dst: ShardingType
    cm: CostModel


def corpus(pairs: int, seed: int) -> list[Case]:
    """Per objective: ``pairs`` ladder pairs on each rung up to 8,192 devices (every third with
    pending sums) and ``4 * pairs`` random pairs of rank 1-4 on each small mesh."""
    out = []
    for obj in LADDER_OBJECTIVES:
        for shape in LADDER:
            mesh = Mesh(shape)
            if mesh.size > 8192:
                continue
            cm, rng = ladder_cost_model(obj, mesh), random.Random(seed)
            out += [Case(obj, *ladder_pair(rng, mesh, i % 3 == 0), cm) for i in range(pairs)]
        for shape in SMALL_MESHES:
            mesh = Mesh(shape)
            cm, rng = ladder_cost_model(obj, mesh), random.Random(seed)
            for i in range(4 * pairs):
                sh = tuple(rng.choice([12, 24, 48, 96]) for _ in range(rng.randint(1, 4)))
                try:
                    out.append(Case(obj, random_type(rng, mesh, sh, i % 2 == 0), random_type(rng, mesh, sh, i % 3 == 0), cm))
                except IndivisibleDimensionError:
                    continue  # a shape the random axes do not divide
    return out


class Quality(NamedTuple):
    """What dropping a family did to one objective's plans."""

    changed: int
    worse: int        # by more than 1% in the objective's figure
    worst: float      # the largest ratio (dropped / kept) of that figure; 1.0 when none is worse
    failed: int       # no plan at all (every remaining candidate above the memory bound)
    bound_lost: int   # ``bytes`` only: at the transfer bound with the family, above it without


def _figure(case: Case, plan: Plan) -> float:
    """What ``case``'s objective ranks plans by first: received bytes, else modelled time."""
    return plan.recv_bytes if case.objective == "bytes" else plan.time_s


def _ratio(now: float, was: float) -> float:
    return now / was if was else (1.0 if now == 0 else math.inf)


def quality(cases: list[Case], family: str) -> dict[str, Quality]:
    """Per objective, the plans of ``cases`` without ``family`` against those with every family."""
    with dropped(ALL):
        base = [synth.synthesize(c.src, c.dst, c.cm) for c in cases]
    ratios: dict[str, list[float]] = {o: [] for o in LADDER_OBJECTIVES}  # of the changed plans
    failed = dict.fromkeys(LADDER_OBJECTIVES, 0)
    lost = 0
    with dropped(family):
        for c, b in zip(cases, base):
            try:
                p = synth.synthesize(c.src, c.dst, c.cm)
            except RedistError:
                failed[c.objective] += 1
                continue
            if p.steps != b.steps:
                ratios[c.objective].append(_ratio(_figure(c, p), _figure(c, b)))
                lost += c.objective == "bytes" and not above_bound(b) and above_bound(p)
    return {o: Quality(len(r), sum(x > 1.01 for x in r), max((1.0, *r)), failed[o], lost if o == "bytes" else 0)
            for o, r in ratios.items()}


def planning_ms(objective: str, rung: int, pairs: int, seed: int, reps: int, names: tuple[str, ...]) -> dict[str, float]:
    """Per family in ``names``: the rung's mean over pairs of each pair's median planning time (ms)
    with it dropped, every configuration timed in turn within each repetition (in a rotated order)."""
    mesh = Mesh(LADDER[rung])
    cm, rng = ladder_cost_model(objective, mesh), random.Random(seed)
    ps = [ladder_pair(rng, mesh, i % 3 == 0) for i in range(pairs)]
    with dropped(ALL):
        for s, d in ps:  # per-mesh tables (quotient meshes, groups): warm, as after a rung's first pairs
            synth.synthesize(s, d, cm)
    times: dict[str, list[list[float]]] = {n: [[] for _ in ps] for n in names}
    for rep in range(reps):
        for n in names[rep % len(names):] + names[:rep % len(names)]:  # each configuration first in turn
            with dropped(n):
                for i, (s, d) in enumerate(ps):
                    clear_caches("plans")
                    t0 = time.perf_counter()
                    try:
                        synth.synthesize(s, d, cm)
                    except RedistError:
                        pass  # counted by ``quality``; its time still counts
                    times[n][i].append((time.perf_counter() - t0) * 1e3)
    return {n: statistics.fmean(statistics.median(t) for t in per) for n, per in times.items()}


def report(pairs: int, reps: int, seed: int = 7) -> list[str]:
    names = (ALL, *families(), ONLY_GREEDY)
    cases = corpus(pairs, seed)
    q = {n: quality(cases, n) for n in names[1:]}
    timed = [(o, r) for o in ("gloo", "alpha-beta") for r in BINARY_RUNGS]
    ms = {(o, r): planning_ms(o, r, 12, 0, reps, names) for o, r in timed}
    per_obj = len(cases) // len(LADDER_OBJECTIVES)
    plans = md_table(
        ("family dropped", *(f"{o}: changed / worse / worst x" for o in LADDER_OBJECTIVES), "no plan", "bytes: bound lost"),
        ((n, *(f"{x.changed} / {x.worse} / {x.worst:.2f}" for x in q[n].values()),
          sum(x.failed for x in q[n].values()), q[n]["bytes"].bound_lost) for n in names[1:]))
    clock = md_table(
        ("family dropped", *(f"{o}, {len(LADDER[r])} axes: mean ms" for o, r in timed)),
        ((n, *(f"{ms[k][n]:.2f}" if n == ALL else f"{ms[k][n]:.2f} ({ms[k][n] / ms[k][ALL] - 1:+.0%})" for k in timed))
         for n in names))
    return [f"Command: python -m benchmarks.studies.families --pairs {pairs} --reps {reps}", "",
            f"Plans: {len(cases)} moves ({per_obj} per objective, seed {seed}); \"worse\": by more than 1% in the "
            "objective's figure (received bytes under bytes, modelled time otherwise).", "", *plans, "",
            f"Planning time: the 12 pairs of `redist bench-plan --ladder 12 --seed 0` on each binary rung, "
            f"median of {reps} per pair, the mean over pairs (in brackets: against no family dropped).", "", *clock]


def main() -> None:
    ap = suite_parser("studies.families", __doc__)
    ap.add_argument("--pairs", type=at_least(1, int), default=15, help="ladder pairs per rung and objective")
    ap.add_argument("--reps", type=at_least(1, int), default=3, help="timed repetitions of each rung")
    args = ap.parse_args()
    print("\n".join(report(args.pairs, args.reps)))


if __name__ == "__main__":
    main()
