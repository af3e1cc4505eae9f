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

ORDER = ("cmd_redist", "cmd_types", "cmd_verify", "cmd_compare", "cmd_bench", "cmd_planbench", "cmd_partir")
"""The order ``redist --help`` lists commands in: the everyday ones first; unlisted modules last."""
PASSED_THROUGH = ("bench",)
"""Commands whose options belong to the program they run (``args.passed``), not to this parser."""


def register(sub: Any, handlers: dict[str, Any]) -> None:
    rank = {name: i for i, name in enumerate(ORDER)}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: (rank.get(i.name, len(ORDER)), i.name)):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"redist_cli.{info.name}").register(sub, handlers)
