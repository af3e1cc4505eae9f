"""Registration of the subcommands that later layers provide (plan, demo, verify, bench)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    """Add subcommands here; each imports its layer lazily so ``redist types`` stays fast."""
    del sub, handlers


__all__ = ["register", "argparse"]
