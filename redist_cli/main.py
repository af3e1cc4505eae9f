"""The ``redist`` command: argument parsing, the ``types`` subcommand, help, version and errors."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from redist_cli.ui import error

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = """\
Plan, check and picture the movement of a sharded JAX array between two layouts.

A layout is a sharding type as jax.typeof prints it: f32[512@(x,y),128] is a 512x128 array whose
dimension 0 is split over mesh axes x then y; {U:y} marks a pending sum over y. A mesh is written
x=2,y=4. Plans are computed from types, so plan, types and verify need no devices; demo, compare,
bench, calibrate, plan --autotune and partir --run run JAX programs (on simulated CPU devices
unless JAX has other devices).
"""

EXAMPLES = """\
examples:
  redist plan 'f32[2048@x,2048@y]' 'f32[2048@y,2048@x]' --mesh x=2,y=4 --picture plan.png
  redist plan 'f32[2048@x,1024]{U:y}' 'f32[2048@(x,y),1024]' --mesh x=2,y=4 --draw
  redist types 'f32[8@x,4]{U:y}' --mesh x=2,y=4
  redist verify 'f32[512@(x,y),128]' 'f32[512,128@(y,x)]' --mesh x=2,y=4
  redist compare 'f32[2048@x,2048@y]' 'f32[2048@y,2048@x]' --mesh x=2,y=4
  redist partir --model transformer --strategy BP+MP --run
"""


class Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the command's help, exit status 2."""

    def error(self, message: str) -> NoReturn:
        error(f"{message} (see '{self.prog} --help')")
        sys.exit(2)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("redist")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = Parser(prog="redist", description=DESCRIPTION, epilog=EXAMPLES,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    usage="redist [--version] COMMAND [ARGS] (redist COMMAND --help for its options)")
    parser.add_argument("--version", action="version", version=f"redist {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, title="commands",
                                prog="redist")
    handlers: dict[str, Handler] = {}

    from redist_cli import commands

    commands.register(sub, handlers)
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    from redist_cli.commands import PASSED_THROUGH

    parser, handlers = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if rest and args.command not in PASSED_THROUGH:
        Parser(prog=f"redist {args.command}").error(f"unrecognized arguments: {' '.join(rest)}")
    args.passed = rest
    from spmd_types import ShardingTypeError
    from spmd_types.errors import MissingExtraError

    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # the reader stopped early (``redist types ... | head``): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except ShardingTypeError as e:
        error(f"{type(e).__name__}: {e}")
    except MissingExtraError as e:
        error(str(e))
    except OSError as e:
        error(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    return 2
