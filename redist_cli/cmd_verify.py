"""``redist verify`` and ``redist budget``: z3 certificates of a plan (tracker issue 4).

``redist verify SRC DST --mesh x=2,y=4`` plans the move and proves, for every global shape the types
allow, that the steps take SRC to DST, that no intermediate exceeds ``max(src, dst)`` local bytes,
and that the plan receives no more than the transfer lower bound. Exit status 0 when certified,
1 with the violated property and a concrete counterexample otherwise.

``redist budget SRC DST --mesh x=2,y=4 --bytes 1e9 [--max-shape 4096,4096]`` proves that the plan
fits in the given per-device memory for every shape up to ``--max-shape`` (default: the types'
own shape), or prints the shape that does not fit.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("verify", help="prove a plan correct, memory-bounded and transfer-optimal with z3")
    p.add_argument("src", help="source type, e.g. 'f32[512@(x,y),128]'")
    p.add_argument("dst", help="destination type, e.g. 'f32[512,128@(y,x)]'")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--timeout-ms", type=int, default=20_000, help="z3 timeout per query (default 20000)")
    p.add_argument("--strict-recv", action="store_true",
                   help="fail also where the types share an unreduced axis (bound known not tight)")
    handlers["verify"] = run_verify

    b = sub.add_parser("budget", help="prove or refute that a plan fits a per-device memory budget")
    b.add_argument("src")
    b.add_argument("dst")
    b.add_argument("--mesh", required=True)
    b.add_argument("--bytes", required=True, type=float, help="per-device memory budget in bytes, e.g. 16e9")
    b.add_argument("--max-shape", default=None,
                   help="largest global shape to consider, e.g. 4096,4096 ('*' = unbounded); default the types' shape")
    b.add_argument("--transient", action="store_true", help="count a step's input and output as live together")
    handlers["budget"] = run_budget


def _plan(args: argparse.Namespace) -> Any:
    from redist import redistribute
    from spmd_types import Mesh

    return redistribute(args.src, args.dst, Mesh.parse(args.mesh))


def run_verify(args: argparse.Namespace) -> int:
    import proofs

    plan = _plan(args)
    print(plan)
    try:
        cert = proofs.verify_plan(plan, timeout_ms=args.timeout_ms, strict_recv=args.strict_recv)
    except proofs.VerificationError as e:
        print(f"NOT CERTIFIED: {e}", file=sys.stderr)
        return 1
    print(cert)
    return 0 if cert.ok else 1


def run_budget(args: argparse.Namespace) -> int:
    import proofs

    plan = _plan(args)
    max_shape = None
    if args.max_shape:
        max_shape = [None if x.strip() == "*" else int(x) for x in args.max_shape.split(",")]
    r = proofs.check_budget(plan, int(args.bytes), max_shape=max_shape, transient=args.transient)
    print(r)
    return 0 if r.fits else 1
