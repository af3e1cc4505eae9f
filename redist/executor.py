"""The JAX executor: a plan as one ``shard_map`` program of JAX collectives.

``apply_local(plan, x)`` is the per-device body: it must run inside a ``jax.shard_map`` over a JAX
mesh with the plan's axes (names and sizes, in order), every mesh axis manual and
``check_vma=False`` (the partitioner calls it inside its own program). Each step lowers to the
JAX collective whose per-device semantics are exactly those of ``redist.simulate``:

=================  =====================================================================
``DynSlice``       ``lax.dynamic_slice_in_dim`` at the device's group index (``axis_index``)
``AllGather``      ``lax.all_gather(tiled=True)``; a run of them most minor dimension first
``AllToAll``       ``lax.all_to_all`` on ``dst_dim`` reshaped to ``(g, n/g)``, sources moved to ``src_dim``
``ReduceScatter``  ``lax.psum_scatter`` on ``dim``'s ``g`` chunks moved to the front
``AllReduce``      ``lax.psum``
``Discard``        keep the value where the group index is 0, zeros elsewhere
``PadUnreduced``   ``dynamic_update_slice`` of the block into zeros
``Permute``,       one ``lax.ppermute`` of one cell per round of ``redist.exchange.schedule``,
``Exchange``       added into zeros at the receiver's offset (local copies first); a round marked
                   ``from_output`` forwards a cell of the new block (a completed sum); whole
                   blocks: one ``ppermute`` permuting all devices (keepers to themselves); cells
                   that are leading slabs, each landing once: one concatenate, no zero fill
``ExchangeAll``    the exchange's cells as the slots of one ``lax.all_to_all`` over the axes its
``ToAll``          messages cross (``redist.exchange_a2a``); reshapes and transposes around it
                   where every device's cells are a translate of one pattern
=================  =====================================================================

Groups. A step over several (sub-)axes is one collective over the flattened group, members in
mixed-radix order with the step's first axis most significant. The collective is issued over the
mesh axes the step touches (``axis_name`` in mesh order) and, unless the group is exactly those
axes in mesh order, with ``axis_index_groups`` listing every group's members in that order. That
is how sub-axes (a factor of a mesh axis) and axis orders other than the mesh's are expressed;
JAX 0.10.2 supports ``axis_index_groups`` for all five collectives inside ``shard_map`` when
``check_vma=False``, on CPU too (the tests check every kind against the simulator). We never rely
on JAX flattening a tuple ``axis_name`` in the tuple's order: in JAX 0.10.2 ``all_gather`` and
``axis_index`` follow the tuple's order (first axis major) but ``ppermute`` numbers devices in
mesh order whatever the tuple's order, so tuples are always passed in mesh order.

``check_vma=False`` is required: with JAX's varying-axes checks on, a gather's output (replicated
in our types) is typed varying and ``out_specs`` that replicate would be rejected.

``compile_plan(plan)`` is one ``jax.jit`` of one ``jax.shard_map`` (so XLA compiles the whole
plan as a single program), with in/out specs from the plan's source and destination types;
``run_plan(plan, x)`` checks ``x`` against the source type and runs it. Unreduced types are
supported end to end: in JAX 0.10.2 ``PartitionSpec(..., unreduced={...})`` works as a
``shard_map`` in/out spec (with ``check_vma=False``) on a mesh whose unreduced axes are Explicit
(the axis type ``Mesh.to_jax`` uses), the local values being the partials; ``run_plan`` raises
``ExecutionError`` for an unreduced plan on Auto axes, which JAX rejects. Nothing goes through the host, so the same program runs across
``jax.distributed`` processes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.array import ArrayImpl
from jax.sharding import NamedSharding

from redist.atoms import Atom, atoms_of_axes, atoms_size, primes
from redist.errors import ExecutionError
from redist.exchange import Round, schedule
from redist.exchange_a2a import Slots, slots
from redist.facets import FacetTable
from redist.plan import Plan
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Mesh, ShardingType, ShardingTypeError
from spmd_types.dtypes import is_16bit_float
from spmd_types.jax_interop import from_named_sharding, to_partition_spec
from spmd_types.memo import Scope, memo
from spmd_types.memo import clear as memo_clear
from spmd_types.mesh import subaxis_digit, subaxis_stride

__all__ = ["LOWER", "Lowering", "apply_local", "clear_cache", "collective_group", "compile_plan", "lower_step",
           "run_plan"]


# -- groups ------------------------------------------------------------------------------------------


@memo(Scope.MESH)
def collective_group(mesh: Mesh, atoms: tuple[Atom, ...]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...] | None]:
    """(``axis_name``, ``axis_index_groups``) of a collective over ``atoms`` (major first).

    ``axis_name`` is the tuple of mesh axes the atoms belong to, in mesh order; indices along it
    are row-major over those axes. ``axis_index_groups`` is ``None`` when the group is exactly
    those axes in that order (one group, identity order), else every group with its members
    ordered by their mixed-radix index over ``atoms``.
    """
    names = tuple(n for n in mesh.names if any(a.name == n for a in atoms))
    sizes = [mesh.axis_size(n) for n in names]
    total = math.prod(sizes)
    coords = np.array(list(np.ndindex(*sizes)), dtype=np.int64).reshape(total, len(names))
    key = coords.copy()
    idx = np.zeros(total, dtype=np.int64)
    for a in atoms:
        i, n = names.index(a.name), mesh.axis_size(a.name)
        digit = subaxis_digit(coords[:, i], n, a.pre, a.size)
        idx = idx * a.size + digit
        key[:, i] -= digit * subaxis_stride(n, a.pre, a.size)
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for lin in range(total):
        groups.setdefault(tuple(key[lin].tolist()), []).append((int(idx[lin]), lin))
    ordered = tuple(tuple(v for _, v in sorted(m)) for _, m in sorted(groups.items()))
    if len(ordered) == 1 and ordered[0] == tuple(range(total)):
        return names, None
    return names, ordered


def _axis_name(names: tuple[str, ...]) -> Any:
    return names[0] if len(names) == 1 else names


def _group_index(mesh: Mesh, atoms: tuple[Atom, ...]) -> jax.Array:
    """This device's mixed-radix index over ``atoms`` (major first), from ``lax.axis_index``."""
    idx: Any = jnp.int32(0)
    for a in atoms:
        idx = idx * a.size + subaxis_digit(lax.axis_index(a.name), mesh.axis_size(a.name), a.pre, a.size)
    return jnp.asarray(idx, dtype=jnp.int32)


def _linear_index(mesh: Mesh) -> jax.Array:
    """This device's row-major position in the mesh (the numbering of schedules and simulators)."""
    lin: Any = jnp.int32(0)
    for name, size in mesh.axes:
        lin = lin * size + lax.axis_index(name)
    return jnp.asarray(lin, dtype=jnp.int32)


# -- steps -------------------------------------------------------------------------------------------


def _lookup(table: np.ndarray, lin: jax.Array) -> Any:
    """Per-device row of ``table`` (constant when all rows agree, so XLA sees static offsets)."""
    if table.shape[0] == 0 or (table == table[0]).all():
        row = table[0] if table.shape[0] else np.zeros(table.shape[1:], table.dtype)
        return [int(v) for v in np.atleast_1d(row)] if table.ndim > 1 else bool(row)
    return jnp.asarray(table.astype(np.int32) if table.dtype != bool else table)[lin]


def _offsets(table: np.ndarray, lin: jax.Array, rank: int) -> list[Any]:
    row = _lookup(table, lin)
    if isinstance(row, list):
        return row
    return [row[i] for i in range(rank)]


def _add_cell(out: jax.Array, piece: jax.Array, valid: Any, recv_off: list[Any], sums: bool = True) -> jax.Array:
    """``piece`` added into ``out`` at ``recv_off`` where ``valid``. Without partial sums
    (``sums=False``: each cell lands once, on zeros) it is written, not added: XLA:CPU widens a 16-bit
    float add to f32 over the whole block at every cell (docs/design.md 8.2)."""
    if valid is False:
        return out
    if not sums and valid is True:
        return lax.dynamic_update_slice(out, piece, recv_off)
    cur = lax.dynamic_slice(out, recv_off, piece.shape)
    new = cur + piece if sums else piece
    return lax.dynamic_update_slice(out, new if valid is True else jnp.where(valid, new, cur), recv_off)


def _whole_block_swap(sch: Any, before: ShardingType, after: ShardingType) -> bool:
    """A permute of whole blocks: one round, and every device either keeps its block or receives one
    (no partial sums, no forwarding). It lowers to a single ``ppermute`` and a select, without the
    zero-filled receive buffer of the general schedule."""
    if sch.cell != tuple(before.local_shape) or sch.cell != tuple(after.local_shape):
        return False
    if len(sch.rounds) > 1 or len(sch.local_copies) > 1:
        return False
    if any(r.from_output for r in sch.rounds):
        return False
    keep = sch.local_copies[0].recv_valid if sch.local_copies else np.zeros(before.mesh.size, bool)
    recv = sch.rounds[0].recv_valid if sch.rounds else np.zeros(before.mesh.size, bool)
    return bool(np.all(keep ^ recv))


def _block_permutation(pairs: list[tuple[int, int]], keep: np.ndarray, before: ShardingType,
                       after: ShardingType) -> list[tuple[int, int]] | None:
    """A whole-block permute as one permutation of the devices, keepers sending to themselves, so
    that it is a single ``collective-permute`` (as XLA's partitioner emits) with no select pass.
    The schedule may pick a keeper as the source of a block that another holder could send; any
    holder of the same block will do, so such receivers are re-matched to a free holder (kept
    pairs first, then the schedule's). ``None`` where blocks are partials (their bounds do not
    name them) or no free holder is left (the select lowering then runs)."""
    if before.unreduced or after.unreduced:
        return None
    src, dst = before.blocks(), after.blocks()
    assert isinstance(src, np.ndarray) and isinstance(dst, np.ndarray)
    keepers = [int(d) for d in np.flatnonzero(keep)]
    perm = [(d, d) for d in keepers]
    busy, filled = set(keepers), set(keepers)
    for s, t in pairs:
        if s not in busy:
            perm.append((s, t))
            busy.add(s)
            filled.add(t)
    for t in sorted({t for _, t in pairs} - filled):
        free = next((h for h in range(before.mesh.size) if h not in busy and (src[h] == dst[t]).all()), None)
        if free is None:
            return None
        perm.append((free, t))
        busy.add(free)
    return sorted(perm)


def _point_to_point(before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    mesh = before.mesh
    sch = schedule(before, after)
    rank = before.rank
    lin = _linear_index(mesh)
    if _whole_block_swap(sch, before, after):
        if not sch.rounds:
            return x
        keep = sch.local_copies[0].recv_valid if sch.local_copies else np.zeros(mesh.size, bool)
        perm = _block_permutation(list(sch.rounds[0].pairs), keep, before, after)
        if perm is not None:  # keepers are self-pairs of the same permute: no select, no copy
            return lax.ppermute(x, _axis_name(mesh.names), perm=perm)
        received = lax.ppermute(x, _axis_name(mesh.names), perm=list(sch.rounds[0].pairs))
        return jnp.where(_lookup(keep, lin), x, received)
    sums = bool(before.unreduced)
    cell = sch.cell
    names = mesh.names
    rounds: Sequence[Round] = sch.local_copies + sch.rounds
    owner = None if sums else _owners([(r.recv_valid, r.recv_offset) for r in rounds], after.local_shape, cell,
                                      _as_bits(before))
    if owner is not None:  # every cell lands once: the block is joined from them, no zero fill
        pieces = [_round_piece(r, x, lin, cell, names) for r in rounds]
        return _assemble(pieces, owner, after.local_shape, cell, lin)
    # A forwarding round sends a cell of the new block (a sum completed in earlier rounds); every
    # cell travels at the values' width, as bit patterns.
    return _filled(after, x.dtype, sums, [
        Delivery(_forwarded(r, lin, cell, names, x.dtype) if r.from_output
                 else _round_piece(r, x, lin, cell, names, x.dtype),
                 _lookup(r.recv_valid, lin), _offsets(r.recv_offset, lin, rank))
        for r in rounds])


def _forwarded(r: Round, lin: jax.Array, cell: Sequence[int], names: tuple[str, ...],
               dtype: Any) -> Callable[[jax.Array], jax.Array]:
    """A forwarding round's cell, cut from the new block as filled by the rounds before it."""
    return lambda out: _round_piece(r, out, lin, cell, names, dtype)


def _round_piece(r: Round, x: jax.Array, lin: jax.Array, cell: Sequence[int], names: tuple[str, ...],
                 dtype: Any = None) -> jax.Array:
    """The cell a round (or local copy) delivers to each device: cut from ``x`` (the old block, or
    the new one for a forwarding round), in ``dtype`` (default ``x``'s), moved as bit patterns."""
    piece = lax.dynamic_slice(x, _offsets(r.send_offset, lin, x.ndim), cell)
    piece = piece if dtype is None else piece.astype(dtype)
    if not r.pairs:
        return piece
    return _on_bits(piece, lambda p: lax.ppermute(p, _axis_name(names), perm=list(r.pairs)))


MAX_CHOICES = 2
"""Pieces one cell of the new block may come from across devices for ``_assemble``: each is one
more read per element (a select); more than 2 were not measured (docs/design.md 8.2)."""
MAX_SLABS = 8
"""Slabs ``_assemble`` joins (one concatenate operand each); measured with 2."""


def _as_bits(t: ShardingType) -> bool:
    """The block moves as 16-bit float bit patterns (``_values_moved``): converted back by one
    elementwise pass at the end, which XLA:CPU fuses into whatever writes the new block."""
    return not t.unreduced and is_16bit_float(t.dtype)


def _slab_grid(shape: Sequence[int], cell: Sequence[int], anywhere: bool = False) -> tuple[int, ...] | None:
    """The cell grid of a block when its cells are slabs cut along one dimension, with only
    extent-1 dimensions before it unless ``anywhere`` (``None`` otherwise): only there does XLA:CPU
    fuse the concatenate (and its selects) into one pass. ``anywhere``: 16-bit floats moved as bits,
    whose conversion back fuses with the zero-filled block's updates anyway (docs/design.md 8.2)."""
    if any(n % c for n, c in zip(shape, cell)):
        return None
    grid = tuple(n // c for n, c in zip(shape, cell))
    cut = [d for d, m in enumerate(grid) if m > 1]
    lead = anywhere or math.prod(shape[: cut[0] if cut else 0]) == 1
    return grid if len(cut) <= 1 and lead else None


def _owners(placed: Sequence[tuple[np.ndarray, np.ndarray]], shape: Sequence[int],
            cell: Sequence[int], anywhere: bool = False) -> np.ndarray | None:
    """``[devices, cells]``: which of the ``placed`` pieces (``(recv_valid, recv_offset)`` each)
    lands on each cell of every device's new block (row-major over the cell grid; -1: none, the
    cell stays zeros). ``None`` where ``_assemble`` does not apply: cells that are not slabs
    (``_slab_grid``, ``anywhere`` passed on), a piece off the cell grid, a cell filled twice (a
    sum), or more than ``MAX_CHOICES`` pieces for one cell."""
    grid = _slab_grid(shape, cell, anywhere)
    if grid is None or not placed or math.prod(grid) > MAX_SLABS:
        return None
    cells = np.asarray(cell, dtype=np.int64)
    owner = np.full((placed[0][0].shape[0], math.prod(grid)), -1, dtype=np.int64)
    for i, (valid, offset) in enumerate(placed):
        devs = np.flatnonzero(valid)
        off = np.asarray(offset)[devs]
        if (off % cells).any():
            return None
        at = np.ravel_multi_index(tuple((off // cells).T), grid) if len(cell) else np.zeros(len(devs), np.int64)
        if (owner[devs, at] != -1).any():
            return None
        owner[devs, at] = i
    if max(len(np.unique(owner[:, c])) for c in range(owner.shape[1])) > MAX_CHOICES:
        return None
    return owner


def _assemble(pieces: Sequence[jax.Array], owner: np.ndarray, shape: Sequence[int], cell: Sequence[int],
              lin: jax.Array) -> jax.Array:
    """The new block joined from its cells (``owner``: which piece each is on each device, see
    ``_owners``): one concatenate, each operand a piece, or a select among the few pieces that
    land there on different devices (zeros where none does). XLA fuses it into one pass writing
    the block, in place of a zero-filled block and a ``dynamic_update_slice`` per piece."""
    zeros = jnp.zeros(cell, dtype=pieces[0].dtype)
    cells = []
    for c in range(owner.shape[1]):
        col = owner[:, c]
        first, *rest = np.unique(col).tolist()
        val = pieces[first] if first >= 0 else zeros
        for i in rest:
            val = jnp.where(_lookup(col == i, lin), pieces[i], val)
        cells.append(val)
    cut = next((d for d, (n, k) in enumerate(zip(shape, cell)) if n > k), 0)
    return cells[0] if len(cells) == 1 else lax.concatenate(cells, cut)


def _collective_args(mesh: Mesh, atoms: tuple[Atom, ...]) -> dict[str, Any]:
    names, groups = collective_group(mesh, atoms)
    args: dict[str, Any] = {"axis_name": _axis_name(names)}
    if groups is not None:
        args["axis_index_groups"] = [list(g) for g in groups]
    return args


Following = type | None
"""The class of the step after a run in its plan (``None`` at the end): a lowering may shape its
result for the step that reads it (``concat_joins_before``)."""


def step_after(steps: Sequence[Step], j: int) -> Following:
    """The class of ``steps[j]``, the step after a run ending before ``j`` (``None`` past the end)."""
    return type(steps[j]) if j < len(steps) else None


class Lowering(NamedTuple):
    """How a step class lowers: ``fn(run, before, after, x, following)`` takes a *run* of
    consecutive steps of the class (one step unless ``joins``: consecutive slices become one
    ``dynamic_slice``) and the class of the step after it (``Following``)."""

    fn: Callable[[Sequence[Any], ShardingType, ShardingType, jax.Array, Following], jax.Array]
    joins: bool = False


LOWER: FacetTable[Lowering] = FacetTable("lower", "redist.executor.LOWER")


def _group(step: Step, t: ShardingType) -> tuple[tuple[Atom, ...], int]:
    atoms = atoms_of_axes(t.mesh, step.group_axes())
    return atoms, atoms_size(atoms)


def _one(fn: Callable[[Any, ShardingType, ShardingType, jax.Array], jax.Array]) -> Lowering:
    """A lowering of single steps; a group of one device (size-1 axes) is the identity."""
    return _one_before(lambda step, before, after, x, following: fn(step, before, after, x))


def _one_before(fn: Callable[[Any, ShardingType, ShardingType, jax.Array, Following], jax.Array]) -> Lowering:
    """``_one`` for a lowering that also reads the class of the step after it."""

    def run(steps: Sequence[Any], before: ShardingType, after: ShardingType, x: jax.Array,
            following: Following = None) -> jax.Array:
        (step,) = steps
        return x if step.group_axes() and _group(step, before)[1] == 1 else fn(step, before, after, x, following)

    return Lowering(run)


def _slices(steps: Sequence[Any], before: ShardingType, after: ShardingType, x: jax.Array,
            following: Following = None) -> jax.Array:
    """A run of ``DynSlice`` steps as one ``dynamic_slice``: each step keeps chunk ``idx`` of the
    current extent, so offsets accumulate as ``off += idx * new_size`` per dimension."""
    shape = list(x.shape)
    offsets: list[Any] = [0] * len(shape)
    for step in steps:
        atoms, g = _group(step, before)
        if g > 1:
            shape[step.dim] //= g
            offsets[step.dim] = offsets[step.dim] + _group_index(before.mesh, atoms) * shape[step.dim]
    return lax.dynamic_slice(x, [jnp.asarray(o, jnp.int32) for o in offsets], shape)


LOWER.register(DynSlice)(Lowering(_slices, joins=True))


@_one
def _discard(step: Discard, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    atoms, _ = _group(step, before)
    return jnp.where(_group_index(before.mesh, atoms) == 0, x, jnp.zeros_like(x))


@_one
def _pad(step: PadUnreduced, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    atoms, g = _group(step, before)
    shape = list(x.shape)
    size = shape[step.dim]
    shape[step.dim] = size * g
    zeros = jnp.zeros(shape, dtype=x.dtype)
    return lax.dynamic_update_slice_in_dim(zeros, x, _group_index(before.mesh, atoms) * size, axis=step.dim)


def _args(step: Step, t: ShardingType) -> dict[str, Any]:
    return _collective_args(t.mesh, _group(step, t)[0])


def _all_gathers(steps: Sequence[AllGather], before: ShardingType, after: ShardingType, x: jax.Array,
                 following: Following = None) -> jax.Array:
    """A run of gathers, the most minor dimension first: gathers on different dimensions commute
    (each coarsens only its own dimension's block index), and XLA:CPU gathers a non-leading
    dimension through a transposing copy before and after the collective, so those copies are
    cheapest while the block is still small; the major dimension, gathered last, needs none (XLA's
    partitioner orders them so too). Gathers on one dimension keep their order (stable sort).
    A non-leading gather runs on a new leading dimension and one reshaping copy puts the blocks in
    place (``_gather_into``), not through XLA:CPU's two transposing copies."""
    for step in sorted(steps, key=lambda s: -s.dim):
        if _group(step, before)[1] > 1:
            if math.prod(x.shape[: step.dim]) > 1:
                x = _gather_into(x, step.dim, _args(step, before))
            else:
                x = lax.all_gather(x, axis=step.dim, tiled=True, **_args(step, before))
    return x


def _gather_into(x: jax.Array, d: int, args: dict[str, Any], concat: bool | None = None) -> jax.Array:
    """``all_gather(tiled=True)`` on dimension ``d``, as a gather stacking the blocks on a new
    leading dimension (contiguous, no layout change) and one pass putting them in place
    (``_join``): XLA:CPU instead gives the gathered dimension the major layout, a transposing copy
    before and after the collective (docs/design.md 8.2). ``concat``: force the join's form (``None``:
    ``concat_joins``)."""
    y = lax.all_gather(x, axis=0, tiled=False, **args)
    return _join(y, 0, d, concat_joins(y.shape, 0, d, x.dtype.itemsize == 2) if concat is None else concat)


@_one_before
def _all_to_all(step: AllToAll, before: ShardingType, after: ShardingType, x: jax.Array,
                following: Following) -> jax.Array:
    """On an explicit group dimension, the form XLA's own partitioner emits: ``dst_dim`` is
    reshaped to ``(g, n/g)`` (the destination index is the major part of the local extent), the
    all-to-all exchanges that ``g`` in place (received blocks come back indexed by source), and
    the source index moves in front of ``src_dim`` (sources major there) and merges with it, a move
    XLA fuses into the all-to-all's result (``tiled=True`` instead costs an extra full-size pass:
    docs/design.md 8.2). Where it is faster the all-to-all splits ``dst_dim`` itself and reshapes
    after (``splits_directly``); where another all-to-all reads the result, the join may be a
    concatenate (``concat_joins_before``)."""
    concat = True if concat_joins_before(x.dtype.itemsize, following) else None
    return _all_to_all_in_place(x, step.src_dim, step.dst_dim, _group(step, before)[1], _args(step, before), concat)


def _all_to_all_in_place(x: jax.Array, s: int, d: int, g: int, args: dict[str, Any],
                         concat: bool | None = None, direct: bool | None = None) -> jax.Array:
    """``d``'s ``g`` major chunks to the group's members, received chunks joined major on ``s``
    (``concat``: force the join's form; ``None``: ``concat_joins``). ``direct``: split ``d``
    itself rather than a ``(g, n/g)`` reshape of it (``None``: ``splits_directly``)."""
    shape = list(x.shape)
    split = shape[:d] + [g, shape[d] // g] + shape[d + 1:]
    if splits_directly(shape, s, d, x.dtype.itemsize) if direct is None else direct:
        y = lax.all_to_all(x, split_axis=d, concat_axis=d, tiled=True, **args).reshape(split)
    else:
        y = lax.all_to_all(x.reshape(split), split_axis=d, concat_axis=d, tiled=True, **args)
    return _join(y, d, s, concat_joins(y.shape, d, s, True) if concat is None else concat)


def splits_directly(shape: Sequence[int], s: int, d: int, itemsize: int) -> bool:
    """Whether the all-to-all should split dimension ``d`` of the block as it is (``tiled``)
    rather than a ``(g, n/g)`` reshape of it: for 32-bit elements when neither ``d`` nor the joined
    dimension ``s`` is the minor one. Why: XLA:CPU splits the reshape's send-buffer slices over
    threads where the direct slices stay one task (docs/design.md 4.2, "Splitting an all-to-all's
    block")."""
    return itemsize == 4 and math.prod(shape[d + 1:]) > 1 and math.prod(shape[s + 1:]) > 1


def concat_joins(shape: Sequence[int], k: int, d: int, loop_is_slow: bool) -> bool:
    """Whether ``_join`` should concatenate pieces (axis ``k`` of ``shape``) on dimension ``d`` of the
    rest rather than transpose them there: when ``d`` is the minor dimension and the transposing
    loop is one XLA:CPU runs slowly (``loop_is_slow``: it selects among an all-to-all's received
    pieces per element, or moves 16-bit elements). Measured in docs/design.md 4.2 ("Joining
    received pieces")."""
    rest = [n for i, n in enumerate(shape) if i != k]
    return loop_is_slow and math.prod(rest[d + 1:]) == 1


def concat_joins_before(itemsize: int, following: Following) -> bool:
    """Whether a 16-bit all-to-all's received pieces are joined by concatenate whatever the joined
    dimension, because the next step is another all-to-all: XLA:CPU then forwards the pieces
    straight into that all-to-all's send buffers instead of materialising the join. Not for 32-bit
    elements, nor before other collectives (docs/design.md 4.2, "Joining received pieces")."""
    return itemsize == 2 and following is AllToAll


def _join(y: jax.Array, k: int, d: int, concat: bool) -> jax.Array:
    """``y``'s pieces along axis ``k`` joined on dimension ``d`` of the rest, pieces major: by a
    concatenate or by a transpose and reshape (``concat_joins`` says which is faster)."""
    if concat:
        return lax.concatenate([lax.index_in_dim(y, i, k, keepdims=False) for i in range(y.shape[k])], d)
    out = [n for i, n in enumerate(y.shape) if i != k]
    out[d] *= y.shape[k]
    return jnp.moveaxis(y, k, d).reshape(out)


def mesh_ordered(mesh: Mesh, atoms: Sequence[Atom]) -> tuple[Atom, ...]:
    """``atoms`` in mesh order (axis, then major to minor): a group JAX runs without
    ``axis_index_groups`` when the atoms are whole mesh axes."""
    return tuple(sorted(atoms, key=lambda a: (mesh.position(a.name), a.pre)))


@_one
def _multi_all_to_all(step: MultiAllToAll, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """One all-to-all over the union of the moves' groups, members in mesh order whatever the
    moves' order (the order of a group is free inside one collective: only the local reorder
    around it depends on it). Each destination dimension is split into its move's atoms (major)
    and the rest; the atom axes go to the front in group order and are exchanged in place; the
    received axis (sources, same order) is split again and each move's atoms are merged in front
    of its source dimension. XLA fuses both reorders into the all-to-all's slices and result."""
    mesh = before.mesh
    per_move = [atoms_of_axes(mesh, m.axes) for m in step.moves]
    group = mesh_ordered(mesh, [a for atoms in per_move for a in atoms])
    dst_of = {m.dst_dim: atoms for m, atoms in zip(step.moves, per_move)}
    src_of = {m.src_dim: atoms for m, atoms in zip(step.moves, per_move)}
    labels: list[Any] = []
    sizes: list[int] = []
    for d, n in enumerate(x.shape):
        atoms = dst_of.get(d, ())
        labels += [*atoms, d]
        sizes += [a.size for a in atoms] + [n // atoms_size(atoms)]
    rest = [sizes[labels.index(d)] for d in range(x.ndim)]
    y = jnp.transpose(x.reshape(sizes), [labels.index(a) for a in (*group, *range(x.ndim))])
    y = y.reshape([atoms_size(group), *rest])
    y = lax.all_to_all(y, split_axis=0, concat_axis=0, tiled=True, **_collective_args(mesh, group))
    y = y.reshape([a.size for a in group] + rest)
    have: list[Any] = [*group, *range(x.ndim)]
    want = [label for d in range(x.ndim) for label in (*src_of.get(d, ()), d)]
    return jnp.transpose(y, [have.index(label) for label in want]).reshape(after.local_shape)


@_one
def _reduce_scatter(step: ReduceScatter, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """Always on the leading dimension: XLA:CPU gives a reduce-scatter's scattered dimension the
    major layout, so ``scatter_dimension=k > 0`` costs a full-size layout copy before *and* after
    it. Moving the ``g`` chunks of ``dim`` to the front costs one transpose (none when every
    dimension before ``dim`` has extent 1) and the result is then already in row-major order."""
    _, g = _group(step, before)
    shape = list(x.shape)
    d = step.dim
    y = jnp.moveaxis(x.reshape(shape[:d] + [g, shape[d] // g] + shape[d + 1:]), d, 0)
    out = list(shape)
    out[d] //= g
    return lax.psum_scatter(y, scatter_dimension=0, tiled=False, **_args(step, before)).reshape(out)


@_one
def _all_reduce_slice(step: AllReduceSlice, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    atoms, g = _group(step, before)
    total = lax.psum(x, **_args(step, before))
    size = x.shape[step.dim] // g
    return lax.dynamic_slice_in_dim(total, _group_index(before.mesh, atoms) * size, size, axis=step.dim)


@_one
def _all_reduce(step: AllReduce, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    return lax.psum(x, **_args(step, before))


def _values_moved(move: Callable[[ShardingType, ShardingType, jax.Array], jax.Array],
                  before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """``move(before, after, x)``, on 16-bit floats' bit patterns where it only copies values (no
    partial sums): XLA:CPU widens 16-bit float collectives, selects and updates to f32 (twice the
    wire bytes, and convert round trips at every cell: docs/design.md 8.2); unsigned integers of the
    same width move as they are. Moves that add partial sums get the whole block as it is: they move
    each piece as bits themselves and add in ``_sum_dtype`` (``_point_to_point``, ``_added_slots``)."""
    if before.unreduced:
        return move(before, after, x)
    return _on_bits(x, lambda y: move(before, after, y))


def _on_bits(x: jax.Array, move: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """``move(x)`` on a 16-bit float's bit patterns (uint16), for moves that only copy values."""
    if not is_16bit_float(x.dtype):
        return move(x)
    return lax.bitcast_convert_type(move(lax.bitcast_convert_type(x, jnp.uint16)), x.dtype)


def _moves_bits(lowering: Lowering) -> Lowering:
    """A typed collective that only moves values (gather, all-to-all), run on bit patterns
    (``_values_moved``: XLA:CPU widens 16-bit float collectives and their layout copies to f32)."""
    fn = lowering.fn

    def run(steps: Sequence[Any], before: ShardingType, after: ShardingType, x: jax.Array,
            following: Following = None) -> jax.Array:
        return _on_bits(x, lambda y: fn(steps, before, after, y, following))

    return lowering._replace(fn=run)


@_one
def _p2p(step: Step, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    return _values_moved(_point_to_point, before, after, x)


LOWER.register(Discard)(_discard)
LOWER.register(PadUnreduced)(_pad)
LOWER.register(AllGather)(_moves_bits(Lowering(_all_gathers, joins=True)))
LOWER.register(AllToAll)(_moves_bits(_all_to_all))
LOWER.register(MultiAllToAll)(_moves_bits(_multi_all_to_all))
LOWER.register(ReduceScatter)(_reduce_scatter)
LOWER.register(AllReduceSlice)(_all_reduce_slice)
LOWER.register(AllReduce)(_all_reduce)
LOWER.register(Permute, Exchange)(_p2p)


def _cell_grid_split(shape: Sequence[int], cell: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """(interleaved shape ``[m0, c0, m1, c1, ...]``, permutation to ``[m0, m1, ..., c0, c1, ...]``,
    cell grid ``[m0, m1, ...]``) of a block cut into cells."""
    grid = [n // c for n, c in zip(shape, cell)]
    split = [v for m, c in zip(grid, cell) for v in (m, c)]
    rank = len(cell)
    return split, [2 * i for i in range(rank)] + [2 * i + 1 for i in range(rank)], grid


def _one_dim_move(send: np.ndarray, recv: np.ndarray, cell: Sequence[int], old: Sequence[int],
                  new: Sequence[int]) -> tuple[int, int] | None:
    """``(s, d)`` when slot ``j`` (cut at ``send[j]`` of the old block, placed at ``recv[j]`` of
    the new) is chunk ``j`` of old dimension ``d`` and lands as chunk ``j`` of new dimension ``s``
    (``s != d``): exactly an ``AllToAll``'s move."""
    grids = [[n // c for n, c in zip(shape, cell)] for shape in (old, new)]
    cut = [[i for i, m in enumerate(grid) if m > 1] for grid in grids]
    if [len(c) for c in cut] != [1, 1] or cut[0] == cut[1] or len(send) != grids[0][cut[0][0]]:
        return None
    d, s = cut[0][0], cut[1][0]
    chunks = np.arange(len(send))
    if (send[:, d] // cell[d] != chunks).any() or (recv[:, s] // cell[s] != chunks).any():
        return None
    return s, d


def _digit_transpose(order: np.ndarray) -> tuple[list[int], list[int]] | None:
    """``(factors, perm)`` with ``arange(n).reshape(factors).transpose(perm).ravel() == order``:
    a reorder of slots that is a transpose of mixed-radix digits (axes listed in another order
    than the mesh's), which XLA fuses into the all-to-all's slices; a gather of the same
    reorder is a full-size pass of its own. ``None`` when ``order`` is no such transpose."""
    factors = primes(len(order))
    if len(factors) > 6:
        return None
    for perm in itertools.permutations(range(len(factors))):
        if (np.arange(len(order)).reshape(factors).transpose(perm).ravel() == order).all():
            return factors, list(perm)
    return None


def _reorder(y: jax.Array, order: np.ndarray) -> jax.Array:
    """``y[order]`` along the leading dimension, as a digit transpose where it is one."""
    if (order == np.arange(len(order))).all():
        return y
    digits = _digit_transpose(order)
    if digits is None:
        return y[order]
    factors, perm = digits
    rest = list(y.shape[1:])
    tail = list(range(len(factors), len(factors) + len(rest)))
    return jnp.transpose(y.reshape([*factors, *rest]), [*perm, *tail]).reshape(y.shape)


def _cells_to_slots(x: jax.Array, offsets: np.ndarray, cell: Sequence[int]) -> jax.Array:
    """``[slots, *cell]``: the cells of ``x`` starting at ``offsets`` (slots x rank, the same on
    every device, on the cell grid of ``x``), in slot order, by reshape + transpose (+ a static
    selection where slots are not the grid in order)."""
    split, perm, grid = _cell_grid_split(x.shape, cell)
    y = jnp.transpose(x.reshape(split), perm).reshape([math.prod(grid), *cell])
    send = np.ravel_multi_index(tuple((offsets // np.asarray(cell)).T), grid)
    return _reorder(y, send) if len(send) == len(set(send.tolist())) == y.shape[0] else y[send]


def _slots_to_cells(y: jax.Array, offsets: np.ndarray, cell: Sequence[int], shape: Sequence[int]) -> jax.Array:
    """The inverse of ``_cells_to_slots``: slot ``j`` of ``y`` placed at ``offsets[j]`` of a block of
    ``shape`` that the slots tile exactly."""
    split, perm, grid = _cell_grid_split(shape, cell)
    y = _reorder(y, np.argsort(np.ravel_multi_index(tuple((offsets // np.asarray(cell)).T), grid)))
    return jnp.transpose(y.reshape([*grid, *cell]), list(np.argsort(perm))).reshape(shape) if len(cell) else y.reshape(())


def _tiles(offsets: np.ndarray, cell: Sequence[int], shape: Sequence[int]) -> bool:
    """Cells at ``offsets`` (the same on every device) cover a block of ``shape`` exactly once."""
    if not (offsets == offsets[:1]).all() or any(n % c for n, c in zip(shape, cell)):
        return False
    cells = {tuple(o) for o in (offsets[0] // np.asarray(cell, dtype=offsets.dtype)).tolist()}
    return len(cells) == offsets.shape[1] == math.prod(shape) // max(math.prod(cell), 1)


def _send_box(sl: Slots, x: jax.Array, lin: jax.Array) -> tuple[jax.Array, np.ndarray] | None:
    """The region this device sends from, with slot offsets relative to it that are the same on
    every device: one ``dynamic_slice`` at a per-device corner (none when the region is the whole
    block), and then the cells are a static reorder (a cell may fill several slots: a gather run
    as an all-to-all), as XLA's partitioner does. ``None`` when the devices' send patterns are
    not translates of one another on the cell grid."""
    if not sl.slots:
        return None
    corner = sl.send_offset.min(axis=1)  # [devices, rank]
    rel = sl.send_offset - corner[:, None, :]
    box = tuple(int(v) for v in rel[0].max(axis=0) + np.asarray(sl.cell))
    if not (rel == rel[:1]).all() or (rel % np.asarray(sl.cell, dtype=rel.dtype)).any():
        return None
    if box != tuple(x.shape):
        x = lax.dynamic_slice(x, _offsets(corner, lin, x.ndim), box)
    return x, rel[0]


def _regular_slots(sl: Slots, box: jax.Array, send: np.ndarray, after: ShardingType) -> jax.Array:
    """Every device cuts the region it sends (``box``, slot offsets ``send`` in it) and places
    what it receives alike: reshape + transpose into slot order, one all-to-all, the inverse
    reorder (XLA fuses both into the all-to-all's slices and result); a move of one dimension's
    chunks to another is the in-place form XLA's partitioner emits (``AllToAll``)."""
    args = {"axis_name": _axis_name(sl.names)}
    moved = _one_dim_move(send, sl.recv_offset[0], sl.cell, box.shape, after.local_shape)
    if moved is not None:
        return _all_to_all_in_place(box, moved[0], moved[1], sl.slots, args)
    y = lax.all_to_all(_cells_to_slots(box, send, sl.cell), split_axis=0, concat_axis=0, tiled=True, **args)
    return _slots_to_cells(y, sl.recv_offset[0], sl.cell, after.local_shape)


def _exchange_all_to_all(steps: Sequence[Any], before: ShardingType, after: ShardingType, x: jax.Array,
                         following: Following = None) -> jax.Array:
    return _values_moved(_slots_exchange, before, after, x)


def _slots_exchange(before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """The exchange's cells as the slots of one all-to-all (``redist.exchange_a2a``). Regular
    (``_regular_slots``) when the devices' send patterns are translates of one another (one
    ``dynamic_slice`` of the region sent, at a per-device corner, none when it is the whole block)
    and every slot carries a cell at the same place of every device's new block. Otherwise each
    slot is cut at this device's offsets and written, or added, into zeros where it carries a cell
    (``_added_slots``)."""
    sl = slots(before, after)
    lin = _linear_index(before.mesh)
    box = _send_box(sl, x, lin)
    if box is not None and sl.recv_valid.all() and _tiles(sl.recv_offset, sl.cell, after.local_shape):
        return _regular_slots(sl, box[0], box[1], after)
    return _added_slots(sl, bool(before.unreduced), after, x, lin)


def _added_slots(sl: Slots, sums: bool, after: ShardingType, x: jax.Array, lin: jax.Array) -> jax.Array:
    """Slots cut at this device's offsets, moved as bit patterns, and written (``sums``: added)
    into a zero-filled block, each in place. Pending sums of 16-bit floats are added into an f32
    block converted once at the end (``_sum_dtype``): added at 16 bits, XLA:CPU widens every slot and
    the block at every slot (docs/design.md 8.2), and in f32 the partials are rounded once."""
    rank = x.ndim

    def moved(v: jax.Array) -> jax.Array:
        pieces = [lax.dynamic_slice(v, _offsets(sl.send_offset[:, s], lin, rank), sl.cell) for s in range(sl.slots)]
        return lax.all_to_all(jnp.stack(pieces), split_axis=0, concat_axis=0, tiled=True,
                              axis_name=_axis_name(sl.names))

    y = _on_bits(x, moved)
    return _filled(after, x.dtype, sums, [
        Delivery(y[s], _lookup(sl.recv_valid[:, s], lin), _offsets(sl.recv_offset[:, s], lin, rank))
        for s in range(sl.slots)])


class Delivery(NamedTuple):
    """One cell each device receives, where it receives one (``valid``), at ``offsets`` of its new
    block. ``piece`` is the cell, or a function of the block filled so far (a forwarding round)."""

    piece: jax.Array | Callable[[jax.Array], jax.Array]
    valid: Any
    offsets: list[Any]


def _filled(after: ShardingType, dtype: Any, sums: bool, deliveries: Sequence[Delivery]) -> jax.Array:
    """The new block written (``sums``: added) cell by cell into zeros. Pending sums of 16-bit
    floats are added in f32 and converted once at the end (``_sum_dtype``); see ``_added_slots``."""
    acc = _sum_dtype(dtype) if sums else dtype
    out = jnp.zeros(after.local_shape, dtype=acc)
    for d in deliveries:
        piece = d.piece(out) if callable(d.piece) else d.piece
        out = _add_cell(out, piece.astype(acc), d.valid, d.offsets, sums)
    return out.astype(dtype)


def _sum_dtype(dtype: Any) -> Any:
    """The type partial sums are added in: f32 for 16-bit floats (XLA:CPU widens their adds to f32
    anyway, and one conversion at the end replaces one per add), else the values' own."""
    return jnp.float32 if is_16bit_float(dtype) else dtype


LOWER.register(ExchangeAllToAll)(Lowering(_exchange_all_to_all))


def lower_step(step: Step, before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """The per-device JAX computation of one step (inside ``shard_map``)."""
    return LOWER[type(step)].fn((step,), before, after, x, None)


def _runs(steps: Sequence[Step]) -> list[tuple[int, int]]:
    """``[i, j)`` spans of the plan lowered as one unit: maximal runs of a joining class, else one step."""
    out, i = [], 0
    while i < len(steps):
        j = i + 1
        if LOWER[type(steps[i])].joins:
            while j < len(steps) and type(steps[j]) is type(steps[i]):
                j += 1
        out.append((i, j))
        i = j
    return out


def apply_local(plan: Plan, x_local: jax.Array) -> jax.Array:
    """Run ``plan`` on this device's block; call inside ``jax.shard_map`` (see the module doc).

    ``x_local`` has the source type's local shape; the result has the destination's. Unreduced
    types are per-device partials, as in ``redist.simulate``.
    """
    if tuple(x_local.shape) != tuple(plan.src.local_shape):
        raise ExecutionError(
            f"local block has shape {list(x_local.shape)} but the plan's source {plan.src} has local "
            f"shape {list(plan.src.local_shape)}"
        )
    x = x_local
    ts = plan.all_types
    for i, j in _runs(plan.steps):
        run = plan.steps[i:j]
        x = LOWER[type(run[0])].fn(run, ts[i], ts[j], x, step_after(plan.steps, j))
        if tuple(x.shape) != tuple(ts[j].local_shape):  # pragma: no cover - a lowering bug
            raise ExecutionError(
                f"steps {i + 1}..{j} ({', '.join(map(str, run))}) produced local shape {list(x.shape)}, "
                f"expected {list(ts[j].local_shape)} for {ts[j]}"
            )
    return x


# -- whole-program compilation ------------------------------------------------------------------------


def _check_mesh(plan: Plan, jmesh: jax.sharding.Mesh) -> None:
    if Mesh.from_jax(jmesh) != plan.src.mesh:
        raise ExecutionError(
            f"the plan is for mesh {plan.src.mesh} but the JAX mesh is {Mesh.from_jax(jmesh)}"
        )


@memo(Scope.PROGRAM, maxsize=256)
def _compiled(plan: Plan, jmesh: jax.sharding.Mesh) -> Any:
    try:
        in_spec, out_spec = to_partition_spec(plan.src), to_partition_spec(plan.dst)
    except ShardingTypeError as e:
        raise ExecutionError(f"plan {plan.src} -> {plan.dst} cannot be compiled: {e}") from None
    body = jax.shard_map(
        lambda x: apply_local(plan, x), mesh=jmesh, in_specs=in_spec, out_specs=out_spec, check_vma=False
    )
    return jax.jit(body, out_shardings=NamedSharding(jmesh, out_spec))


def compile_plan(plan: Plan, mesh: jax.sharding.Mesh | None = None) -> Any:
    """The whole plan as one jitted ``shard_map`` program (cached per plan and JAX mesh).

    ``mesh`` defaults to ``plan.src.mesh.to_jax()`` (the first devices, Explicit axes); its own
    device order decides which device sits at which mesh position.
    """
    jmesh = plan.src.mesh.to_jax() if mesh is None else mesh
    _check_mesh(plan, jmesh)
    return _compiled(plan, jmesh)


def clear_cache() -> None:
    """Forget compiled programs (``redist.caches.clear_caches`` clears them with everything else)."""
    memo_clear([Scope.PROGRAM])


def run_plan(plan: Plan, x: Any) -> jax.Array:
    """``x`` laid out as ``plan.src`` (a ``jax.Array`` with a ``NamedSharding``) -> laid out as ``plan.dst``.

    The fast path: the checks and the compiled executable are cached per (plan object, input
    sharding, shape, dtype), so a repeated call costs two dictionary lookups plus the executable's
    dispatch, through the C++ function ``Compiled.__call__`` forwards to: right after a blocking
    wait each Python frame costs microseconds (docs/design.md 8.3; ``python -m benchmarks.per_call``).
    The key holds the dtype object itself (``str(x.dtype)`` runs NumPy's Python) and, on an
    ``ArrayImpl``, is read from the aval and the sharding slot, not three Python properties."""
    if type(x) is _ARRAY_IMPL:
        aval = x.aval
        key = (x._sharding, aval.shape, aval.dtype)
    elif isinstance(x, jax.Array):  # the type test first: isinstance is an ABC's
        key = (x.sharding, x.shape, x.dtype)
    else:
        raise ExecutionError(f"expected a jax.Array laid out as {plan.src}, got {type(x).__name__}")
    table = _by_plan()
    held = table.get(id(plan))
    if held is None or held[0] is not plan:  # the plan is held, so its id is not reused meanwhile
        if len(table) >= 1024:
            table.clear()
        held = table[id(plan)] = (plan, {})
    run = held[1].get(key)
    if run is None:
        compiled = _executable(plan, *key)
        out = compiled(x)  # the first call makes a Compiled's C++ fast path (JAX 0.10.2: ``_call``)
        held[1][key] = getattr(compiled, "_call", None) or compiled
        return out
    return run(x)


_ARRAY_IMPL = ArrayImpl  # not type(jnp.zeros(())): importing must not start the backend (jax.distributed)


@memo(Scope.PROGRAM, maxsize=1)
def _by_plan() -> dict[int, tuple[Plan, dict[Any, Callable[[Any], Any]]]]:
    """Executables by plan identity, then (sharding, shape, dtype): hashing a ``Plan`` hashes its
    types and steps, looking up its ``id`` does not (docs/design.md 8.3). A registered table, so
    ``clear_caches`` empties it with the compiled programs."""
    return {}


@memo(Scope.PROGRAM, maxsize=1024)
def _executable(plan: Plan, sharding: Any, shape: tuple[int, ...], dtype: Any) -> Callable[[Any], Any]:
    """Check an input of this sharding, shape and dtype against ``plan.src`` once, and compile
    ahead of time for it (calling a ``Compiled`` skips ``jit``'s per-call tracing-cache lookup)."""
    want = plan.src
    if shape != tuple(want.shape):
        raise ExecutionError(f"shape mismatch: array has shape {list(shape)}, plan source is {want}")
    try:
        have = from_named_sharding(sharding, shape, dtype) if isinstance(sharding, NamedSharding) else None
    except ShardingTypeError as e:
        raise ExecutionError(f"sharding mismatch: {e}; the plan's source is {want}") from None
    if have is None:
        raise ExecutionError(f"sharding mismatch: array has sharding {sharding!r}; a NamedSharding is required")
    if have.dtype != want.dtype:
        raise ExecutionError(f"dtype mismatch: array is {have.dtype}, plan source is {want}")
    if have.mesh != want.mesh:
        raise ExecutionError(
            f"sharding mismatch: array is on mesh {have.mesh} but the plan's source is on {want.mesh}"
        )
    if have != want:
        raise ExecutionError(f"sharding mismatch: array is laid out as {have}, plan source is {want}")
    if not plan.steps:
        return (lambda v: v) if plan.src == plan.dst else _retyped(NamedSharding(sharding.mesh, to_partition_spec(plan.dst)))
    jmesh = sharding.mesh
    unreduced = sorted({str(a) for t in (plan.src, plan.dst) for a in t.unreduced})
    explicit = jax.sharding.AxisType.Explicit
    auto = [n for n, k in zip(jmesh.axis_names, jmesh.axis_types) if k != explicit and n in unreduced]
    if auto:
        raise ExecutionError(
            f"plan {plan.src} -> {plan.dst} has unreduced axes {auto}, which JAX allows only on mesh axes of "
            f"type Explicit, but the array's mesh has them {jmesh.axis_types}; lay the input out on a mesh "
            f"with Explicit axes (e.g. Mesh.to_jax())"
        )
    arg = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    return compile_plan(plan, jmesh).lower(arg).compile()  # type: ignore[no-any-return]


def _retyped(sharding: NamedSharding) -> Callable[[Any], Any]:
    """A move that only adds or drops reduced axes keeps every block: the same buffers, retyped."""
    def retype(v: Any) -> Any:
        return jax.make_array_from_single_device_arrays(v.shape, sharding, [s.data for s in v.addressable_shards])
    return retype
