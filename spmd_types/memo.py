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
from typing import Any, Generic, NamedTuple, TypeVar, overload

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


HASH_KEY = "_hash"
"""Where ``store_hash`` keeps an immutable value's hash in its ``__dict__``."""


def store_hash(obj: object, key: object) -> int:
    """``hash(key)``, kept as ``obj``'s cached hash: meshes, types and cost models are in most of
    the planner's memo keys, so each ``__hash__`` reads ``obj.__dict__[HASH_KEY]`` first and calls
    this only on a miss."""
    h = hash(key)
    object.__setattr__(obj, HASH_KEY, h)
    return h


def state_without_hash(obj: object) -> dict[str, object]:
    """``__getstate__`` of a value with a cached hash: pickled without it, since string hashes
    differ between processes."""
    return {k: v for k, v in obj.__dict__.items() if k != HASH_KEY}


class cached_property(Generic[T]):  # noqa: N801 - a drop-in for functools.cached_property
    """``functools.cached_property`` without its lock: the first read computes the value and
    stores it in the instance's ``__dict__``, where later reads find it without calling this
    descriptor (the same as functools'). Python 3.11's version takes an ``RLock`` on every first
    read, which showed in planning (docs/design.md 13.3, "Planning time"). Planning is
    single-threaded; two threads racing on a first read both compute the same pure value, and one
    stores it."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached_property[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | cached_property[T]:
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.name] = value
        return value


__all__ = ["HASH_KEY", "Scope", "Table", "cached_property", "clear", "entries", "memo", "state_without_hash",
           "store_hash", "tables"]
