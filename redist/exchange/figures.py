"""The cells received and rounds an exchange takes, as planning reads them (``routing``): in closed
form where the types allow, else by routing without offsets; and whether the merging exchange
is the cheaper form (``merges``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from redist.bounds import on_prime_atoms, overlap_figures
from redist.exchange import limits
from redist.exchange.cells import PartialAxes, cell_grid, check_grid_size, few_cells, partial_axes
from redist.exchange.floors import direct_reduced_cells, may_merge
from redist.exchange.limits import EXACT_FLOAT_SUM, ExchangeTooFineError
from redist.exchange.routes import phased_degree, route
from redist.exchange_classes import classes
from spmd_types import ShardingType
from spmd_types.layout import check_index_range
from spmd_types.memo import Scope, memo


@memo(Scope.TYPE)
def merges(old: ShardingType, new: ShardingType) -> bool:
    """Whether ``schedule(old, new)`` is the merging exchange (``routes._route_merged``): only where the
    types share an unreduced atom, and only where it receives fewer cells than the exchange that
    moves kept partials one by one (or as many in fewer rounds); never where its own tables or
    packed rounds would pass ``MAX_CELLS`` or ``MAX_PACKED``, nor past ``MERGED_MAX_ROWS`` (the
    other one is used then)."""
    if not may_merge(old, new):
        return False
    try:
        m = mode_routing(old, new, True)
    except ExchangeTooFineError:
        return False
    if not few_cells(old, new, True) and m.rounds * old.mesh.size * max(1, old.rank) > limits.MAX_PACKED:
        return False
    if m.cells < direct_reduced_cells(old, new):
        return True  # fewer cells than the other can receive: no need to route it
    direct = mode_routing(old, new, False)
    return (m.cells, m.rounds) < (direct.cells, direct.rounds)


class Routing(NamedTuple):
    """What ``schedule(old, new)`` will contain, known before its rounds are built."""

    cell: tuple[int, ...]
    cells: int   # cells received, over all devices
    rounds: int  # rounds: max degree of phase A plus that of each level of phase B


@memo(Scope.TYPE)
def routing(old: ShardingType, new: ShardingType) -> Routing:
    """The exact bytes and rounds of ``schedule(old, new)`` from its routing alone (no colouring,
    no packing; rounds by König's theorem): cheap enough for the synthesizer to prune candidates
    whose optimistic floor is not tight (pending sums). Raises as ``schedule``; routes one class
    of devices (``redist.exchange_classes``): every class receives as many cells, in the same rounds."""
    check_index_range(old)  # before any int64 table (SizeLimitError naming the dimension)
    check_index_range(new)
    return mode_routing(old, new, merges(old, new))


@memo(Scope.TYPE)
def mode_routing(old: ShardingType, new: ShardingType, merged: bool) -> Routing:
    c = classes(old, new, merged)
    if c is not None:
        r = mode_routing(c.quotient_old, c.quotient_new, merged)
        return r._replace(cells=r.cells * c.n_classes)
    plain = None if merged else plain_routing(old, new) or summing_routing(old, new)
    return rows_routing(old, new, merged) if plain is None else plain


def rows_routing(old: ShardingType, new: ShardingType, merged: bool) -> Routing:
    """``Routing`` read off the routed (device, cell) rows of ``route``."""
    grid, _, routed = route(old, new, False, merged)
    fwd, level = routed.forward, routed.level
    merge = routed.merge.dst
    rounds = max(routed.send_load, int(np.bincount(merge).max()) if len(merge) else 0)
    rounds += phased_degree(fwd.src, fwd.dst, level)
    return Routing(grid.cell, len(routed.merge.dst) + len(fwd.dst), rounds)


def plain_routing(old: ShardingType, new: ShardingType) -> Routing | None:
    """The routing of a move without pending sums, from its closed form (``closed_form``: per-device
    overlaps, no (device, cell) rows): every cell a device lacks is sent to it directly, so it
    receives its missing cells and the busiest receiver's count is the rounds (König; sends are
    balanced over the replicas). Pending-sum moves whose unreduced atoms are all kept reach here as
    such quotients (``redist.exchange_classes``): the synthesizer measures the permutes of its
    candidates on them, where routing their rows showed in planning (docs/design.md 13.3). Refused as
    ``route`` refuses (``check_grid_size``); ``None`` where the sum is past ``EXACT_FLOAT_SUM``."""
    if old.unreduced or new.unreduced or new.local_size * old.mesh.size >= EXACT_FLOAT_SUM:
        return None
    return overlap_routing(old, new, partial_axes(old, new), new.local_size)


def overlap_routing(old: ShardingType, new: ShardingType, axes: PartialAxes, demand: int) -> Routing:
    """The closed forms' shared tail: every device receives ``demand`` elements less its
    old-and-new overlap (``overlap_figures``), in cells, and the busiest receiver's count is the
    rounds. Refused first as ``route`` refuses (``check_grid_size``)."""
    grid = cell_grid(old, new)
    check_grid_size(old, new, grid, axes)
    cell = math.prod(grid.cell)
    total, least = overlap_figures(old, new)
    return Routing(grid.cell, (demand * old.mesh.size - total) // cell, (demand - least) // cell)


def summing_routing(old: ShardingType, new: ShardingType) -> Routing | None:
    """The routing of a pending-sum move in closed form (``overlap_figures``, no (device, cell)
    rows) where each device is the one holder of its (old block, kept, reduced partial) and the
    one target of its (new block, kept), and the new type adds no pending sums: the reducing
    exchange onto a fully sharded layout, whose rows were slow on large meshes (docs/design.md 13.3).
    ``_route_reduced`` roots each (cell, kept) need at its one target ``t``, which receives the
    ``k`` partials less the one it holds where its old block has the cell: ``k C_new - O(t)``
    cells (``C`` a block's cells, ``O`` a device's old-and-new overlap in cells); the holder
    ``h`` of a partial sends its old block's cells to their targets, all but the ``O(h)`` that
    are its own: ``C_old - O(h)``. As ``C_old = k C_new`` (``k`` times as many old blocks as
    new), both busiest degrees are ``C_old`` less the least overlap, and with one target per need
    there is no phase B: that is the rounds (König). ``None`` elsewhere (the rows route it);
    refused as ``route`` refuses (``check_grid_size``); ``None`` past ``EXACT_FLOAT_SUM``, as
    ``plain_routing``."""
    axes = partial_axes(old, new)
    if axes.fresh or axes.n_reduced == 1 or not (on_prime_atoms(old) and on_prime_atoms(new)):
        return None
    n, n_kept = old.mesh.size, math.prod(a.size for a in axes.kept)
    blocks_old = math.prod(s // b for s, b in zip(old.shape, old.local_shape))
    blocks_new = math.prod(s // b for s, b in zip(new.shape, new.local_shape))
    if blocks_old * n_kept * axes.n_reduced != n or blocks_new * n_kept != n:
        return None  # replicas to choose among, or targets to forward to: the rows decide
    if new.local_size * n >= EXACT_FLOAT_SUM or may_merge(old, new):
        return None
    return overlap_routing(old, new, axes, old.local_size)  # = k new blocks' worth: k times as many old blocks

