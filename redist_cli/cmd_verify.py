"""``redist verify`` and ``redist budget``: z3 certificates of a plan.

``redist verify SRC DST --mesh x=2,y=4 [--objective measured|bytes|alpha-beta]`` plans the move
under the objective and proves, for every global shape the types allow, that the steps take SRC
to DST (``chain``) and that no intermediate exceeds ``max(src, dst)`` local bytes (``memory``).
The transfer bound (``recv``: mean bytes received per device at most the lower bound) is checked
where the objective promises it (``bytes``) or with ``--check-recv``; elsewhere it is printed as
not checked, never as proved. Exit status 0 when every property checked is proved, 1 on a
refutation (with a concrete counterexample) or an undecided property.

``redist budget SRC DST --mesh x=2,y=4 --bytes 16GB [--max-shape 4096,4096]`` proves that the plan
fits in the given per-device memory for every shape up to ``--max-shape`` (default: the types'
own shape), or prints the shape that does not fit.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

OBJECTIVES = ("measured", "bytes", "alpha-beta")
"""``redist.Objective``'s names, spelled here so ``redist --help`` imports no planner."""

_VERIFY_HELP = ("plan a move and prove with z3, for every shape its types allow, that it is correct and within "
                "max(src, dst) local bytes; and, under --objective bytes or with --check-recv, that each device "
                "receives on average no more than the transfer lower bound")


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("verify", help=_VERIFY_HELP, description=_VERIFY_HELP + ". Exit status 0 when every "
                       "property checked is proved; properties not checked are listed as such.")
    p.add_argument("src", help="source type, e.g. 'f32[512@(x,y),128]'")
    p.add_argument("dst", help="destination type, e.g. 'f32[512,128@(y,x)]'")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--objective", choices=OBJECTIVES, default="measured",
                   help="what the plan is ranked by (default measured, as `redist plan`); the transfer bound "
                        "is checked by default only under bytes, the objective that promises it")
    p.add_argument("--check-recv", action="store_true",
                   help="also prove the transfer bound of a plan whose objective does not promise it "
                        "(exit 1 if the plan receives more)")
    p.add_argument("--strict-recv", action="store_true",
                   help="check the transfer bound and fail also where it is known not tight (types sharing "
                        "an unreduced axis, sub-axes off the mesh's prime factors), instead of reporting 'exceeds'")
    p.add_argument("--timeout-ms", type=positive_ms, default=20_000, help="z3 timeout per query (default 20000)")
    handlers["verify"] = run_verify

    b = sub.add_parser("budget", help="prove or refute that a plan fits a per-device memory budget")
    b.add_argument("src")
    b.add_argument("dst")
    b.add_argument("--mesh", required=True)
    b.add_argument("--objective", choices=OBJECTIVES, default="measured", help="what the plan is ranked by")
    b.add_argument("--bytes", required=True, type=budget_bytes,
                   help="per-device memory budget: bytes (16e9, 1073741824) or with a unit (16GB, 512MiB, 64KB)")
    b.add_argument("--max-shape", default=None, type=max_shape_arg,
                   help="largest global shape to consider, e.g. 4096,4096 ('*' = unbounded); default the types' shape")
    b.add_argument("--transient", action="store_true", help="count a step's input and output as live together")
    handlers["budget"] = run_budget


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}


def budget_bytes(text: str) -> int:
    """``--bytes``: a number of bytes, optionally with a decimal (KB, MB, GB, TB) or binary (KiB,
    MiB, GiB, TiB) unit; a whole positive number of bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count: give bytes (16e9) or a number with one of "
                                         f"B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (16GB, 512MiB)")
    n = float(m.group(1)) * _UNITS[unit]
    if n < 1 or n != int(n):
        raise argparse.ArgumentTypeError(f"{text!r} is {n:g} bytes: the budget must be a whole number of bytes >= 1")
    return int(n)


def positive_ms(text: str) -> int:
    """``--timeout-ms``: a whole number of milliseconds >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of milliseconds >= 1")
    return int(text)


def max_shape_arg(text: str) -> list[int | None]:
    """``--max-shape``: comma-separated sizes >= 1, ``*`` for unbounded."""
    out: list[int | None] = []
    for x in text.split(","):
        x = x.strip()
        if x == "*":
            out.append(None)
        elif x.isdigit() and int(x) >= 1:
            out.append(int(x))
        else:
            raise argparse.ArgumentTypeError(f"{text!r}: each size must be a whole number >= 1 or '*' (unbounded), "
                                             f"e.g. 4096,4096 or *,4096")
    return out


def _plan(args: argparse.Namespace) -> Any:
    from redist import redistribute
    from spmd_types import Mesh

    return redistribute(args.src, args.dst, Mesh.parse(args.mesh), objective=args.objective)


def run_verify(args: argparse.Namespace) -> int:
    import proofs

    plan = _plan(args)
    print(plan)
    check_recv = True if (args.check_recv or args.strict_recv) else None
    try:
        cert = proofs.verify_plan(plan, timeout_ms=args.timeout_ms, check_recv=check_recv, strict_recv=args.strict_recv)
    except proofs.VerificationError as e:
        print(f"NOT CERTIFIED: {e}", file=sys.stderr)
        return 1
    print(cert)
    return 0 if cert.ok else 1


def run_budget(args: argparse.Namespace) -> int:
    import proofs

    plan = _plan(args)
    r = proofs.check_budget(plan, args.bytes, max_shape=args.max_shape, transient=args.transient)
    print(r)
    return 0 if r.fits else 1
