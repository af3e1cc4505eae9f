"""``partir_core.auto`` against the hand strategies and XLA: ``python -m benchmarks.auto``.

For each model x mesh x memory budget (x the tactics a user fixes first): the schedule the search
finds, its simulated time and peak, its measured time (compiled, median of runs), the same for
the best hand strategy of ``partir_core.strategies`` (fastest measured among those whose simulated
peak fits the budget), XLA's time with the found schedule's input layouts, and the search time.

The tight budget is ``TIGHT`` x the simulated peak of BP, which replicates every parameter and
its optimizer state: so every schedule that keeps all parameters whole is ruled out.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402

from benchmarks.harness import Clock, suite_parser, with_control  # noqa: E402
from benchmarks.paired import balanced_order  # noqa: E402
from benchmarks.partitioner import Side, bench_schedule  # noqa: E402
from partir_core import Shard, auto, partition  # noqa: E402
from partir_core import auto_profile as P  # noqa: E402
from partir_core import models as M  # noqa: E402
from partir_core import strategies as S  # noqa: E402
from partir_core.auto import AutoResult, rules_of  # noqa: E402
from partir_core.clock import Compiled, compile_schedule  # noqa: E402
from partir_core.ir import trace  # noqa: E402
from partir_core.propagate import Propagator  # noqa: E402
from partir_core.search_space import State, build_space  # noqa: E402
from partir_core.tactics import Tactic  # noqa: E402
from redist.profile import spearman  # noqa: E402
from spmd_types import Mesh  # noqa: E402

SIZES: dict[str, dict[str, int]] = {
    "mlp": dict(batch=64, d_in=256, hidden=1024, classes=64),
    "transformer": dict(batch=8, seq=64, d_model=128, heads=8, head_dim=16, ffn=512, vocab=256),
    "gpt": dict(batch=8, seq=64, d_model=128, heads=8, head_dim=16, ffn=512, vocab=256, layers=2),
    "llama": dict(batch=8, seq=64, d_model=128, heads=8, kv_heads=2, head_dim=16, ffn=512, vocab=256, layers=2),
    "moe": dict(batch=8, seq=64, d_model=128, heads=8, kv_heads=2, head_dim=16, ffn=256, vocab=256, layers=2,
                experts=4),
}
"""Models the benchmark searches, at sizes where compute, not dispatch, dominates measured time
(adding a model is one line: its name in ``partir_core.models.MODELS`` and its sizes)."""
TIGHT = 0.6
FIXED: dict[str, list[Any]] = {"": [], "BP": [Shard("batch", dim=0, axis="data")]}


@dataclass(frozen=True)
class AutoRow:
    model: str
    budget: int | None
    fixed: str
    result: AutoResult
    ours: Side
    xla: Side
    hand: str
    hand_sim_s: float
    hand_peak: int
    hand_side: Side
    megatron: str


def _hand(model: M.Model, mesh: Mesh, budget: int | None, runs: int) -> tuple[str, float, int, Side]:
    best: tuple[str, float, int, Side] | None = None
    for name in S.applicable(model.name):
        step = partition(model.step, mesh, S.schedule(model.name, name))
        step.trace(*model.args)
        sim = step.simulate()
        if budget is not None and sim.peak_bytes > budget:
            continue
        side = bench_schedule(model, S.schedule(model.name, name), mesh, runs)[0]
        t = P.CPU8.time_s(P.features(step.analysis.lowered, sim))
        if best is None or side.time_s < best[3].time_s:
            best = (name, t, sim.peak_bytes, side)
    assert best is not None, "no hand strategy fits the budget"
    return best


def tight_budget(model: M.Model, mesh: Mesh) -> int:
    """``TIGHT`` x BP's simulated peak: rules out every schedule that replicates the parameters."""
    bp = partition(model.step, mesh, S.schedule(model.name, "BP"))
    bp.trace(*model.args)
    return int(TIGHT * bp.simulate().peak_bytes)


def bench(name: str, mesh: Mesh, runs: int, time_budget_s: float, every: bool = False) -> list[AutoRow]:
    """The tight budget with nothing fixed; ``every``: also no budget, and BP fixed."""
    model = M.MODELS[name](**SIZES.get(name, {}))
    rows = []
    tight = tight_budget(model, mesh)
    for budget in ((None, tight) if every else (tight,)):
        hand = _hand(model, mesh, budget, runs)
        for label, fixed in (FIXED.items() if every else [("", [])]):
            r = auto(model.step, mesh, *model.args, memory_budget=budget, fixed=fixed, seed=0,
                     time_budget_s=time_budget_s)
            ours, xla, _ = bench_schedule(model, list(r.schedule), mesh, runs)
            rows.append(AutoRow(name, budget, label, r, ours, xla, *hand,
                                megatron_axis(model, mesh, list(r.schedule))))
            print(r.explain().split("\n== search space")[0], flush=True)
    return rows


def megatron_axis(model: M.Model, mesh: Mesh, schedule: list[Tactic]) -> str:
    """The mesh axes the schedule shards every Megatron dimension over (``strategies.MEGATRON``:
    QKV columns, output-projection rows, MLP first-layer columns, second-layer rows), or '-'."""
    step = partition(model.step, mesh, schedule)
    a = step.trace(*model.args)
    lay = dict(zip(a.program.input_paths, a.lowered.in_types))
    axes = {lay[p].dims[d] for p, d in S.MEGATRON[model.name].items()}
    return "x".join(str(x) for x in axes.pop()) or "-" if len(axes) == 1 else "-"


def table(rows: list[AutoRow]) -> str:
    out = ["| model | budget B | fixed | found schedule | Megatron over | sim us | peak B | measured ms | "
           "XLA ms | best hand | hand sim us | hand peak B | hand ms | found/hand | evals | search s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ev = r.result.evaluation
        found = "; ".join(str(t) for t in r.result.found) or "(replicated)"
        out.append(f"| {r.model} | {r.budget or '-'} | {r.fixed or '-'} | {found} | {r.megatron} | "
                   f"{ev.time_s * 1e6:,.0f} | "
                   f"{ev.peak_bytes:,} | {r.ours.time_s * 1e3:.2f} | {r.xla.time_s * 1e3:.2f} | {r.hand} | "
                   f"{r.hand_sim_s * 1e6:,.0f} | {r.hand_peak:,} | {r.hand_side.time_s * 1e3:.2f} | "
                   f"{r.ours.time_s / r.hand_side.time_s:.3f} | {r.result.stats.evaluations} | "
                   f"{r.result.stats.seconds:.1f} |")
    return "\n".join(out)


# -- calibration of the cost profile (partir_core.auto_profile) -------------------------------------


@dataclass(frozen=True)
class Sample:
    model: str
    label: str
    features: P.Features
    legacy_s: float
    measured_s: float


def random_schedules(model: M.Model, mesh: Mesh, n: int, seed: int, longest: int = 5) -> list[list[Tactic]]:
    """``n`` distinct schedules of 1..``longest`` random actions of ``auto``'s search space."""
    program = trace(model.step, *model.args)
    rules = rules_of(program)
    space = build_space(program, mesh, rules)
    rng = random.Random(seed)
    seen: set[Any] = set()
    out: list[list[Tactic]] = []
    for _ in range(50 * n):
        if len(out) == n:
            break
        st = State(Propagator(program, mesh, rules), ())
        for _ in range(rng.randint(1, longest)):
            nxt = st.apply(space, rng.choice(space.actions))
            st = nxt if nxt is not None else st
        if st.actions and st.key not in seen:
            seen.add(st.key)
            out.append(st.schedule(space))
    return out


def _compiled(model: M.Model, schedule: list[Tactic], mesh: Mesh) -> tuple[Any, list[Any], P.Features, float]:
    done = compile_schedule(model.step, mesh, schedule, *model.args)
    sim = done.step.simulate()
    return done.run, done.args, P.features(done.analysis.lowered, sim), P.legacy(4e9, sim)


def calibrate_model(name: str, mesh: Mesh, n_random: int, rounds: int, seed: int = 0) -> list[Sample]:
    """Hand strategies and random schedules of one model, timed in interleaved rounds (every
    schedule once per round, in ``balanced_order``) so a slow phase of the shared machine hits
    them alike; a schedule's time is its median over the rounds."""
    model = M.MODELS[name](**SIZES.get(name, {}))
    cases = [(s, S.schedule(name, s)) for s in S.applicable(name)]
    cases += [(f"random{i}", sch) for i, sch in enumerate(random_schedules(model, mesh, n_random, seed))]
    built = [(label, *_compiled(model, sch, mesh)) for label, sch in cases]
    times: list[list[float]] = [[] for _ in built]
    for r in range(rounds):
        for i in balanced_order(range(len(built)), r):
            compiled, args = built[i][1], built[i][2]
            t = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times[i].append(time.perf_counter() - t)
    return [Sample(name, b[0], b[3], b[4], statistics.median(ts)) for b, ts in zip(built, times)]


def calibrate(models: list[str], mesh: Mesh, n_random: int, rounds: int) -> tuple[P.CostProfile, str]:
    """Fit the profile on every model's samples; report each model's rank correlation before
    (the first ``auto``'s score) and after (the fitted profile)."""
    samples = [s for name in models for s in calibrate_model(name, mesh, n_random, rounds)]
    prof = P.fit([(s.features, s.measured_s) for s in samples])
    lines = [f"fitted: {prof}", "", "| model | schedule | measured ms | legacy sim ms | fitted ms |",
             "|---|---|---|---|---|"]
    lines += [f"| {s.model} | {s.label} | {s.measured_s * 1e3:.2f} | {s.legacy_s * 1e3:.2f} | "
              f"{prof.time_s(s.features) * 1e3:.2f} |" for s in samples]
    lines.append("")
    for name in models:
        mine = [s for s in samples if s.model == name]
        meas = [s.measured_s for s in mine]
        before = spearman([s.legacy_s for s in mine], meas)
        after = spearman([prof.time_s(s.features) for s in mine], meas)
        lines.append(f"{name}: {len(mine)} schedules, Spearman(score, measured) before {before:.2f}, after {after:.2f}")
    return prof, "\n".join(lines)


# -- MCTS against beam and greedy search on the same evaluation budget --------------------------------

CHECKPOINTS = (10, 20, 40, 80, 160)


def compare(models: list[str], mesh: Mesh, budget_evals: int, fixed: str = "") -> str:
    """Best score found after n costed schedules, per method, on each model with the tight budget
    (the first costed schedule is the root; '*' marks a best that still exceeds the budget)."""
    from partir_core.auto import METHODS

    cols = [n for n in CHECKPOINTS if n <= budget_evals]
    out = ["| model | method | " + " | ".join(f"best score after {n} (us)" for n in cols) +
           " | search s | found schedule |", "|---|---|" + "---|" * (len(cols) + 2)]
    for name in models:
        model = M.MODELS[name](**SIZES.get(name, {}))
        budget = tight_budget(model, mesh)
        for method in METHODS:
            r = auto(model.step, mesh, *model.args, memory_budget=budget, fixed=FIXED[fixed], seed=0,
                     max_evaluations=budget_evals, time_budget_s=600, method=method, progress=False,
                     measure_top=0)
            h = r.stats.history
            cells = []
            for n in cols:
                ev = h[min(n, len(h)) - 1]
                cells.append(f"{ev.score * 1e6:,.0f}{'' if ev.fits(budget) else '*'}")
            found = "; ".join(str(t) for t in r.found) or "(replicated)"
            out.append(f"| {name} | {method} | " + " | ".join(cells) + f" | {r.stats.seconds:.1f} | {found} |")
    return "\n".join(out)


# -- the found schedule against every hand strategy that fits, in the same interleaved rounds ----------


def _fitting_hands(model: M.Model, mesh: Mesh, budget: int | None) -> dict[str, list[Tactic]]:
    """The hand strategies whose simulated peak fits ``budget``."""
    out = {}
    for name in S.applicable(model.name):
        step = partition(model.step, mesh, S.schedule(model.name, name))
        step.trace(*model.args)
        if budget is None or step.simulate().peak_bytes <= budget:
            out[name] = S.schedule(model.name, name)
    return out


def _call(c: Compiled) -> Any:
    """One call of a compiled schedule, as the round robin times it (one output to wait on)."""
    return jax.tree_util.tree_leaves(c())[0]


def versus(name: str, mesh: Mesh, seconds: float, time_budget_s: float) -> str:
    """``auto`` with the clock choosing among its best schedules by score (``measure_top=None``) on the tight
    budget, then its schedule, the simulator's own pick (where the clock chose another) and every
    hand strategy that fits, timed in the same rounds in ``balanced_order`` with an A/A control
    (the found schedule timed twice): a markdown row."""
    model = M.MODELS[name](**SIZES.get(name, {}))
    budget = tight_budget(model, mesh)
    clock = Clock()
    r = auto(model.step, mesh, *model.args, memory_budget=budget, seed=0, time_budget_s=time_budget_s,
             measure_top=None)
    spent = clock.wall_s
    print(r.explain().split("\n== search space")[0], flush=True)
    schedules = {"auto": list(r.schedule)}
    m = r.measurement
    if m is not None and m.chosen != 0:
        schedules["simulator's pick"] = list(r.fixed + m.candidates[0].found)
    hands = _fitting_hands(model, mesh, budget)
    built = {k: compile_schedule(model.step, mesh, sch, *model.args) for k, sch in {**schedules, **hands}.items()}
    med, aa = with_control({k: functools.partial(_call, c) for k, c in built.items()}, "auto", seconds)
    best = min(hands, key=lambda h: med[h])
    others = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in med.items() if k not in ("auto", best))
    picked = "-" if m is None else f"{m.chosen + 1} of {len(m.candidates)}"
    return (f"| {name} | {spent:.1f} | {picked} | {med['auto'] * 1e3:.2f} | {best} | {med[best] * 1e3:.2f} | "
            f"{med['auto'] / med[best]:.3f} | {aa:.3f} | {others} |")


VERSUS_HEAD = ("| model | auto s (search + clock) | clock's pick (by score) | auto ms | best hand | hand ms | "
               "auto / hand | A/A | others ms |\n|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> None:
    p = suite_parser("auto", __doc__)
    p.add_argument("--models", nargs="*", default=list(SIZES))
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--time-budget", type=float, default=120.0)
    p.add_argument("--calibrate", action="store_true",
                   help="time hand and random schedules and fit partir_core.auto_profile instead")
    p.add_argument("--every", action="store_true", help="also no memory budget, and BP fixed")
    p.add_argument("--compare", action="store_true", help="MCTS against beam and greedy search instead")
    p.add_argument("--evaluations", type=int, default=160, help="evaluation budget of --compare")
    p.add_argument("--random", type=int, default=8, help="random schedules per model (--calibrate)")
    p.add_argument("--versus", type=float, default=None, metavar="SECONDS",
                   help="instead: auto (defaults) against every fitting hand strategy, timed in the same "
                        "interleaved rounds for SECONDS (at least 15 rounds), with an A/A control")
    a = p.parse_args(argv)
    mesh = Mesh({"data": 2, "model": 4})
    if a.compare:
        print(compare(a.models, mesh, a.evaluations))
        return
    if a.versus is not None:
        print("\n".join([VERSUS_HEAD] + [versus(name, mesh, a.versus, a.time_budget) for name in a.models]))
        return
    if a.calibrate:
        print(calibrate(a.models, mesh, a.random, a.runs)[1])
        return
    rows = [r for name in a.models for r in bench(name, mesh, a.runs, a.time_budget, a.every)]
    print(table(rows))


if __name__ == "__main__":
    main()
