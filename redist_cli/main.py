"""``redist`` subcommands. Each subcommand lives with the layer it belongs to and registers here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


def _types(args: argparse.Namespace) -> int:
    from spmd_types import Mesh, parse

    mesh = Mesh.parse(args.mesh)
    for text in args.type:
        t = parse(text, mesh)
        print(f"{t}  local {list(t.local_shape)} ({t.local_bytes} B/device), replication {t.replication}")
        for dev in range(mesh.size):
            print(f"  device {dev} {mesh.coords(dev)}: block {t.block(dev)}")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(prog="redist", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Handler] = {}

    p = sub.add_parser("types", help="parse types and show every device's block")
    p.add_argument("type", nargs="+")
    p.add_argument("--mesh", required=True, help="e.g. x=2,y=4")
    handlers["types"] = _types

    from redist_cli import commands

    commands.register(sub, handlers)
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    from spmd_types import ShardingTypeError

    try:
        return handlers[args.command](args)
    except ShardingTypeError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
