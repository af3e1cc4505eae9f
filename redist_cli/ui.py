"""Terminal output through ``rich``: one console per command, colour only on a terminal.

Why rich: it is what ``jax.debug.visualize_array_sharding`` draws with, and it gives tables,
colour and progress bars without hand-written escape codes or column padding.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader stopped early (``redist types ... | head``): that is not a failure, so exit 0
        quietly (rich's default exits 1)."""
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)


def console(stderr: bool = False) -> Console:
    """Plain text when piped (no colour, 120 columns so tables do not wrap), colour on a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return _Console(file=stream, highlight=False, width=None if tty else 120, no_color=not tty,
                    force_terminal=tty if tty else None)


def error(message: str) -> None:
    """One clear line on stderr: ``error: ...``."""
    print(f"error: {message}", file=sys.stderr)


def colour(con: Console) -> bool:
    return con.color_system is not None and not con.no_color


def print_all(con: Console, renderables: list[Any]) -> None:
    for r in renderables:
        con.print(r)
