"""Facet tables: one table per facet of a step (measure, simulate, lower, fuse, search, z3, ...).

A step's typing rule lives on its class (``Step.apply``); every other facet lives in a table keyed
by step class, in the layer that owns the facet, next to the other entries of that facet (the
model is ``jax/_src/lax/parallel.py``, where each primitive registers its abstract evaluation,
lowering, batching and transpose rules in per-facet tables). Adding a step means adding its class
to ``redist.steps.ALL_STEPS`` and one entry per table; ``tests/test_architecture.py`` fails, naming
the table and the class, until every table has one. Tables register themselves here at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from redist.errors import RedistError

F = TypeVar("F")


class MissingFacetError(RedistError):
    """A step class has no entry in a facet table (a step was added without all its facets)."""


class FacetTable(Generic[F]):
    """``step class -> implementation`` of one facet, filled with the ``register`` decorator."""

    def __init__(self, facet: str, owner: str) -> None:
        self.facet = facet
        self.owner = owner
        self._rules: dict[type, F] = {}
        _TABLES.append(self)

    def register(self, *classes: type) -> Callable[[F], F]:
        """Decorator: ``fn`` implements this facet for every class in ``classes``."""

        def add(fn: F) -> F:
            for cls in classes:
                if cls in self._rules:
                    raise MissingFacetError(f"{self}: {cls.__name__} is registered twice")
                self._rules[cls] = fn
            return fn

        return add

    def __getitem__(self, cls: type) -> F:
        try:
            return self._rules[cls]
        except KeyError:
            raise MissingFacetError(
                f"{self} has no entry for step {cls.__name__}; register one with "
                f"@{self.owner}.register({cls.__name__})"
            ) from None

    def __contains__(self, cls: object) -> bool:
        return cls in self._rules

    def classes(self) -> Iterator[type]:
        return iter(self._rules)

    def __str__(self) -> str:
        return f"the {self.facet} table ({self.owner})"


_TABLES: list[FacetTable] = []  # type: ignore[type-arg]


def tables() -> tuple[FacetTable, ...]:  # type: ignore[type-arg]
    """Every facet table of the modules imported so far."""
    return tuple(_TABLES)


__all__ = ["FacetTable", "MissingFacetError", "tables"]
