"""``redist tune MOVES_FILE --mesh x=2,y=4``: autotune a list of moves ahead of time into a cache file.

Each move is timed once on this machine's devices (``redist.autotune``: the planner's best plans,
interleaved) and its winner recorded in the cache (``--cache``, default ``REDIST_AUTOTUNE_CACHE``
or ``redist-autotune.json``); a move already there with the same settings is not timed again.
Programs run with ``REDIST_AUTOTUNE_CACHE`` set to the file then plan those moves untimed.
MOVES_FILE has one move a line, ``SRC DST`` or ``SRC -> DST`` in type text; ``#`` starts a comment.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

DEFAULT_CACHE = "redist-autotune.json"


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("tune", help="time the planner's best plans for a list of moves once; keep the winners "
                                    "in a cache file every later process plans from")
    p.add_argument("moves", metavar="MOVES_FILE", help="one move a line: SRC DST (or SRC -> DST); # comments")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--cache", default=None,
                   help=f"the cache file (default: $REDIST_AUTOTUNE_CACHE, else {DEFAULT_CACHE})")
    p.add_argument("--objective", choices=("measured", "bytes", "alpha-beta"), default="measured",
                   help="whose candidates are timed: measured (redistribute's default), bytes (candidates "
                        "that all receive the least bytes) or alpha-beta; a later redistribute reads the "
                        "entry under the same objective")
    p.add_argument("--top", type=int, default=4, help="plans timed per move (redist.autotune's top)")
    p.add_argument("--reps", type=int, default=25, help="interleaved calls per plan")
    p.add_argument("--margin", type=float, default=0.1,
                   help="how much faster than the model's choice another plan must measure to be kept")
    p.add_argument("--devices", type=int, default=8, help="simulated CPU devices when JAX runs on CPU")
    handlers["tune"] = run_tune


def read_moves(path: str) -> list[tuple[int, str, str]]:
    """(line number, source text, destination text) of every move in ``path``."""
    from redist.errors import RedistError

    moves = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            body = line.split("#", 1)[0].replace("->", " ").split()
            if not body:
                continue
            if len(body) != 2:
                raise RedistError(f"{path}:{n}: a move is two types, SRC DST (or SRC -> DST), got {line.strip()!r}")
            moves.append((n, body[0], body[1]))
    if not moves:
        raise RedistError(f"{path}: no moves in the file; write one a line, e.g. f32[64@x,8] f32[64,8@x]")
    return moves


def run_tune(args: argparse.Namespace) -> int:
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
    from redist import autotune, cost_model_for
    from redist.errors import RedistError
    from redist.tune_cache import ENV, lookup
    from spmd_types import Mesh, ShardingTypeError, parse

    mesh = Mesh.parse(args.mesh)
    cache = args.cache or os.environ.get(ENV) or DEFAULT_CACHE
    cm = cost_model_for(args.objective, mesh)
    moves = []
    for n, s, d in read_moves(args.moves):
        try:
            moves.append((parse(s, mesh), parse(d, mesh)))
        except ShardingTypeError as e:
            raise RedistError(f"{args.moves}:{n}: {type(e).__name__}: {e}") from e
    for src, dst in moves:
        before = lookup(cache, src, dst, cm)
        t0 = time.perf_counter()
        tuned = autotune(src, dst, cost_model=cm, top=args.top, reps=args.reps, margin=args.margin, cache=cache)
        secs = time.perf_counter() - t0
        print(f"{src} -> {dst}: {_outcome(tuned)}" + (
            " (from the cache, not timed)" if before is not None and _same(before.entry, args) else
            f" (timed {len(tuned.trials)} plans in {secs:.1f} s)"))
    print(f"{len(moves)} moves in {cache}; plan from it with {ENV}={os.path.abspath(cache)}")
    return 0


def _same(entry: Any, args: argparse.Namespace) -> bool:
    return bool((entry.top, entry.reps, entry.margin) == (args.top, args.reps, args.margin))


def _outcome(tuned: Any) -> str:
    def name(plan: Any) -> str:
        return " + ".join(s.kind.replace("_", "-") for s in plan.steps) or "(nothing to do)"

    if tuned.plan is tuned.model_choice.plan:
        return f"the model's choice kept, {name(tuned.plan)}"
    return f"{name(tuned.plan)}, {tuned.speedup:.2f}x faster than the model's choice {name(tuned.model_choice.plan)}"
