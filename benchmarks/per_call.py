"""Per-call cost of the eager entry points: ``redist.reshard`` against ``jax.sharding.reshard``,
and ``plan(x)`` against calling the same compiled executable directly.

``python -m benchmarks.per_call [--reps N] [--out DIR]``. For each small case (arrays of a few
KiB, where the Python side of a call matters most) five callables run on the same input,
interleaved in a balanced order (``redist.timing.schedule``: each after each other equally
often), one call each per round, ``--reps`` rounds rounded up to whole periods:

- ``jax``: ``jax.sharding.reshard(x, dst)``, and ``jax (A/A)``: the same again, the control (the
  difference between the two is the noise floor of the table);
- ``redist.reshard``: ``redist.reshard(x, dst)`` (the cached eager fast path);
- ``plan(x)``: the plan called on the array;
- ``executable``: the compiled executable ``plan(x)`` runs (``redist.executor._executable``),
  called directly as a user calls it (``Compiled.__call__``; ``plan(x)`` calls the C++ function
  that forwards to), and ``executable (A/A)``: the same again, the control for the
  ``plan(x) - executable`` column. ``benchmarks.studies.per_call_path`` takes that column apart.

A third table times the Python side of our two entry points alone (``python_side``), which is
what the fast paths remove and what the wall-clock tables can only bound on a shared machine.

Two medians per callable: **dispatch** (the call returning: the Python and launch cost a step pays
before the next op can be issued) and **call+wait** (the call and ``block_until_ready``). Where our
program and XLA's are the same collective (the cases marked "same program"), the difference
between ``redist.reshard`` and ``jax`` is per-call overhead alone; elsewhere it also holds the
programs' run time. The figures are wall clock on the machine at hand (no timed test asserts them).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

import redist  # noqa: E402
from benchmarks.harness import Clock, command_line, header, suite_parser, write_results  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from redist.executor import _executable  # noqa: E402
from redist.hlo import parse_collectives  # noqa: E402
from redist.timing import schedule  # noqa: E402
from spmd_types import Mesh, parse  # noqa: E402
from spmd_types.jax_interop import to_partition_spec  # noqa: E402


class Case(NamedTuple):
    name: str
    src: str
    dst: str


CASES = (
    Case("device_permute", "f32[256@(x,y)]", "f32[256@(y,x)]"),
    Case("gather", "f32[64@x,64]", "f32[64,64]"),
    Case("all_to_all", "f32[64@x,64]", "f32[64,64@x]"),
    Case("transpose_2d", "f32[64@x,64@y]", "f32[64@y,64@x]"),
)
MESH = Mesh({"x": 2, "y": 4})
ARMS = ("jax", "jax (A/A)", "redist.reshard", "plan(x)", "executable", "executable (A/A)")


class Row(NamedTuple):
    case: Case
    same_program: bool
    dispatch_s: dict[str, float]
    total_s: dict[str, float]


def _callables(case: Case) -> tuple[dict[str, Callable[[], Any]], bool]:
    src, dst = parse(case.src, MESH), parse(case.dst, MESH)
    jmesh = MESH.to_jax()
    x = jax.device_put(np.arange(int(np.prod(src.shape)), dtype=np.float32).reshape(src.shape),
                       NamedSharding(jmesh, to_partition_spec(src)))
    ns = NamedSharding(jmesh, to_partition_spec(dst))
    plan = redist.redistribute(src, dst)
    exe = _executable(plan, x.sharding, x.shape, x.dtype)
    theirs = jax.jit(lambda a: jax.sharding.reshard(a, ns)).lower(x).compile().as_text() or ""
    ours = jax.jit(lambda a: redist.reshard(a, ns)).lower(x).compile().as_text() or ""
    same = parse_collectives(theirs).kinds() == parse_collectives(ours).kinds()
    fns = {"jax": lambda: jax.sharding.reshard(x, ns), "jax (A/A)": lambda: jax.sharding.reshard(x, ns),
           "redist.reshard": lambda: redist.reshard(x, ns), "plan(x)": lambda: plan(x), "executable": lambda: exe(x),
           "executable (A/A)": lambda: exe(x)}
    return fns, same


def measure(case: Case, reps: int) -> Row:
    fns, same = _callables(case)
    names = list(fns)
    for f in fns.values():  # compile and warm every path
        for _ in range(3):
            f().block_until_ready()
    dispatch: dict[str, list[float]] = {n: [] for n in names}
    total: dict[str, list[float]] = {n: [] for n in names}
    for order in schedule(len(names), reps, whole_periods=True):
        for n in (names[j] for j in order):
            t0 = time.perf_counter()
            y = fns[n]()
            t1 = time.perf_counter()
            y.block_until_ready()
            t2 = time.perf_counter()
            dispatch[n].append(t1 - t0)
            total[n].append(t2 - t0)
    med = statistics.median
    return Row(case, same, {n: med(v) for n, v in dispatch.items()}, {n: med(v) for n, v in total.items()})


def python_side(case: Case, number: int = 2000) -> dict[str, float]:
    """Seconds a call of each of our entry points spends in Python: the same calls with the
    executables they find swapped for the identity (best of 5 runs of ``number`` calls), so the
    figure is free of the program's run time and of the machine's noise around it."""
    import redist.executor as ex
    import redist.jax_reshard as jr

    src, dst = parse(case.src, MESH), parse(case.dst, MESH)
    jmesh = MESH.to_jax()
    x = jax.device_put(np.zeros(src.shape, np.float32), NamedSharding(jmesh, to_partition_spec(src)))
    ns = NamedSharding(jmesh, to_partition_spec(dst))
    plan = redist.redistribute(src, dst)
    real_ex, real_jr = ex._executable, jr._executable
    ex._executable = jr._executable = lambda *a: (lambda v: v)
    redist.clear_caches("all")  # no entry may hold a real executable
    try:
        calls = {"redist.reshard": lambda: redist.reshard(x, ns), "plan(x)": lambda: plan(x)}
        for f in calls.values():
            f()
        return {n: min(timeit.repeat(f, number=number, repeat=5)) / number for n, f in calls.items()}
    finally:
        ex._executable, jr._executable = real_ex, real_jr
        redist.clear_caches("all")  # nor an identity, once the real executables are back


def _us(s: float) -> str:
    return f"{s * 1e6:.1f}"


def report(rows: Sequence[Row], python: Sequence[dict[str, float]], command: str, reps: int,
           load: tuple[float, float], wall_s: float) -> str:
    head = ["case", "move", "same program", *(f"{a} us" for a in ARMS),
            "reshard - jax us", "jax A/A us", "plan(x) - executable us", "executable A/A us"]
    out = header("Per-call cost of the eager entry points", command, load, wall_s, f"{reps} rounds a case")
    for what, of in (("Dispatch (the call returning), medians", lambda r: r.dispatch_s),
                     ("Call and wait (`block_until_ready`), medians", lambda r: r.total_s)):
        out += [f"## {what}", ""]
        table = []
        for r in rows:
            m = of(r)
            table.append([r.case.name, f"`{r.case.src} -> {r.case.dst}`", "yes" if r.same_program else "no",
                          *(_us(m[a]) for a in ARMS), _us(m["redist.reshard"] - m["jax"]),
                          _us(m["jax (A/A)"] - m["jax"]), _us(m["plan(x)"] - m["executable"]),
                          _us(m["executable (A/A)"] - m["executable"])])
        out += md_table(head, table) + [""]
    out += ["## The Python side alone (executables swapped for the identity; best of 5 x 2000 calls)", ""]
    out += md_table(["case", "redist.reshard us", "plan(x) us"],
                    [[r.case.name, _us(p["redist.reshard"]), _us(p["plan(x)"])] for r, p in zip(rows, python)])
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("per_call", __doc__, out="directory for <date>-per-call.md",
                      reps=(2000, "interleaved rounds per case (each callable once a round)"))
    ap.add_argument("--cases", nargs="*", default=None, help=f"case names (default: all of {[c.name for c in CASES]})")
    args = ap.parse_args(argv)
    command = command_line("per_call", argv)
    chosen = [c for c in CASES if args.cases is None or c.name in args.cases]
    if not chosen:
        ap.error(f"--cases must name some of {[c.name for c in CASES]}")
    clock, rows = Clock(), []
    for c in chosen:
        rows.append(measure(c, args.reps))
        print(f"{c.name:16s} done", file=sys.stderr, flush=True)
    python = [python_side(c) for c in chosen]
    text = report(rows, python, command, args.reps, clock.load, clock.wall_s)
    print(text)
    if args.out:
        write_results(args.out, "per-call", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
