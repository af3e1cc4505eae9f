"""The cell grid of two types and the tables every later pass reads.

The unreduced axes split (``partial_axes``), the grid of cells (``cell_grid``), every device's
coordinates (``device_tables``), the closed-form figures of a plain exchange (``closed_form``) and
the size checks (``check_size``). Nothing here routes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from redist.atoms import Atom, unreduced_atoms
from redist.bounds import overlap_figures
from redist.exchange import limits
from redist.exchange.limits import EXACT_FLOAT_SUM, ExchangeTooFineError
from redist.exchange_classes import classes
from redist.groups import (
    atoms_index,
    group_key,
    replica_index,
)
from spmd_types import ShardingType
from spmd_types.layout import block_indices, cell_shape, check_index_range, overlap_elements
from spmd_types.memo import Scope, cached_property, memo

Offset = tuple[int, ...]
"""An index per dimension: a cell's start inside a local block, or a cell / block grid index."""


class PartialAxes(NamedTuple):
    """The unreduced atoms of the old type, by what the new type does with them."""

    kept: tuple[Atom, ...]     # unreduced in both: moved partial by partial
    reduced: tuple[Atom, ...]  # unreduced in old only: summed at a root
    fresh: tuple[Atom, ...]    # unreduced in new only: one provider per group, the others zeros

    @property
    def n_reduced(self) -> int:
        """Partials summed into each element of the new type."""
        return math.prod(a.size for a in self.reduced)


class CellGrid(NamedTuple):
    cell: Offset       # cell size: gcd of the old and new local sizes per dimension
    per_block: Offset  # cells per new block along each dimension


@dataclass(frozen=True, eq=False)
class DeviceTables:
    """Per-device coordinates ``schedule`` reasons with, each ``[devices]`` or ``[devices, rank]``."""

    old_local: np.ndarray    # [rank] old local shape
    new_local: np.ndarray    # [rank] new local shape
    old_block: np.ndarray    # old block grid index
    new_block: np.ndarray    # new block grid index
    kept: np.ndarray         # index along the kept unreduced atoms
    partial: np.ndarray      # index along the reduced atoms
    replica: np.ndarray      # replica of the old block (0 without unreduced axes)
    group: np.ndarray        # id shared by the devices that differ only along fresh atoms
    group_index: np.ndarray  # index inside that group

    @property
    def n_devices(self) -> int:
        return len(self.kept)

    @cached_property
    def old_start(self) -> np.ndarray:
        """Old block start (global element index): only transfers with offsets read it."""
        return self.old_block * self.old_local


def partial_axes(old: ShardingType, new: ShardingType, merged: bool = False) -> PartialAxes:
    """``merged``: the merging exchange (``routes._route_merged``) sums every partial of the source and
    feeds one member per group of devices differing along any of the new type's unreduced atoms,
    so its kept atoms count as reduced and as fresh."""
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    if merged:
        return PartialAxes((), tuple(sorted(ua)), tuple(sorted(ub)))
    return PartialAxes(tuple(sorted(ua & ub)), tuple(sorted(ua - ub)), tuple(sorted(ub - ua)))


def cell_grid(old: ShardingType, new: ShardingType) -> CellGrid:
    cell = cell_shape(old, new)
    return CellGrid(cell, tuple(n // c for n, c in zip(new.local_shape, cell)))


class ClosedForm(NamedTuple):
    """A point-to-point move without unreduced axes, without building its schedule."""

    mean_missing: float
    """Elements of its new block a device lacks (the transfer lower bound's summand), averaged."""
    max_missing: int
    """The same on the device that lacks the most."""
    cell: int
    """Elements per cell: ``prod gcd(old local, new local)``; one cell per ``ppermute`` round."""

    @property
    def rounds(self) -> int:
        """Rounds on the busiest device (sends are balanced over the replicas)."""
        return self.max_missing // self.cell


@memo(Scope.TYPE, maxsize=4096)
def closed_form(before: ShardingType, after: ShardingType) -> ClosedForm:
    """The one closed form of point-to-point traffic without pending sums (``redist.measure``'s
    measures, the synthesizer's floors and ``check_schedule``, which ask for the same pair:
    memoised, and only its two figures are kept, not the per-device table)."""
    cell = math.prod(cell_shape(before, after))
    n, size = before.mesh.size, after.local_size
    if size * n < EXACT_FLOAT_SUM:
        total, least = overlap_figures(before, after)
        return ClosedForm((size * n - total) / n, size - least, cell)
    missing = size - overlap_elements(before, after)
    return ClosedForm(float(missing.mean()), int(missing.max()), cell)


def few_cells(old: ShardingType, new: ShardingType, merged: bool = False) -> bool:
    """Whether each device handles at most ``MAX_DEVICE_CELLS`` (cell, partial) pairs: always
    allowed, at any mesh size, by both limits."""
    return math.prod(cell_grid(old, new).per_block) * partial_axes(old, new, merged).n_reduced <= limits.MAX_DEVICE_CELLS


def check_size(old: ShardingType, new: ShardingType) -> None:
    """Raise ``ExchangeTooFineError`` if ``schedule(old, new)`` (and, with pending sums,
    ``routing(old, new)``) would be refused: its size limit, which applies to one class of devices
    (``redist.exchange_classes``)."""
    if few_cells(old, new):
        return  # a class has the same cells and partials per device (planning asks often)
    c = classes(old, new)
    if c is not None:
        old, new = c.quotient_old, c.quotient_new
    check_grid_size(old, new, cell_grid(old, new), partial_axes(old, new))


def check_grid_size(old: ShardingType, new: ShardingType, grid: CellGrid, axes: PartialAxes,
                merged: bool = False) -> None:
    cells = math.prod(grid.per_block)
    per_device = cells * axes.n_reduced
    n, who = old.mesh.size, "devices"
    if not merged and by_group(old, axes):
        n, who = n // math.prod(a.size for a in axes.fresh), "groups of devices differing only along new pending sums"
    total = per_device * n
    if total > limits.MAX_CELLS and per_device > limits.MAX_DEVICE_CELLS:
        raise ExchangeTooFineError(
            f"exchange {old} -> {new} needs {cells} cell(s) of {list(grid.cell)} elements per device "
            f"x {axes.n_reduced} partial(s) = {per_device} > MAX_DEVICE_CELLS = {limits.MAX_DEVICE_CELLS}, "
            f"x {n} {who} = {total:,} > MAX_CELLS = {limits.MAX_CELLS:,}; choose shapes whose "
            f"local blocks share a larger common divisor per dimension")


def by_group(old: ShardingType, axes: PartialAxes) -> bool:
    """Whether the routing tabulates one row per (group, cell) (``provider_rows``): the new type
    adds pending sums (fresh atoms) and the source has one replica (no pending sums, or every
    (block, partial) held by one device), so a group's provider depends only on who holds what."""
    if not axes.fresh:
        return False
    if not old.unreduced:
        return True
    blocks = math.prod(n // b for n, b in zip(old.shape, old.local_shape))
    return blocks * math.prod(a.size for a in unreduced_atoms(old)) == old.mesh.size


def _block_indices(t: ShardingType) -> np.ndarray:
    """``block_indices`` after ``block_bounds``' int64 range check: the routing reads block grid
    indices, and the element starts (``[devices, rank, 2]`` bounds) only where it sends offsets."""
    check_index_range(t)
    return block_indices(t)


def device_tables(old: ShardingType, new: ShardingType, axes: PartialAxes) -> DeviceTables:
    mesh = old.mesh
    return DeviceTables(
        old_local=np.array(old.local_shape, dtype=np.int64),
        new_local=np.array(new.local_shape, dtype=np.int64),
        old_block=_block_indices(old),
        new_block=_block_indices(new),
        kept=atoms_index(mesh, axes.kept),
        partial=atoms_index(mesh, axes.reduced),
        replica=replica_index(old),
        group=group_key(mesh, axes.fresh),
        group_index=atoms_index(mesh, axes.fresh),
    )


def per_dim_blocks(grid: CellGrid, base: np.ndarray, old_local: np.ndarray) -> list[np.ndarray]:
    """Per dimension ``k``, ``[len(base), cells per block along k]``: the old block index along
    ``k`` of each cell of each new block (``base``: its first cell). The old block of cell
    ``base + idx`` is ``(base + idx) * cell // old_local`` per dimension, and ``cell`` divides
    ``old_local``, so it is ``(base + idx) // (old_local / cell)``: per dimension a small table,
    not a ``[blocks, cells, rank]`` one (whose integer division was a quarter of the routing)."""
    return [(base[:, k, None] + np.arange(n)) // (int(old_local[k]) // c)
            for k, (n, c) in enumerate(zip(grid.per_block, grid.cell))]


def spread_blocks(table: np.ndarray, k: int, per_block: Offset) -> np.ndarray:
    """A ``[n, per_block[k]]`` table shaped to broadcast over ``[n, *per_block]``."""
    shape = [len(table)] + [1] * len(per_block)
    shape[k + 1] = per_block[k]
    return table.reshape(shape)


def held_blocks(grid: CellGrid, base: np.ndarray, old_local: np.ndarray, blocks: Offset) -> np.ndarray:
    """``[len(base), cells per block]``: the raveled old block (grid ``blocks``) holding each cell
    of each new block, cells in ``np.ndindex`` order: the ravel's sum of per-dimension terms
    (``per_dim_blocks``), broadcast."""
    out = np.zeros((len(base), *grid.per_block), dtype=np.int64)
    stride = 1
    for k, t in reversed(list(enumerate(per_dim_blocks(grid, base, old_local)))):
        out += spread_blocks(t * stride, k, grid.per_block)
        stride *= blocks[k]
    return out.reshape(len(base), -1)


def ravel_index(index: np.ndarray, shape: Offset) -> np.ndarray:
    """``[n, rank]`` grid indices as row-major ints (zeros for a scalar)."""
    return np.ravel_multi_index(tuple(index.T), shape) if len(shape) else np.zeros(len(index), dtype=np.int64)

