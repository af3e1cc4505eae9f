"""What the persistent autotuning cache (``redist.tune_cache``) costs and what it buys.

For each named case (``benchmarks.cases``): the seconds ``redist.autotune(..., cache=FILE)`` takes
to time the planner's best plans and write the winner; what planning then costs with the cache in
force (the first call of a move, which reads the file and rebuilds the plan from the planner's
candidates, and later calls, a dict hit) beside planning without it; and the model's choice against
the cached choice on the clock: both compiled, timed interleaved in one process
(``benchmarks.harness.with_control``, medians), with the model's program timed a second time under
another name as an A/A control (how far apart two names of one program come out on this machine).
Every result is checked against NumPy where the destination has no pending sum.

``python -m benchmarks.tune_cache [--cases NAME ...|all] [--seconds S] [--top K] [--reps R] [--margin M] [--out DIR]``
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from benchmarks import harness  # noqa: E402
from benchmarks.cases import NAMED_CASES, Case, select_cases  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from benchmarks.speed import _steps  # noqa: E402
from redist import autotune, redistribute, use_tune_cache  # noqa: E402
from redist.arrays import check_output, make_input  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.profile import default_cost_model  # noqa: E402
from redist.tune_cache import forget_loaded  # noqa: E402
from redist.tuning import DEFAULT_MARGIN, DEFAULT_REPS, DEFAULT_TOP  # noqa: E402
from spmd_types.jax_interop import mesh_to_jax  # noqa: E402

SMALL = ("seq_to_hidden", "hidden_to_seq", "ulysses_seq_to_heads", "tp2d_dim_swap_flat", "fsdp_gather_2d")
"""The default cases: the moves where the model's ranking was found to lose on the clock, and one
where it does not (``fsdp_gather_2d``)."""

PLAN_CALLS = 2000
"""Planning calls timed per case, with and without the cache (one ``redistribute`` is microseconds)."""


class Row(NamedTuple):
    name: str
    tune_s: float
    """Seconds ``autotune`` took: compiling, timing and writing the entry."""
    first_hit_s: float
    """The first planning call with the cache in force: the file read and the plan rebuilt."""
    hit_s: float
    """A later planning call with the cache (median of ``PLAN_CALLS``)."""
    plain_s: float
    """A planning call without the cache (median of ``PLAN_CALLS``)."""
    model_steps: str
    cached_steps: str
    speedup: float
    """The model's choice's median over the cached choice's."""
    control: float
    """The model's program's median over itself under another name (A/A)."""


def _per_call(case: Case, cm: object) -> float:
    times = []
    for _ in range(PLAN_CALLS):
        t0 = time.perf_counter()
        redistribute(case.src_type, case.dst_type, cost_model=cm)  # type: ignore[call-overload]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_case(case: Case, cache: str, seconds: float, top: int, reps: int, margin: float) -> Row:
    src, dst = case.src_type, case.dst_type
    cm = default_cost_model(case.mesh)
    model = redistribute(src, dst, cost_model=cm)
    plain_s = _per_call(case, cm)
    t0 = time.perf_counter()
    autotune(src, dst, cost_model=cm, top=top, reps=reps, margin=margin, cache=cache)
    tune_s = time.perf_counter() - t0
    forget_loaded()  # as a fresh process: the next call reads the file
    use_tune_cache(cache)
    t0 = time.perf_counter()
    cached = redistribute(src, dst, cost_model=cm)
    first_hit_s = time.perf_counter() - t0
    hit_s = _per_call(case, cm)
    use_tune_cache(None)
    jmesh = mesh_to_jax(case.mesh, explicit=True)
    x, expected = make_input(src, jmesh)
    progs = {"model": compile_plan(model, jmesh).lower(x).compile(),
             "cached": compile_plan(cached, jmesh).lower(x).compile()}
    for name, prog in progs.items():
        if not dst.unreduced and check_output(prog(x), expected, dst) is not None:
            raise AssertionError(f"{case.name}: the {name} plan's result differs from NumPy's")
    thunks = {"model": harness.thunk(progs["model"], x), "cached": harness.thunk(progs["cached"], x)}
    med, aa = harness.with_control(thunks, "model", seconds)
    return Row(case.name, tune_s, first_hit_s, hit_s, plain_s, _steps(model), _steps(cached),
               med["model"] / med["cached"], 1 / aa)


def report(rows: Sequence[Row], command: str, load: tuple[float, float], wall_s: float) -> list[str]:
    changed = [r for r in rows if r.model_steps != r.cached_steps]
    lines = harness.header("The autotuning cache: its cost and the cached choice on the clock", command, load, wall_s)
    lines += md_table(["", "value"], [
        ["cases", len(rows)],
        ["cases whose cached plan is not the model's choice", len(changed)],
        ["tuning time per move (median / max)", f"{statistics.median(r.tune_s for r in rows):.2f} s / "
                                                f"{max(r.tune_s for r in rows):.2f} s"],
        ["first planning call with the cache (file read, plan rebuilt; median)",
         f"{statistics.median(r.first_hit_s for r in rows) * 1e3:.1f} ms"],
        ["later planning call with the cache / without (medians)",
         f"{statistics.median(r.hit_s for r in rows) * 1e6:.1f} us / {statistics.median(r.plain_s for r in rows) * 1e6:.1f} us"],
        ["cached choice vs the model's, geometric mean (min)",
         f"{harness.geomean([r.speedup for r in rows]):.2f}x ({min(r.speedup for r in rows):.2f}x)"],
        ["A/A control, geometric mean (range)",
         f"{harness.geomean([r.control for r in rows]):.2f}x ({min(r.control for r in rows):.2f}-{max(r.control for r in rows):.2f}x)"],
    ])
    lines += ["", *md_table(["case", "tuning", "model's plan", "cached plan", "cached vs model", "A/A"], [
        [r.name, f"{r.tune_s:.2f} s", r.model_steps, r.cached_steps if r in changed else "(the same)",
         f"{r.speedup:.2f}x", f"{r.control:.2f}x"] for r in rows])]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.suite_parser("tune_cache", __doc__, out="write DATE-tune-cache.md to this folder",
                          reps=(DEFAULT_REPS, "autotune's calls per plan"))
    parser.add_argument("--cases", nargs="*", default=list(SMALL), help="named cases ('all' for every one)")
    parser.add_argument("--seconds", type=harness.at_least(0, float), default=0.6, help="clock budget per case")
    parser.add_argument("--top", type=harness.at_least(1, int), default=DEFAULT_TOP, help="plans autotune times")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="how much faster another plan must measure")
    args = parser.parse_args(argv)
    cases = select_cases(NAMED_CASES, None if args.cases == ["all"] else args.cases)
    command = " ".join(["python -m benchmarks.tune_cache", "--cases", *args.cases, f"--seconds {args.seconds}",
                        f"--top {args.top}", f"--reps {args.reps}", f"--margin {args.margin}"])
    clock, rows = harness.Clock(), []
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "tune.json")
        for case in cases:
            rows.append(run_case(case, cache, args.seconds, args.top, args.reps, args.margin))
            r = rows[-1]
            print(f"{r.name:28s} tuned in {r.tune_s:5.2f} s  cached vs model {r.speedup:5.2f}x  A/A {r.control:5.2f}x",
                  flush=True)
    text = "\n".join(report(rows, command, clock.load, clock.wall_s)) + "\n"
    print("\n" + text)
    if args.out:
        print(f"wrote {harness.write_results(args.out, 'tune-cache', text)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
