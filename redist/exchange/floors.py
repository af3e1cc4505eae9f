"""Lower bounds on an exchange's received cells and rounds, from the types alone (no routing): the
synthesizer reads them to skip the exact routing of candidates that lose (docs/design.md 4).
"""

from __future__ import annotations

import math

import numpy as np

from redist.atoms import Atom, dims_atoms, unreduced_atoms
from redist.bounds import on_prime_atoms, overlap_total
from redist.errors import StepError
from redist.exchange import limits
from redist.exchange.cells import (
    CellGrid,
    PartialAxes,
    cell_grid,
    cell_shape,
    held_blocks,
    partial_axes,
    ravel_index,
)
from redist.exchange.limits import ROOTED_CLOSED_MAX_BLOCKS, ROOTED_MAX_CELLS, SAMPLED_MAX_MEMBERS
from redist.exchange_classes import classes
from redist.groups import (
    atoms_index,
    group_sums,
)
from spmd_types import ShardingType
from spmd_types.layout import block_indices, check_index_range, overlap_widths
from spmd_types.memo import Scope, memo


@memo(Scope.TYPE, maxsize=64)  # read twice per floor (bytes and rounds)
def group_missing(old: ShardingType, new: ShardingType, merged: bool = False) -> np.ndarray | None:
    """Per device, the elements of its new block that no device of its *group* (those differing
    only along ``new``'s fresh unreduced atoms, one device without any; with ``merged``, along any
    of its unreduced atoms: the merging exchange's groups) holds in its old block,
    whatever partial or replica: each must reach the group in at least one received cell, so the
    sum over groups bounds any exchange's traffic from below. The members' old blocks are the
    product over dimensions of the blocks their fresh atoms in that dimension span, so what a group
    holds of its new block is a product, per dimension, of the members' overlaps summed over the
    fresh atoms of that dimension: per-device NumPy rows, no cells. ``None`` where those sums could
    leave int64, and where a sub-axis is not a product of the mesh's prime atoms (``x:(3)2`` on
    ``x=6``, ``on_prime_atoms``): its digit is not one of the fresh atoms', so a dimension's overlap
    would vary along atoms it does not name, and no product of group sums counts the blocks a
    group holds (``f32[6@(x:(3)2)] -> f32[6@y]{U:x}`` on ``{x=6,y=2}`` once claimed 4 missing
    elements where every group held its new block whole)."""
    mesh = old.mesh
    fresh = partial_axes(old, new, merged).fresh
    if not _group_sums_countable(old, new, fresh):
        return None
    widths = overlap_widths(old, new)  # checks sizes and the mesh first
    held = np.ones(mesh.size, dtype=np.int64)
    for width, atoms in zip(widths, dims_atoms(old)):
        # a dimension's overlap varies only along its own atoms: sum over the fresh ones among them
        mine = tuple(a for a in fresh if a in atoms)
        held = held * (group_sums(mesh, mine, width) if mine else width)
    out = new.local_size - held
    out.setflags(write=False)  # cached: shared by every caller
    return out


def _group_sums_countable(old: ShardingType, new: ShardingType, fresh: tuple[Atom, ...]) -> bool:
    """Where ``group_missing`` counts (it is ``None`` elsewhere, and ``sampled_provider_cells`` 0):
    the group sums fit int64, and both types are on the mesh's prime atoms."""
    return (max(new.local_shape, default=1) * math.prod(a.size for a in fresh) < 1 << 62
            and on_prime_atoms(old) and on_prime_atoms(new))


def provider_cells(old: ShardingType, new: ShardingType) -> int:
    """A floor on the most cells one device receives in ``schedule(old, new)``, without its rows
    (0 where ``group_missing`` cannot tell). Every cell a group lacks entirely goes to one member
    (``fresh_providers``: the first, as no member holds it; without fresh atoms the group is the device
    itself), which receives at least one cell for it: a partial as the root, or the forwarded sum.
    Exact without unreduced axes in ``old`` (each such cell is one cell received). Phases are
    coloured apart, so the schedule has at least this many rounds (the synthesizer's round floor,
    ``redist.synth.floors.pending_sum_rounds``)."""
    cell = math.prod(cell_grid(old, new).cell)
    floors = [group_missing(old, new, merged) for merged in merge_modes(old, new)]
    return min(0 if m is None else int(m.max()) // cell for m in floors)


@memo(Scope.TYPE, maxsize=4096)
def sampled_provider_cells(old: ShardingType, new: ShardingType) -> int:
    """``provider_cells`` read on two devices only, the first and the last (every coordinate 0,
    every coordinate at its top), so at most it: the most cells one of them must receive is a
    floor on the most any device must. No per-device table: per dimension, each sampled device's
    old blocks summed over its group (``group_missing``'s fresh atoms, which its new block does
    not depend on), a few integer operations. On 13 axes of 2 it is the round floor that prunes
    exchange starts (it did, where ``provider_cells`` did, for 62 of 66 of one ladder rung's
    prefixes), at a fraction of ``group_missing``'s per-device tables, so
    ``redist.synth.floors.bytes_floor`` reads it before those."""
    cell = math.prod(cell_shape(old, new))
    return min(sampled_missing(old, new, merged) // cell for merged in merge_modes(old, new))


def sampled_missing(old: ShardingType, new: ShardingType, merged: bool) -> int:
    """The greater ``group_missing`` of the first device and the last; 0 where it would be
    ``None`` or a group is past ``SAMPLED_MAX_MEMBERS``. A dimension's block index is mixed radix
    over its atoms, major first: 0 on the first device, the block count less one on the last;
    a member of the group differs by its digits on the fresh atoms, each times its stride."""
    fresh = partial_axes(old, new, merged).fresh
    if not _group_sums_countable(old, new, fresh):
        return 0
    held = [1, 1]
    for atoms_old, atoms_new, lo, ln in zip(dims_atoms(old), dims_atoms(new), old.local_shape, new.local_shape):
        offsets = [0]  # each member's block index less the sampled device's, on the first device
        stride = 1
        for a in reversed(atoms_old):
            if a in fresh:
                offsets = [o + k * stride for o in offsets for k in range(a.size)]
                if len(offsets) > SAMPLED_MAX_MEMBERS:
                    return 0
            stride *= a.size
        top_new = math.prod(a.size for a in atoms_new) - 1
        top_old = stride - 1 - (offsets[-1] if offsets else 0)  # the last device's fresh digits at their top too
        for i, (s_new, base) in enumerate(((0, 0), (top_new * ln, top_old))):
            width = 0
            for o in offsets:
                s = (base + o) * lo
                width += max(0, min(s + lo, s_new + ln) - max(s, s_new))
            held[i] *= width
    return new.local_size - min(held)


def merge_modes(old: ShardingType, new: ShardingType) -> tuple[bool, ...]:
    """The exchanges ``schedule(old, new)`` may be (``merges``), for floors that must hold for
    either without routing to learn which: the merging one only where the types share an
    unreduced atom and within ``MERGED_MAX_ROWS`` (``may_merge``)."""
    return (False, True) if may_merge(old, new) else (False,)


def may_merge(old: ShardingType, new: ShardingType) -> bool:
    """Whether ``merges`` considers the merging exchange at all: the types share an unreduced atom
    and its rows are within ``MERGED_MAX_ROWS``. Floors take the lesser of both exchanges' only
    here: a lower floor elsewhere would only open more candidates to routing."""
    if not unreduced_atoms(old) & unreduced_atoms(new):
        return False
    rows = old.mesh.size * math.prod(cell_grid(old, new).per_block) * partial_axes(old, new, True).n_reduced
    return rows <= limits.MERGED_MAX_ROWS


def group_missing_total(old: ShardingType, new: ShardingType) -> int:
    """Elements summed over groups that ``group_missing`` says each group must receive (0 where it
    cannot tell): a floor on the elements any exchange ``old -> new`` receives in all (the least
    over the exchanges ``schedule`` may be, ``merge_modes``)."""
    return min(_group_missing_total(old, new, merged) for merged in merge_modes(old, new))


def _group_missing_total(old: ShardingType, new: ShardingType, merged: bool) -> int:
    missing = group_missing(old, new, merged)
    if missing is None:
        return 0
    n_group = math.prod(a.size for a in partial_axes(old, new, merged).fresh)
    if int(missing.max()) <= (1 << 62) // len(missing):
        return int(missing.sum()) // n_group
    return sum(int(x) for x in missing.tolist()) // n_group


def reduced_cells(old: ShardingType, new: ShardingType) -> int:
    """A floor on the cells ``routing(old, new)`` receives where ``new`` sums ``k > 1`` partials,
    without rows (0 otherwise): exact where the old type has one replica. ``_route_reduced``
    receives, per need (global cell, kept partial), ``k - 1`` partials at the root (``k`` where no
    target holds the cell) and the sum at each other target: one per target group (devices
    differing only along fresh atoms share a new block and a kept partial), so in all
    ``needs * (k - 1) + groups * cells per block - held``, where ``held`` (needs whose root holds a
    partial of the chosen replica) is at most the needs some target holds in any replica. Two
    devices' old-and-new overlaps are equal or disjoint (each type's blocks tile the array), equal
    exactly when they agree on the atoms either type shards and on the kept atoms, so that count
    is the summed overlap divided by how many devices share those coordinates. Exact integers.
    Where the types share an unreduced atom, the lesser of that and the merging exchange's floor."""
    direct = direct_reduced_cells(old, new)
    if direct == 0 or not may_merge(old, new):
        return direct
    return min(direct, _merged_reduced_cells(old, new, cell_grid(old, new)))


def direct_reduced_cells(old: ShardingType, new: ShardingType) -> int:
    """``reduced_cells`` of the partial-by-partial exchange (``_route_reduced``) alone: ``merges``
    routes the merging exchange first and skips routing this one where it cannot do better."""
    axes = partial_axes(old, new)
    k = axes.n_reduced
    if k == 1:
        return 0
    grid = cell_grid(old, new)
    cell = math.prod(grid.cell)
    n_kept, n_fresh = (math.prod(a.size for a in atoms) for atoms in (axes.kept, axes.fresh))
    needs = math.prod(n // c for n, c in zip(old.shape, grid.cell)) * n_kept
    targets = old.mesh.size // n_fresh * math.prod(grid.per_block)
    distinct = math.prod(a.size for a in {a for t in (old, new) for d in dims_atoms(t) for a in d} | set(axes.kept))
    held = overlap_total(old, new) // cell * distinct // old.mesh.size
    return needs * (k - 1) + targets - held


def _merged_reduced_cells(old: ShardingType, new: ShardingType, grid: CellGrid) -> int:
    """The merging exchange's floor where partials are summed (``k_red > 1``): no group of
    devices differing along the new unreduced atoms covers more than the kept partials of one
    reduced coordinate, so none is complete; per cell the root receives at least ``k - kept``
    partials and every other target group one cell."""
    axes = partial_axes(old, new, True)
    n_kept = math.prod(a.size for a in unreduced_atoms(old) & unreduced_atoms(new))
    n_cells = math.prod(n // c for n, c in zip(old.shape, grid.cell))
    targets = old.mesh.size // math.prod(a.size for a in axes.fresh) * math.prod(grid.per_block)
    return n_cells * (axes.n_reduced - n_kept) + targets - n_cells


@memo(Scope.TYPE, maxsize=256)
def rooted_rounds(old: ShardingType, new: ShardingType) -> int:
    """A floor on ``routing(old, new).rounds`` where ``new`` sums ``k > 1`` partials (0 otherwise),
    from device 0's new block alone, no rows. ``_route_reduced`` roots each need at its first
    holding target, else its first target in device order (rows are device-major). Let ``S`` be the
    devices sharing device 0's new block and kept partial (each need of that block targets only
    them) and ``R`` the cells of the block that no device of ``S`` holds in any old block, replica
    or partial. For each, no target holds it, so device 0 is its root: without fresh atoms it is a
    target, with them the first member of its group (index 0) provides a cell no member holds.
    Device 0 then receives all ``k`` partials of each (phase A: ``k R`` cells, hence rounds), and
    sends each sum to its ``t - 1`` other targets (one per fresh group of ``S``): as a star ``t - 1``
    per need in one level, as a doubling tree one per need at every level ``l`` with
    ``2**l <= t - 1`` (target ``2**l`` hears from the root). Phase B's rounds sum each level's
    degree, so the routing has at least ``R (k + bit_length(t - 1))`` rounds. ``routing`` routes
    one class (``redist.exchange_classes``), so the floor is read on the same types. Types that
    share an unreduced atom may route by the merging exchange instead (``merges``), which roots
    differently: 0 wherever ``may_merge`` lets it try; past ``MERGED_MAX_ROWS`` (every pending
    pair on 13 axes of 2) they route partial by partial, and the kept atoms only narrow ``S``."""
    if partial_axes(old, new).n_reduced == 1 or may_merge(old, new):
        return 0  # no partials summed, or perhaps the merging exchange (a floor of 0 is always sound)
    c = classes(old, new)
    if c is not None:
        return rooted_rounds(c.quotient_old, c.quotient_new)
    axes = partial_axes(old, new)
    grid = cell_grid(old, new)
    if axes.n_reduced == 1 or math.prod(grid.per_block) > ROOTED_MAX_CELLS:
        return 0
    try:
        check_index_range(old)
        check_index_range(new)
    except StepError:
        return 0
    closed = rooted_closed(old, new, axes, grid)
    return closed if closed is not None else rooted_tables(old, new, axes, grid)


def rooted_closed(old: ShardingType, new: ShardingType, axes: PartialAxes, grid: CellGrid) -> int | None:
    """``rooted_rounds``' count without per-device tables. A device shares device 0's new block
    and kept partial exactly when its digit is 0 on every atom of the new type's dimensions and
    on every kept atom (``C``); the others range freely. So the old blocks those devices hold
    are, per dimension, the indices whose digits on ``C``'s atoms are 0, and a cell of device
    0's new block is held when its old block is such an index in every dimension: the held cells
    are a product over dimensions of counts along each, read off the old blocks the new block
    spans there (cells of ``gcd`` size, so each lies in one). ``None`` (the tables decide) where
    a type is not on the mesh's prime atoms (the digit sets would not be a product) or a
    dimension spans more than ``ROOTED_CLOSED_MAX_BLOCKS`` old blocks."""
    if not (on_prime_atoms(old) and on_prime_atoms(new)):
        return None
    fixed = {a for d in dims_atoms(new) for a in d} | set(axes.kept)
    held = 1
    for atoms, lo, ln, c in zip(dims_atoms(old), old.local_shape, new.local_shape, grid.cell):
        spanned = -(-ln // lo)  # old blocks meeting [0, ln)
        if spanned > ROOTED_CLOSED_MAX_BLOCKS:
            return None
        count = 0
        for o in range(spanned):
            if _digits_free(o, atoms, fixed):
                count += (min((o + 1) * lo, ln) - o * lo) // c
        held *= count
    n_rooted = math.prod(grid.per_block) - held
    targets = old.mesh.size // math.prod(a.size for a in fixed) // math.prod(a.size for a in axes.fresh)
    return n_rooted * (axes.n_reduced + (targets - 1).bit_length())


def _digits_free(index: int, atoms: tuple[Atom, ...], fixed: set[Atom]) -> bool:
    """Whether block ``index`` (mixed radix over ``atoms``, major first) has digit 0 on every
    atom of ``fixed``."""
    for a in reversed(atoms):
        if a in fixed and index % a.size:
            return False
        index //= a.size
    return True


def rooted_tables(old: ShardingType, new: ShardingType, axes: PartialAxes, grid: CellGrid) -> int:
    """``rooted_rounds``' count off the per-device block tables (``rooted_closed``'s fallback;
    ``rooted_rounds`` has checked the index range)."""
    old_block, new_block = block_indices(old), block_indices(new)
    kept = atoms_index(old.mesh, axes.kept)
    mates = np.flatnonzero((new_block == new_block[0]).all(axis=1) & (kept == kept[0]))
    blocks = tuple(n // b for n, b in zip(old.shape, old.local_shape))
    base = new_block[:1] * (np.array(new.local_shape, dtype=np.int64) // np.array(grid.cell, dtype=np.int64))
    cell_old = held_blocks(grid, base, np.array(old.local_shape, dtype=np.int64), blocks)[0]
    n_rooted = int((~np.isin(cell_old, ravel_index(old_block[mates], blocks))).sum())
    targets = len(mates) // math.prod(a.size for a in axes.fresh)
    return n_rooted * (axes.n_reduced + (targets - 1).bit_length())

