"""Two plans of one move timed against each other across processes over Gloo, each given by its steps.

Why: a planner change that alters some plans is judged on the clock, not on the model that made
it. The plans before and after are written down by their steps (a JSON file: the old planner is
not needed to rerun the timing), built here with ``Plan.build``, compiled once each, and timed
paired by ``benchmarks.multiprocess``'s ``Timer`` (barrier, spans, ``balanced_order``). Results
are checked on every process where the destination holds no pending sums (one process's blocks
cannot check a pending sum; the suite checks such plans on the simulator). Plans are priced as
``benchmarks.multiprocess`` prices them: under the running processes' own profile
(``redist.profile.default_cost_model``: ``cpu-gloo-4`` on 4 processes), cross costs on the axes
that span processes. XLA runs with
``benchmarks.multiprocess``'s flags by default (single-threaded Eigen kernels), so the two tools
time alike; ``--xla-flags ''`` gives XLA's defaults, under which the committed runs of
``2026-11-25-multiprocess-gloo-pending.md`` were made.

The file is a list of objects ``{"mesh": {"x": 2, ...}, "src": TYPE, "dst": TYPE, "a": STEPS,
"b": STEPS}``, ``STEPS`` a step tuple as ``repr`` prints it (``parse_steps``). The whole file is
read and checked before any process starts (``load_moves``: a ``RedistError`` names the entry and
what is wrong with it; meshes have the 8 devices the processes hold, and both plans must reach the
destination). Ratios are ``a / b``: above 1,
``b`` is faster.

Command: ``python -m benchmarks.studies.plan_ab benchmarks/studies/results/2026-11-25-gloo-rounds-rule-plans.json``
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from benchmarks.harness import suite_parser, thunk
from benchmarks.multiprocess import DEVICES, Timer
from benchmarks.steps_text import parse_steps
from redist.cost import CostModel
from redist.errors import RedistError, StepError
from redist.launch import EIGEN_SINGLE, init_distributed, spawn_local, without_gloo_logs
from redist.plan import Plan
from redist.profile import packaged_profile, process_crossing_axes
from spmd_types import Mesh, ShardingType, parse
from spmd_types.errors import ShardingTypeError


class Move(NamedTuple):
    """One entry of the file: a move, its two plans (built under the loader's cost model) and
    their steps as written."""

    mesh: Mesh
    src: ShardingType
    dst: ShardingType
    plans: dict[str, Plan]
    text: dict[str, str]


_KEYS = ("mesh", "src", "dst", "a", "b")


def load_moves(path: str, cost_model: Callable[[Mesh], CostModel]) -> list[Move]:
    """The file's moves, each plan built and checked to reach the destination: a ``RedistError``
    (or the type parser's own typed error) names the entry and what is wrong, never a bare
    ``KeyError`` or ``JSONDecodeError`` from inside."""
    try:
        with open(path) as f:
            entries = json.load(f)
    except OSError as e:
        raise RedistError(f"plans file {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise RedistError(f"plans file {path!r} is not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(entries, list) or not entries:
        raise RedistError(f"plans file {path!r}: expected a non-empty list of moves, got {type(entries).__name__}")
    return [_move(n, e, path, cost_model) for n, e in enumerate(entries)]


def _move(n: int, entry: Any, path: str, cost_model: Callable[[Mesh], CostModel]) -> Move:
    where = f"plans file {path!r}, move {n}"
    if not isinstance(entry, dict) or set(entry) < set(_KEYS):
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise RedistError(f"{where}: expected an object with keys {', '.join(_KEYS)}; got {got}")
    if not isinstance(entry["mesh"], dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in entry["mesh"].items()):
        raise RedistError(f"{where}: 'mesh' must map axis names to sizes, like {{\"x\": 2, \"y\": 4}}; "
                          f"got {entry['mesh']!r}")
    for k in _KEYS[1:]:
        if not isinstance(entry[k], str):
            raise RedistError(f"{where}: {k!r} must be a string, got {entry[k]!r}")
    try:
        mesh = Mesh(entry["mesh"])
        src, dst = parse(entry["src"], mesh), parse(entry["dst"], mesh)
    except ShardingTypeError as e:
        raise RedistError(f"{where}: {e}") from None
    if mesh.size != DEVICES:
        raise RedistError(f"{where}: mesh {mesh} has {mesh.size} devices; the processes hold {DEVICES} in all, "
                          f"and every process must hold part of the mesh: give a mesh of {DEVICES} devices")
    cm = cost_model(mesh)
    plans = {}
    for k in ("a", "b"):
        try:
            plans[k] = Plan.build(src, parse_steps(entry[k]), cm)
        except StepError as e:
            raise RedistError(f"{where}: plan {k!r} does not type-check from {src}: {e}") from None
        if plans[k].dst != dst:
            raise RedistError(f"{where}: plan {k!r} ends at {plans[k].dst}, not the destination {dst}")
    return Move(mesh, src, dst, plans, {k: entry[k] for k in ("a", "b")})


def gloo_cost_model(mesh: Mesh, crossing: bool = True) -> CostModel:
    """The shipped 2-process Gloo profile, cross costs on the axes that span processes (that reads
    the running devices), or, without ``crossing``, on every axis: for checking a file before the
    processes start. The workers price under their own runtime's profile instead."""
    gloo = packaged_profile("cpu-gloo")
    assert gloo is not None, "the Gloo profile ships with the package"
    return gloo.cost_model("measured", process_crossing_axes(mesh) if crossing else None)


def _worker(index: int, processes: int, port: int, path: str, reps: int, seconds: float) -> int:
    init_distributed(index, processes, f"127.0.0.1:{port}")
    import jax

    from benchmarks.paired import paired_ratio
    from redist.arrays import check_output, make_input
    from redist.executor import compile_plan
    from redist.profile import default_cost_model

    timer = Timer(index, processes)
    for n, move in enumerate(load_moves(path, default_cost_model)):  # as benchmarks.multiprocess prices
        jm = move.mesh.to_jax()
        x, total = make_input(move.src, jm)
        progs = {k: compile_plan(p, jm).lower(x).compile() for k, p in move.plans.items()}
        checked = "pending sums, checked on the simulator" if move.dst.unreduced else (
            "OK" if all(check_output(p(x), total, move.dst) is None for p in progs.values()) else "WRONG")
        t = timer.run(f"plan-ab-{n}", {k: thunk(v, x) for k, v in progs.items()}, reps, 5, seconds)
        if index == 0:
            r = paired_ratio(t["a"], t["b"])
            med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
            print(f"{move.src} -> {move.dst} on {move.mesh}: {checked}\n"
                  + "".join(f"  {k} {move.text[k]} priced {move.plans[k].time_s * 1e3:.3f} ms, measured {med[k]:.3f} ms\n"
                            for k in ("a", "b"))
                  + f"  a/b {r.median:.2f}x ({r.lo:.2f}-{r.hi:.2f}), reps {len(t['a'])}", flush=True)
    jax.distributed.shutdown()
    return 0


_OUR_LINE = re.compile(r"^(\S.* -> .* on \{.*|  (a|b|a/b) .*)$", re.M)


def main(argv: Sequence[str] | None = None) -> int:
    ap = suite_parser("studies.plan_ab", __doc__)
    ap.add_argument("plans", help="JSON file of moves and their two plans (see the module docstring)")
    ap.add_argument("--processes", type=int, default=2, help="processes of 8 / PROCESSES devices each")
    ap.add_argument("--reps", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=6.0, help="after --reps, more repetitions until this long")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--xla-flags", default=EIGEN_SINGLE,
                    help=f"XLA flags for every process (default {EIGEN_SINGLE!r}, as benchmarks.multiprocess; "
                         "'' for XLA's defaults)")
    ap.add_argument("--worker", nargs=2, type=int, metavar=("INDEX", "PORT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a.worker[0], a.processes, a.worker[1], a.plans, a.reps, a.seconds)
    if not 1 <= a.processes <= DEVICES or DEVICES % a.processes:
        print(f"error: --processes {a.processes} does not split {DEVICES} devices evenly; use 1, 2, 4 or 8",
              file=sys.stderr)
        return 2
    try:
        load_moves(a.plans, lambda mesh: gloo_cost_model(mesh, crossing=False))  # checked before any process starts
    except RedistError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Command: python -m benchmarks.studies.plan_ab {a.plans} --processes {a.processes} --reps {a.reps} "
          f"--seconds {a.seconds} --xla-flags={a.xla_flags!r}", flush=True)
    runs = spawn_local(a.processes, DEVICES // a.processes,
                       lambda i, port: ["-m", "benchmarks.studies.plan_ab", a.plans, "--processes", str(a.processes),
                                        "--reps", str(a.reps), "--seconds", str(a.seconds),
                                        "--worker", str(i), str(port)], a.timeout, a.xla_flags)
    print("\n".join(m.group(0) for m in _OUR_LINE.finditer(without_gloo_logs(runs[0].stdout))))
    failed = [(i, r) for i, r in enumerate(runs) if r.returncode]
    for i, r in failed:
        print(f"process {i} exited {r.returncode}:\n{r.stderr[-3000:]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
