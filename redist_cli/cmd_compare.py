"""``redist compare SRC DST --mesh M``: ours and XLA's compiled programs for one move, side by side.

For each of our plan, ``jax.sharding.reshard`` under ``jit`` and ``jit(identity, out_shardings=dst)``
(``redist.compare``): the collectives read from the compiled HLO (kinds, replica groups, bytes),
bytes received per device, peak and temporary memory, whether the values are right, and the median
of interleaved timed runs, with the number of rounds printed. Runs on the mesh's devices, simulated
CPU devices by default.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("compare", help="our plan and XLA's compiled programs for one move, side by side")
    p.add_argument("src", help="source type, e.g. 'f32[2048@x,2048@y]'")
    p.add_argument("dst", help="destination type, e.g. 'f32[2048@y,2048@x]'")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--reps", type=int, default=20, help="timed rounds, each running every program once (default 20)")
    handlers["compare"] = run_compare


def run_compare(args: argparse.Namespace) -> int:
    from spmd_types import Mesh, parse

    mesh = Mesh.parse(args.mesh)
    parse(args.src, mesh), parse(args.dst, mesh)  # a typing error is reported before JAX starts
    if args.reps < 1:
        print(f"error: --reps {args.reps}: give at least 1 timed round", file=sys.stderr)
        return 2
    from redist_cli import devices

    problem = devices.ensure(mesh.size, "redist compare")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from redist.compare import compare
    from redist_cli.ui import console

    con = console()
    with console(stderr=True).status("compiling, checking and timing ours and XLA's programs"):
        result = compare(args.src, args.dst, mesh, reps=args.reps)
    plan = result.plan
    con.print(f"[bold]{plan.src}[/bold] -> [bold]{plan.dst}[/bold] on mesh {mesh}, {mesh.size} "
              f"{_device_kind()} devices")
    con.print(_table(result))
    con.print()
    for side in result.sides:
        con.print(_collectives(side))
        con.print()
    if len(result.sides) < 3:
        con.print("XLA reshard: not run; jax.sharding.reshard aborts the process on a move whose source and "
                  "destination both hold pending sums over axes the other lacks (a Shardy CHECK failure)")
    count = {2: "two", 3: "three"}[len(result.sides)]
    con.print(f"time: median of {result.reps} interleaved rounds (each runs the {count} programs once, "
              f"in rotating order); received bytes are read from the compiled HLO; "
              f"transfer lower bound {_kib(plan.lower_bound_bytes)} per device (mean)")
    wrong = [s.name for s in result.sides if s.values is not None]
    return 1 if wrong else 0


def _device_kind() -> str:
    import jax

    return jax.devices()[0].platform.upper()


def _kib(v: float | None) -> str:
    from redist.render import fmt_bytes

    return "data-dependent" if v is None else fmt_bytes(v)


def _kinds(side: Any) -> str:
    from collections import Counter

    kinds = Counter(side.collectives.kinds())
    return " + ".join(f"{n}x {k}" if n > 1 else k for k, n in kinds.items()) or "(none)"


def _table(result: Any) -> Any:
    from rich.table import Table

    from redist.render import fmt_bytes, fmt_time

    table = Table(show_edge=False, pad_edge=False)
    table.add_column("", no_wrap=True)
    for side in result.sides:
        table.add_column(side.name, justify="right")
    rows = [
        ("collectives", [_kinds(s) for s in result.sides]),
        ("received per device (mean)", [_kib(s.recv_bytes) for s in result.sides]),
        ("received (busiest device)", [_kib(s.busiest_recv_bytes) for s in result.sides]),
        ("peak memory per device", [fmt_bytes(s.memory.peak_bytes) for s in result.sides]),
        ("temporary memory per device", [fmt_bytes(s.memory.temp_bytes) for s in result.sides]),
        ("median time", [fmt_time(s.median_s) for s in result.sides]),
        ("values", ["OK" if s.values is None else f"[red]WRONG[/red]: {s.values}" for s in result.sides]),
    ]
    if any(s.remat for s in result.sides):
        rows.append(("full rematerialization", ["yes" if s.remat else "no" for s in result.sides]))
    for label, cells in rows:
        table.add_row(label, *cells)
    return table


def _collectives(side: Any) -> Any:
    """Each collective of one program: kind, replica groups (or permute pairs), operand bytes."""
    from rich.table import Table

    from redist.render import device_list, fmt_bytes

    table = Table(title=f"{side.name}: collectives in the compiled HLO", title_justify="left",
                  show_edge=False, pad_edge=False)
    for col, just in (("kind", "left"), ("replica groups / pairs", "left"), ("operand per device", "right"),
                      ("received per device (mean)", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in side.collectives.collectives:
        if c.kind == "collective-permute":
            groups = " ".join(f"{s}->{t}" for s, t in c.groups if s != t)
        else:
            groups = " ".join("{" + device_list(g) + "}" for g in c.groups)
        table.add_row(c.kind, groups, fmt_bytes(c.operand_bytes), _kib(c.recv_bytes))
    if not side.collectives.collectives:
        table.add_row("(none)", "", "", "")
    return table
