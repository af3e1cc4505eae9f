"""Registered memo tables: every cache in the project has one owner, so clearing cannot miss one.

Planning is dominated by pure functions of a mesh or of types (coordinates, blocks, atoms,
schedules, plans, compiled programs). Each is memoised with ``@memo(Scope.X)`` instead of a bare
``functools.lru_cache``; the decorator registers the table here, ``clear(...)`` empties every
table of the given scopes, and ``tables()`` lets a test prove a cleared planner is cold. A test
also checks that no module of the project uses ``lru_cache`` directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Scope(Enum):
    """What a table's entries depend on, hence when clearing it is meaningful."""

    MESH = "mesh"
    """Per mesh (device coordinates, prime factors of axes, collective groups): kept by a compiler
    planning many moves on one mesh."""
    TYPE = "type"
    """Per type or pair of types (blocks, bounds, schedules, plans, proofs)."""
    PROGRAM = "program"
    """Compiled JAX programs (per plan and JAX mesh)."""


class Table(NamedTuple):
    name: str
    scope: Scope
    cache: Any  # functools._lru_cache_wrapper


_TABLES: list[Table] = []


def memo(scope: Scope, maxsize: int = 4096) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``functools.lru_cache(maxsize)`` that registers the table under ``scope``."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _TABLES.append(Table(f"{fn.__module__}.{fn.__qualname__}", scope, cached))
        return cached

    return wrap


def tables() -> tuple[Table, ...]:
    """Every registered table (those of modules imported so far)."""
    return tuple(_TABLES)


def clear(scopes: Iterable[Scope] = tuple(Scope)) -> int:
    """Empty every table of ``scopes``; returns how many tables were cleared."""
    wanted = set(scopes)
    n = 0
    for t in _TABLES:
        if t.scope in wanted:
            t.cache.cache_clear()
            n += 1
    return n


def entries(scopes: Iterable[Scope] = tuple(Scope)) -> int:
    """Total entries held by the tables of ``scopes`` (0 means cold)."""
    wanted = set(scopes)
    return sum(t.cache.cache_info().currsize for t in _TABLES if t.scope in wanted)


__all__ = ["Scope", "Table", "clear", "entries", "memo", "tables"]
