"""Where ``plan(x)``'s time over its compiled executable goes: the same executable reached by
each path, timed in the same balanced rounds.

Why: ``benchmarks.per_call`` reads ``plan(x)`` a few microseconds over calling its executable
(``redist.executor._executable``) while the Python ``plan(x)`` runs before the executable costs
well under a microsecond warm. This study takes the path apart. Each arm dispatches the same
``Compiled`` on the same array after the previous call's ``block_until_ready``, as a step loop
does:

- ``executable`` and ``executable (A/A)``: ``Compiled.__call__`` (the noise floor of the table);
- ``executable._call``: the C++ fast path ``Compiled.__call__`` forwards to (JAX-private);
- ``busy + executable``: nine Python calls of unrelated small functions, then the executable (what
  any Python of ``plan(x)``'s warm size costs at that moment);
- ``run_plan``: ``redist.executor.run_plan(plan, x)`` (the table lookup, then the executable);
- ``plan(x)``: the public call (``Plan.__call__``, the registered runner, ``run_plan``).

``python -m benchmarks.studies.per_call_path [--reps N] [--cases ...]`` prints the dispatch medians
(the call returning) and each arm's difference from ``executable``, and the function calls one
warm ``plan(x)`` adds (``cProfile``: an exact count). Wall clock on the machine at hand.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import cProfile  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

import redist  # noqa: E402
from benchmarks.harness import Clock, command_line, header, suite_parser  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from benchmarks.per_call import CASES, MESH, Case  # noqa: E402
from redist.executor import _executable, run_plan  # noqa: E402
from redist.timing import schedule  # noqa: E402
from spmd_types import parse  # noqa: E402
from spmd_types.jax_interop import to_partition_spec  # noqa: E402

ARMS = ("executable", "executable (A/A)", "executable._call", "busy + executable", "run_plan", "plan(x)")
_SMALL = {i: i for i in range(8)}


def _leaf(v: int) -> Any:
    return _SMALL.get(v)


def _mid(v: int) -> Any:
    return _leaf(v)


def _top(v: int) -> Any:
    return _mid(v)


def _busy() -> Any:
    _top(1)
    _top(2)
    return _top(3)


def _arms(case: Case) -> tuple[dict[str, Callable[[], Any]], Any, Any]:
    src, dst = parse(case.src, MESH), parse(case.dst, MESH)
    x = jax.device_put(np.zeros(src.shape, np.float32), NamedSharding(MESH.to_jax(), to_partition_spec(src)))
    plan = redist.redistribute(src, dst)
    exe = _executable(plan, x.sharding, x.shape, x.dtype)
    plan(x).block_until_ready()  # compiles nothing new: plan(x) finds the same Compiled
    cpp = exe._call  # type: ignore[attr-defined]  # set by the first call
    return {"executable": lambda: exe(x), "executable (A/A)": lambda: exe(x), "executable._call": lambda: cpp(x),
            "busy + executable": lambda: (_busy(), exe(x))[1], "run_plan": lambda: run_plan(plan, x),
            "plan(x)": lambda: plan(x)}, plan, x


def measure(case: Case, reps: int) -> dict[str, float]:
    """Median dispatch seconds of each arm over ``reps`` balanced rounds (whole periods)."""
    arms, _, _ = _arms(case)
    for f in arms.values():
        f().block_until_ready()
    times: dict[str, list[int]] = {n: [] for n in ARMS}
    for order in schedule(len(ARMS), reps, whole_periods=True):
        for name in (ARMS[j] for j in order):
            t0 = time.perf_counter_ns()
            y = arms[name]()
            t1 = time.perf_counter_ns()
            y.block_until_ready()
            del y
            times[name].append(t1 - t0)
    return {n: statistics.median(v) / 1e9 for n, v in times.items()}


def python_calls(case: Case, calls: int = 10) -> int:
    """Function calls (Python and built-in, as ``cProfile`` counts them) one warm ``plan(x)``
    makes beyond ``executable``'s."""
    arms, _, _ = _arms(case)

    def count(f: Callable[[], Any]) -> int:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            f().block_until_ready()
        prof.disable()
        return int(pstats.Stats(prof).total_calls)  # type: ignore[attr-defined]

    return (count(arms["plan(x)"]) - count(arms["executable"])) // calls


def report(cases: Sequence[Case], rows: Sequence[dict[str, float]], calls: Sequence[int], command: str,
           reps: int, load: tuple[float, float], wall_s: float) -> str:
    out = header("Where plan(x)'s time over its executable goes", command, load, wall_s, f"{reps} rounds a case")
    us = [f"{a} us" for a in ARMS]
    table = [[c.name, *(f"{r[a] * 1e6:.1f}" for a in ARMS), *(f"{(r[a] - r['executable']) * 1e6:+.1f}" for a in ARMS[1:]),
              str(k)] for c, r, k in zip(cases, rows, calls)]
    out += md_table(["case", *us, *(f"{a} - executable us" for a in ARMS[1:]), "function calls plan(x) adds (cProfile)"], table)
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("studies.per_call_path", __doc__, reps=(3000, "balanced rounds per case (each arm once a round)"))
    ap.add_argument("--cases", nargs="*", default=None, help=f"case names (default: all of {[c.name for c in CASES]})")
    args = ap.parse_args(argv)
    chosen = [c for c in CASES if args.cases is None or c.name in args.cases]
    if not chosen:
        ap.error(f"--cases must name some of {[c.name for c in CASES]}")
    clock = Clock()
    rows = [measure(c, args.reps) for c in chosen]
    calls = [python_calls(c) for c in chosen]
    print(report(chosen, rows, calls, command_line("studies.per_call_path", argv), args.reps, clock.load, clock.wall_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
