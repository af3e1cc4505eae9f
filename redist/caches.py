"""One switch for every memo table of the project, so benchmarks can measure a cold cache.

Every cache is a ``spmd_types.memo.memo`` table registered with its scope, so this list cannot go
stale. ``clear_caches("plans")`` forgets everything derived from particular types (plans,
schedules, bounds, block tables, proofs of links); per-mesh tables (device coordinates, prime
factors of axes, collective groups) and compiled programs stay, as they would in a compiler
planning many moves on one mesh. ``clear_caches("all")`` forgets everything.
"""

from __future__ import annotations

from redist.errors import RedistError
from spmd_types.memo import Scope, clear

LEVELS: dict[str, tuple[Scope, ...]] = {"plans": (Scope.TYPE,), "all": tuple(Scope)}


def clear_caches(level: str = "all") -> int:
    """Empty the tables of ``level`` (``"plans"`` or ``"all"``); returns how many were cleared.

    ``"plans"`` forgets what was derived from particular types (plans, schedules, bounds, proofs
    of links) and keeps per-mesh tables and compiled programs; ``"all"`` empties every registered
    table. Clearing changes how long the next call takes, not what ``redistribute`` returns.

    Example:

    ```pycon
    >>> from redist import clear_caches
    >>> clear_caches("plans") >= 0
    True

    ```

    :raises RedistError: for a ``level`` other than ``"plans"`` or ``"all"``.
    """
    if level not in LEVELS:
        raise RedistError(f"level must be one of {sorted(LEVELS)}, got {level!r}")
    return clear(LEVELS[level])
