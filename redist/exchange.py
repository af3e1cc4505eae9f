"""Point-to-point schedules for ``Permute`` and ``Exchange`` steps.

The blocks of the old and new types both lie on the grid of "cells" whose size per dimension is
``gcd(old_local, new_local)``; a cell is either entirely in a device's old block or not at all.
Each device adds the cells it holds into its new block and receives the others, one cell per
``ppermute`` round, from a holder chosen to balance the senders' load. Everything accumulates
(``+=`` into zeros), so the same schedule moves data, sums partials and creates pending sums.
Rounds come from bipartite edge colouring (``redist.colouring``: each device sends and receives at
most one cell per round). Received traffic is therefore exactly the cells a device lacks: the
lower bound of DESIGN.md section 4.

``schedule`` runs in phases, each a function below: split the unreduced axes
(``_partial_axes``), lay the cell grid (``_cell_grid``), tabulate every device's coordinates
(``_device_tables``), index who holds what (``_holders``) and who needs what (``_targets``),
choose one replica per cell (``_choose_replicas``) and one provider per fresh group
(``_providers``), route each cell (``_route_cell``: phase A moves or merges partials at a root,
phase B forwards merged sums) and pack the transfers into rounds (``_pack_schedule``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from redist.atoms import Atom, atoms_of, dims_atoms, unreduced_atoms
from redist.colouring import colour_classes
from redist.errors import StepError
from redist.groups import atoms_index, group_key
from spmd_types import ShardingType
from spmd_types.layout import block_bounds

MAX_CELLS = 1 << 16
"""Exchanges finer than this many (device, cell) pairs are not offered: too many rounds to be useful."""

Offset = tuple[int, ...]
"""An index per dimension: a cell's start inside a local block, or a cell / block grid index."""


@dataclass(frozen=True, eq=False)
class Round:
    """One ``ppermute``: ``pairs`` (src, dst); offsets are cell starts in the local arrays.

    ``from_output``: the senders forward a cell of their *new* block (a sum they completed in an
    earlier round) instead of a cell of their old block.
    """

    pairs: tuple[tuple[int, int], ...]
    send_offset: np.ndarray  # [devices, rank], rows of non-senders are zero
    recv_offset: np.ndarray  # [devices, rank]
    recv_valid: np.ndarray   # [devices] bool
    from_output: bool = False


@dataclass(frozen=True, eq=False)
class Schedule:
    cell: tuple[int, ...]
    local_copies: tuple[Round, ...]  # pairs empty; send_offset = source, recv_offset = destination
    rounds: tuple[Round, ...]
    recv_cells: np.ndarray           # [devices] cells received by each device

    @property
    def n_transfers(self) -> int:
        return int(self.recv_cells.sum())


class Transfer(NamedTuple):
    """One cell added from ``src``'s block into ``dst``'s new block (a local copy when equal)."""

    src: int
    dst: int
    src_offset: Offset  # cell start in src's old block (its new block when forwarding)
    dst_offset: Offset  # cell start in dst's new block


class PartialAxes(NamedTuple):
    """The unreduced atoms of the old type, by what the new type does with them."""

    kept: tuple[Atom, ...]     # unreduced in both: moved partial by partial
    reduced: tuple[Atom, ...]  # unreduced in old only: summed at a root
    fresh: tuple[Atom, ...]    # unreduced in new only: one provider per group, the others zeros

    @property
    def n_reduced(self) -> int:
        """Partials summed into each element of the new type."""
        return math.prod(a[2] for a in self.reduced)


class CellGrid(NamedTuple):
    cell: Offset       # cell size: gcd of the old and new local sizes per dimension
    per_block: Offset  # cells per new block along each dimension


class HolderKey(NamedTuple):
    """What an old block holds: which block, which kept and reduced partial, in which replica."""

    block: Offset  # old block grid index
    kept: int      # index along the kept unreduced atoms
    partial: int   # index along the reduced atoms
    replica: int   # index along the mesh atoms the old type leaves free


class CellKey(NamedTuple):
    """What a new block needs: a global cell of one kept partial."""

    cell: Offset  # global cell grid index
    kept: int


class Target(NamedTuple):
    device: int
    offset: Offset  # cell start in the device's new block


@dataclass(frozen=True, eq=False)
class DeviceTables:
    """Per-device coordinates ``schedule`` reasons with, each ``[devices]`` or ``[devices, rank]``."""

    old_local: np.ndarray   # [rank] old local shape
    old_start: np.ndarray   # old block start (global element index)
    new_start: np.ndarray   # new block start
    kept: np.ndarray        # index along the kept unreduced atoms
    partial: np.ndarray     # index along the reduced atoms
    replica: np.ndarray     # index along the atoms the old type leaves free (0 without unreduced)
    group: np.ndarray       # id shared by the devices that differ only along fresh atoms
    group_index: np.ndarray  # index inside that group

    @property
    def n_devices(self) -> int:
        return len(self.kept)


@dataclass
class Routes:
    """Transfers chosen so far; ``load`` (cells each device sends) balances the next choices."""

    load: np.ndarray
    copies: list[list[Transfer]]  # per device, its local copies in order
    merge: list[Transfer] = field(default_factory=list)    # phase A: old blocks -> targets / roots
    forward: list[Transfer] = field(default_factory=list)  # phase B: roots -> other targets


def _partial_axes(old: ShardingType, new: ShardingType) -> PartialAxes:
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    return PartialAxes(tuple(sorted(ua & ub)), tuple(sorted(ua - ub)), tuple(sorted(ub - ua)))


def _cell_grid(old: ShardingType, new: ShardingType) -> CellGrid:
    cell = tuple(math.gcd(a, b) for a, b in zip(old.local_shape, new.local_shape))
    return CellGrid(cell, tuple(n // c for n, c in zip(new.local_shape, cell)))


def _check_size(old: ShardingType, new: ShardingType, grid: CellGrid, axes: PartialAxes) -> None:
    cells = math.prod(grid.per_block)
    if cells * old.mesh.size * axes.n_reduced > MAX_CELLS:
        raise StepError(f"exchange {old} -> {new} needs {cells} cells per device; too fine")


def _device_tables(old: ShardingType, new: ShardingType, axes: PartialAxes) -> DeviceTables:
    """An unreduced source promises only that each replica's partials sum to the value: replicas
    (coordinates along the atoms the source does not use) may hold different decompositions, so
    each device's replica index is kept apart from its block and partial."""
    mesh = old.mesh
    ua = unreduced_atoms(old)
    used = set(ua) | {a for d in dims_atoms(old) for a in d}
    free = tuple(a for name, _ in mesh.axes for a in atoms_of(mesh, name) if a not in used)
    replica = atoms_index(mesh, free) if ua else np.zeros(mesh.size, dtype=np.int64)
    return DeviceTables(
        old_local=np.array(old.local_shape, dtype=np.int64),
        old_start=block_bounds(old)[..., 0],
        new_start=block_bounds(new)[..., 0],
        kept=atoms_index(mesh, axes.kept),
        partial=atoms_index(mesh, axes.reduced),
        replica=replica,
        group=group_key(mesh, axes.fresh),
        group_index=atoms_index(mesh, axes.fresh),
    )


def _holders(dev: DeviceTables) -> dict[HolderKey, list[int]]:
    """The devices whose old block is each (block, kept, partial, replica), in device order."""
    holders: dict[HolderKey, list[int]] = {}
    for v in range(dev.n_devices):
        block = tuple((dev.old_start[v] // dev.old_local).tolist())
        key = HolderKey(block, int(dev.kept[v]), int(dev.partial[v]), int(dev.replica[v]))
        holders.setdefault(key, []).append(v)
    return holders


def _targets(grid: CellGrid, dev: DeviceTables) -> dict[CellKey, list[Target]]:
    """Every (global cell, kept partial) of the new blocks and the devices that need it, keys in
    order of first need (device-major, then cell by cell), targets in device order."""
    cell = np.array(grid.cell, dtype=np.int64)
    targets: dict[CellKey, list[Target]] = {}
    for d in range(dev.n_devices):
        for c in np.ndindex(*grid.per_block):
            off = np.array(c, dtype=np.int64) * cell
            gcell = tuple(((dev.new_start[d] + off) // cell).tolist()) if len(grid.cell) else ()
            targets.setdefault(CellKey(gcell, int(dev.kept[d])), []).append(Target(d, tuple(off.tolist())))
    return targets


def _choose_replicas(
    grid: CellGrid, dev: DeviceTables, targets: dict[CellKey, list[Target]]
) -> dict[Offset, int]:
    """Per global cell, the replica all its partials come from: the one whose partials most of the
    cell's targets already hold (the lowest on ties), so the fewest cells move."""
    hits: dict[Offset, dict[int, int]] = {}
    replicas = sorted(set(dev.replica.tolist()))
    for key, tgts in targets.items():
        block = _old_block(grid, dev, key.cell)
        count = hits.setdefault(key.cell, dict.fromkeys(replicas, 0))
        for t in tgts:
            if tuple((dev.old_start[t.device] // dev.old_local).tolist()) == block:
                count[int(dev.replica[t.device])] += 1
    return {c: max(count, key=lambda f: (count[f], -f)) for c, count in hits.items()}


def _old_block(grid: CellGrid, dev: DeviceTables, gcell: Offset) -> Offset:
    """The old block grid index containing a global cell."""
    return tuple(((np.array(gcell, dtype=np.int64) * grid.cell) // dev.old_local).tolist())


def _providers(tgts: list[Target], holding: set[int], dev: DeviceTables) -> list[Target]:
    """For axes the new type makes unreduced, one target per group carries the cell (a holder if
    the group has one, else its first member); the others keep zeros."""

    def rank(t: Target) -> tuple[int, int]:
        return (0 if t.device in holding else 1, int(dev.group_index[t.device]))

    best: dict[int, tuple[int, int]] = {}
    for t in tgts:
        g = int(dev.group[t.device])
        if g not in best or rank(t) < best[g]:
            best[g] = rank(t)
    return [t for t in tgts if rank(t) == best[int(dev.group[t.device])]]


def _sender(holders: Sequence[int], dst: int, routes: Routes) -> int:
    """The least loaded holder, the nearest after ``dst`` on ties; its load grows by one."""
    n = len(routes.load)
    s = min(holders, key=lambda h: (routes.load[h], (h - dst) % n))
    routes.load[s] += 1
    return s


def _add_partial(routes: Routes, holders: Sequence[int], dst: int, start: np.ndarray,
                 dst_offset: Offset, dev: DeviceTables) -> None:
    """Phase A: ``dst`` adds one partial of the cell starting at ``start``, from its own old block
    when it holds it, else from a chosen holder."""
    if dst in holders:
        routes.copies[dst].append(Transfer(dst, dst, tuple((start - dev.old_start[dst]).tolist()), dst_offset))
    else:
        s = _sender(holders, dst, routes)
        routes.merge.append(Transfer(s, dst, tuple((start - dev.old_start[s]).tolist()), dst_offset))


def _route_cell(routes: Routes, tgts: list[Target], sources: list[list[int]], start: np.ndarray,
                dev: DeviceTables) -> None:
    """Route one (cell, kept partial) to its targets. Without reduced axes each target takes the
    cell directly (phase A). Otherwise the partials merge at one *root* target (a holder if any)
    and the root forwards the sum to the other targets (phase B): ``k - 1`` cells into the root
    and ``|T| - 1`` out of it, the ``(k-1) + (|T|-1)`` bound of ``redist.bounds``."""
    if len(sources) == 1:
        for t in tgts:
            _add_partial(routes, sources[0], t.device, start, t.offset, dev)
        return
    holding = {h for hs in sources for h in hs}
    root = min(tgts, key=lambda t: (0 if t.device in holding else 1, t.device))
    for hs in sources:
        _add_partial(routes, hs, root.device, start, root.offset, dev)
    routes.forward.extend(Transfer(root.device, t.device, root.offset, t.offset) for t in tgts if t != root)


def _pack(n_dev: int, rank: int, items: Sequence[Transfer], from_output: bool = False) -> Round:
    send = np.zeros((n_dev, rank), dtype=np.int64)
    recv = np.zeros((n_dev, rank), dtype=np.int64)
    valid = np.zeros(n_dev, dtype=bool)
    pairs = []
    for s, d, so, do in items:
        send[s] = so
        recv[d] = do
        valid[d] = True
        if s != d:
            pairs.append((s, d))
    return Round(tuple(pairs), send, recv, valid, from_output)


def _coloured_rounds(n_dev: int, rank: int, items: list[Transfer], from_output: bool) -> list[Round]:
    """The fewest rounds in which no device sends or receives two cells."""
    classes = colour_classes([(t.src, t.dst) for t in items])
    return [_pack(n_dev, rank, [items[e] for e in c], from_output) for c in classes]


def _pack_schedule(grid: CellGrid, routes: Routes) -> Schedule:
    """Local copies (the i-th copy of every device in round i), then phase A, then phase B."""
    n_dev, rank = len(routes.load), len(grid.cell)
    n_local = max((len(c) for c in routes.copies), default=0)
    local = tuple(_pack(n_dev, rank, [c[i] for c in routes.copies if i < len(c)]) for i in range(n_local))
    rounds = _coloured_rounds(n_dev, rank, routes.merge, False)
    rounds += _coloured_rounds(n_dev, rank, routes.forward, True)
    recv_cells = np.zeros(n_dev, dtype=np.int64)
    for t in routes.merge + routes.forward:
        recv_cells[t.dst] += 1
    return Schedule(grid.cell, local, tuple(rounds), recv_cells)


@lru_cache(maxsize=4096)
def schedule(old: ShardingType, new: ShardingType) -> Schedule:
    """Cells each device adds into its new block, locally or from a peer.

    Unreduced axes of ``old`` that ``new`` keeps move partial by partial, all partials of a cell
    from one replica (replicas may hold different decompositions of the same value). Those ``new`` drops are
    summed at one *root* per element (a target that holds a partial, if any): it receives one cell
    per partial it lacks, then forwards the sum to the element's other targets, which is the
    ``(k-1) + (|T|-1)`` message bound of ``redist.bounds``. Axes ``new`` adds are provided by one
    member of each group (the first holding a partial), the others keeping zeros.
    """
    axes = _partial_axes(old, new)
    grid = _cell_grid(old, new)
    _check_size(old, new, grid, axes)
    dev = _device_tables(old, new, axes)
    holders = _holders(dev)
    targets = _targets(grid, dev)
    replica = _choose_replicas(grid, dev, targets)
    routes = Routes(np.zeros(dev.n_devices, dtype=np.int64), [[] for _ in range(dev.n_devices)])
    for key, tgts in targets.items():
        block = _old_block(grid, dev, key.cell)
        sources = [holders.get(HolderKey(block, key.kept, u, replica[key.cell]), [])
                   for u in range(axes.n_reduced)]
        if axes.fresh:
            tgts = _providers(tgts, {h for hs in sources for h in hs}, dev)
        start = np.array(key.cell, dtype=np.int64) * np.array(grid.cell, dtype=np.int64)
        _route_cell(routes, tgts, sources, start, dev)
    return _pack_schedule(grid, routes)
