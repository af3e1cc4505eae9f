"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums.
Rounds come from bipartite edge colouring (``redist.colouring``: each device sends and receives at
most one cell per round). Received traffic is therefore exactly the cells a device lacks: the
lower bound of docs/design.md section 4.

The modules, each depending only on those above it (docs/design.md 3.3):

- ``limits``: the size limits and ``ExchangeTooFineError``.
- ``cells``: the cell grid, the unreduced axes split, per-device tables, closed forms, size checks.
- ``rows``: who needs which cell, one replica per cell, holders grouped by what they hold.
- ``routes``: the cells routed (direct, reducing at a root, merging), as transfer items.
- ``packing``: items packed into ``ppermute`` rounds (``Round``, ``Schedule``).
- ``floors``: lower bounds on cells and rounds, from the types alone (no routing).
- ``figures``: the cells and rounds planning reads (``routing``) and whether to merge (``merges``).
- ``guards``: ``check_schedule``, what planning refuses because ``schedule`` would.
- ``runnable``: ``schedule`` and ``class_schedule``, the schedules the executors run.
"""

from redist.exchange.cells import ClosedForm, cell_shape, check_size, closed_form
from redist.exchange.figures import Routing, merges, routing
from redist.exchange.floors import (
    group_missing,
    group_missing_total,
    may_merge,
    provider_cells,
    reduced_cells,
    rooted_rounds,
    sampled_provider_cells,
)
from redist.exchange.guards import check_schedule
from redist.exchange.limits import ExchangeTooFineError
from redist.exchange.packing import Round, Schedule, crossed_axes
from redist.exchange.runnable import ClassSchedule, class_schedule, schedule

__all__ = [
    "ClassSchedule",
    "ClosedForm",
    "ExchangeTooFineError",
    "Round",
    "Routing",
    "Schedule",
    "cell_shape",
    "check_schedule",
    "check_size",
    "class_schedule",
    "closed_form",
    "crossed_axes",
    "group_missing",
    "group_missing_total",
    "may_merge",
    "merges",
    "provider_cells",
    "reduced_cells",
    "rooted_rounds",
    "routing",
    "sampled_provider_cells",
    "schedule",
]
