"""Registration of the subcommands that later layers provide.

Every module ``redist_cli/cmd_*.py`` defines ``register(sub, handlers)``; it is discovered here so
each layer's command lives in its own file. Modules import their layer lazily inside the handler
so ``redist --help`` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"redist_cli.{info.name}").register(sub, handlers)
