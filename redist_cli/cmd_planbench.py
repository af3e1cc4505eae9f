"""``redist bench-plan``: the synthesizer's planning time and its gap to the exhaustive search."""

from __future__ import annotations

import argparse
from typing import Any

OBJECTIVES = ("measured", "bytes", "alpha-beta")
"""``redist.Objective``'s names, spelled here so ``redist --help`` imports no planner (a test keeps
them equal)."""

PROFILES = ("cpu", "cpu-gloo")
"""``benchmarks.planning.LADDER_PROFILES`` (a test keeps the two equal)."""


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("bench-plan", help="planning time (cold cache) and optimality gap to the search")
    p.add_argument("--pairs", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gap-pairs", type=int, default=150)
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


def _run(args: argparse.Namespace) -> int:
    from benchmarks.planning import ladder_model, main

    print(main(args.pairs, args.seed, args.gap_pairs, args.ladder, ladder_model(args.objective, args.profile)))
    return 0
