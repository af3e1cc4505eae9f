"""``redist bench-plan``: the synthesizer's planning time and its gap to the exhaustive search
(``benchmarks.planning``, run from the source checkout)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

OBJECTIVES = ("bytes", "time", "measured", "gloo")
"""``benchmarks.planning.LADDER_OBJECTIVES``, spelled here so ``redist --help`` imports no planner
(a test keeps the two equal)."""


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("bench-plan", help="planning time (cold cache) and optimality gap to the search")
    p.add_argument("--pairs", type=int, default=500, help="random pairs timed on a 16-device mesh (default 500)")
    p.add_argument("--seed", type=int, default=0, help="random-pair seed")
    p.add_argument("--gap-pairs", type=int, default=150,
                   help="pairs per small mesh compared with the exhaustive search (default 150)")
    p.add_argument("--ladder", type=int, default=0, metavar="N",
                   help="instead: the large-mesh ladder (256 to 65,536 devices), N random pairs per rung")
    p.add_argument("--objective", choices=OBJECTIVES, default="bytes",
                   help="with --ladder, the cost model plans are ranked by: bytes (the transfer bound), "
                        "time (the unmeasured alpha-beta model: the default where no profile ships), "
                        "measured (the shipped CPU profile: the default on CPU) or gloo (the shipped "
                        "cross-process profile, hosts of 8 devices: the default across processes)")
    handlers["bench-plan"] = _run


def _run(args: argparse.Namespace) -> int:
    """The planning benchmark lives in the source checkout (``redist_cli.checkout``)."""
    from redist_cli.checkout import run_benchmark

    counts = {"--pairs": args.pairs, "--gap-pairs": args.gap_pairs, "--ladder": args.ladder}
    bad = next((f"{k} {v}" for k, v in counts.items() if v < (1 if k == "--pairs" and not args.ladder else 0)), None)
    if bad:
        print(f"error: {bad}: give a count of random pairs ({'>= 1' if bad.startswith('--pairs') else '>= 0'})",
              file=sys.stderr)
        return 2
    call = f"main({args.pairs!r}, {args.seed!r}, {args.gap_pairs!r}, {args.ladder!r}, {args.objective!r})"
    return run_benchmark(["-c", f"from benchmarks.planning import main; print({call})"], "redist bench-plan")
