"""``redist bench-plan``: the synthesizer's planning time and its gap to the exhaustive search
(``benchmarks.planning``, run from the source checkout)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

OBJECTIVES = ("measured", "bytes", "alpha-beta")
"""``redist.Objective``'s names, spelled here so ``redist --help`` imports no planner (a test keeps
them equal)."""

PROFILES = ("cpu", "cpu-gloo")
"""``benchmarks.planning.LADDER_PROFILES`` (a test keeps the two equal)."""


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("bench-plan", help="planning time (cold cache) and optimality gap to the search")
    p.add_argument("--pairs", type=int, default=500, help="random pairs timed on a 16-device mesh (default 500)")
    p.add_argument("--seed", type=int, default=0, help="random-pair seed")
    p.add_argument("--gap-pairs", type=int, default=150,
                   help="pairs per small mesh compared with the exhaustive search (default 150)")
    p.add_argument("--ladder", type=int, default=0, metavar="N",
                   help="instead: the large-mesh ladder (256 to 65,536 devices), N random pairs per rung")
    p.add_argument("--objective", choices=OBJECTIVES, default="bytes",
                   help="with --ladder, what plans are ranked by: bytes (least received bytes, the transfer "
                        "bound first; the default here), alpha-beta (least time under the unmeasured alpha-beta "
                        "model) or measured (least time under a shipped measured profile, see --profile)")
    p.add_argument("--profile", choices=PROFILES, default="cpu",
                   help="with --objective measured, the shipped profile: cpu (one process, the default) or "
                        "cpu-gloo (across processes, hosts of 8 devices)")
    handlers["bench-plan"] = _run


def _bad_count(args: argparse.Namespace) -> str | None:
    """A one-line message for a count the benchmark cannot run with."""
    if not args.ladder and args.pairs < 5:
        return f"--pairs {args.pairs}: give at least 5 random pairs (a fifth of them start from pending sums)"
    for flag, value in (("--gap-pairs", args.gap_pairs), ("--ladder", args.ladder)):
        if value < 0:
            return f"{flag} {value}: give a count of random pairs (>= 0)"
    return None


def _run(args: argparse.Namespace) -> int:
    """The planning benchmark lives in the source checkout (``redist_cli.checkout``)."""
    from redist_cli.checkout import run_benchmark

    problem = _bad_count(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    call = (f"main({args.pairs!r}, {args.seed!r}, {args.gap_pairs!r}, {args.ladder!r}, "
            f"ladder_model({args.objective!r}, {args.profile!r}))")
    return run_benchmark(["-c", f"from benchmarks.planning import ladder_model, main; print({call})"],
                         "redist bench-plan")
