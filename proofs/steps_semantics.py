"""What each step does to the data, as z3 terms (the model of ``redist.simulate``).

``apply_step(step, arr, before, after, space)`` maps the model array ``arr`` (laid out as
``before``) to the array after the step. The semantics are written from the step definitions of
docs/design.md section 3, the same way the NumPy simulator reads them: a step over several axes is one
collective over the flattened group whose members are ordered by the mixed-radix number of their
coordinates along the axes (major first), a device's index in its group is that number, and the
``i``-th chunk of a dimension split ``g`` ways is the ``i``-th contiguous ``1/g`` of it.

Only ``Permute`` and ``Exchange`` read the types: their semantics *is* the point-to-point schedule
(``redist.exchange.schedule``) the executors run, taken at the plan's concrete shape and expressed
in cells, so a wrong schedule is caught like a wrong step. Everything else follows from the step
and the local extents the model tracks itself, so a plan whose recorded types lie is caught too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import z3

from proofs.errors import VerificationError
from proofs.model import Arr, Dev, Index, Space, Span, Term, mixed, set_mixed, size_of, spans_of
from redist import exchange
from redist.facets import FacetTable
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
from spmd_types import Mesh, ShardingType


def _with(idx: Index, d: int, q: Term) -> Index:
    return idx[:d] + ((q, idx[d][1]),) + idx[d + 1:]


def _split(step: Step, ext: int, g: int, dim: int) -> int:
    if ext % g:
        raise VerificationError(
            "chain", f"{step}: local extent {ext} cells of dimension {dim} is not divisible by the group size {g}",
            {"dimension": dim, "local_cells": ext, "group_size": g},
        )
    return ext // g


Semantics = Callable[[Any, Arr, ShardingType, ShardingType, Space], Arr]
SEMANTICS: FacetTable[Semantics] = FacetTable("z3 semantics", "proofs.steps_semantics.SEMANTICS")


def apply_step(step: Step, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    return SEMANTICS[type(step)](step, arr, before, after, sp)


class _Group(NamedTuple):
    """The step's group on the model: its spans, size, and the index / members of a device."""

    spans: tuple[Span, ...]
    size: int
    mesh: Mesh

    def position(self, dev: Dev) -> Term:
        return mixed(self.mesh, dev, self.spans)

    def member(self, dev: Dev, j: Term) -> Dev:
        return set_mixed(self.mesh, dev, self.spans, j)


def _group(step: Step, sp: Space) -> _Group:
    spans = spans_of(sp.mesh, step.group_axes())
    return _Group(spans, size_of(spans), sp.mesh)


def _resized(ext: tuple[int, ...], d: int, e: int) -> tuple[int, ...]:
    return ext[:d] + (e,) + ext[d + 1:]


@SEMANTICS.register(DynSlice)
def _slice(step: DynSlice, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, d, src = _group(step, sp), step.dim, arr.val
    e = _split(step, arr.ext[d], g.size, d)
    return Arr(_resized(arr.ext, d, e), lambda dev, idx: src(dev, _with(idx, d, g.position(dev) * e + idx[d][0])))


@SEMANTICS.register(Discard)
def _discard(step: Discard, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, src = _group(step, sp), arr.val
    return Arr(arr.ext, lambda dev, idx: z3.If(g.position(dev) == 0, src(dev, idx), 0))


@SEMANTICS.register(PadUnreduced)
def _pad(step: PadUnreduced, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, d, src = _group(step, sp), step.dim, arr.val
    e = arr.ext[d]

    def pad(dev: Dev, idx: Index) -> Term:
        q = idx[d][0]
        return z3.If(q / e == g.position(dev), src(dev, _with(idx, d, q - g.position(dev) * e)), 0)

    return Arr(_resized(arr.ext, d, e * g.size), pad)


@SEMANTICS.register(AllGather)
def _gather(step: AllGather, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, d, src = _group(step, sp), step.dim, arr.val
    e = arr.ext[d]

    def gather(dev: Dev, idx: Index) -> Term:
        j = idx[d][0] / e
        return src(g.member(dev, j), _with(idx, d, idx[d][0] - j * e))

    return Arr(_resized(arr.ext, d, e * g.size), gather)


@SEMANTICS.register(AllToAll)
def _all_to_all(step: AllToAll, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, s, t, src = _group(step, sp), step.src_dim, step.dst_dim, arr.val
    es = arr.ext[s]
    et = _split(step, arr.ext[t], g.size, t)

    def a2a(dev: Dev, idx: Index) -> Term:
        j = idx[s][0] / es
        inner = _with(_with(idx, s, idx[s][0] - j * es), t, g.position(dev) * et + idx[t][0])
        return src(g.member(dev, j), inner)

    return Arr(_resized(_resized(arr.ext, s, es * g.size), t, et), a2a)


@SEMANTICS.register(MultiAllToAll)
def _multi_all_to_all(step: MultiAllToAll, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    """Per dimension ``d``: ``e`` is its extent after its move's destination split (if any); an
    output index on a move's source dimension names the sender (``q / e``) and the offset in its
    piece; the sender's index on a destination dimension is the receiver's position there."""
    moves = [(m, _group(m, sp)) for m in step.moves]
    ext = list(arr.ext)
    for m, g in moves:
        ext[m.dst_dim] = _split(step, ext[m.dst_dim], g.size, m.dst_dim)
    piece, src = tuple(ext), arr.val
    for m, g in moves:
        ext[m.src_dim] *= g.size

    def a2a(dev: Dev, idx: Index) -> Term:
        sender, inner = dev, idx
        for m, g in moves:
            j = idx[m.src_dim][0] / piece[m.src_dim]
            inner = _with(inner, m.src_dim, idx[m.src_dim][0] - j * piece[m.src_dim])
            sender = g.member(sender, j)
        for m, g in moves:
            inner = _with(inner, m.dst_dim, g.position(dev) * piece[m.dst_dim] + inner[m.dst_dim][0])
        return src(sender, inner)

    return Arr(tuple(ext), a2a)


@SEMANTICS.register(AllReduce)
def _all_reduce(step: AllReduce, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    g, src = _group(step, sp), arr.val
    return Arr(arr.ext, lambda dev, idx: z3.Sum([src(g.member(dev, j), idx) for j in range(g.size)]))


@SEMANTICS.register(ReduceScatter, AllReduceSlice)
def _reduce_scatter(step: ReduceScatter, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    """A reduce-scatter, and an all-reduce followed by keeping this device's chunk: the same values."""
    g, d, src = _group(step, sp), step.dim, arr.val
    e = _split(step, arr.ext[d], g.size, d)

    def rs(dev: Dev, idx: Index) -> Term:
        inner = _with(idx, d, g.position(dev) * e + idx[d][0])
        return z3.Sum([src(g.member(dev, j), inner) for j in range(g.size)])

    return Arr(_resized(arr.ext, d, e), rs)


@SEMANTICS.register(Permute, Exchange, ExchangeAllToAll)
def _p2p_semantics(step: Step, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    return _p2p(step, arr, before, after, sp)


Rounds = list[tuple[bool, list[tuple[int, int, tuple[int, ...], tuple[int, ...]]]]]


class Moves(NamedTuple):
    """One round of a schedule in cells, as arrays: ``[n]`` sources and destinations, ``[n, rank]``
    cell starts in the source's block (old, or new when ``from_output``) and the destination's."""

    from_output: bool
    src: np.ndarray
    dst: np.ndarray
    src_cell: np.ndarray
    dst_cell: np.ndarray


def schedule_moves(step: Step, before: ShardingType, after: ShardingType, sp: Space
                   ) -> tuple[tuple[int, ...], list[Moves]]:
    """The schedule of a ``Permute``/``Exchange`` in cells: the cell extents and, in order, every
    round (local copies first) as ``Moves``; a typed error names an offset that is not whole cells."""
    mesh = sp.mesh
    try:
        sch = exchange.schedule(before, after)
    except Exception as e:  # a schedule that cannot be built is a failed step
        raise VerificationError("chain", f"{step}: no schedule {before} -> {after}: {e}", {"step": str(step)}) from None
    unit = [n // L for n, L in zip(before.shape, sp.L)]  # the plan's concrete m_d
    cell = tuple(int(x) for x in _cells_of(step, np.asarray([sch.cell], dtype=np.int64).reshape(1, -1), unit)[0])
    moves = []
    for r in sch.local_copies + sch.rounds:
        if r.pairs:
            src, dst = np.asarray(r.pairs, dtype=np.int64).reshape(-1, 2).T
        else:
            src = dst = np.flatnonzero(np.asarray(r.recv_valid)[:mesh.size])
        so = _cells_of(step, np.asarray(r.send_offset).reshape(-1, sp.rank)[src], unit)
        do = _cells_of(step, np.asarray(r.recv_offset).reshape(-1, sp.rank)[dst], unit)
        moves.append(Moves(bool(getattr(r, "from_output", False)), src, dst, so.astype(np.int64), do.astype(np.int64)))
    return cell, moves


def p2p_rounds(step: Step, before: ShardingType, after: ShardingType, sp: Space) -> tuple[tuple[int, ...], Rounds]:
    """``schedule_moves`` as Python tuples: ``(from_output, [(source, destination, source offset,
    destination offset)])`` per round (for the ``If`` semantics, ``p2p_cells``)."""
    cell, moves = schedule_moves(step, before, after, sp)
    rounds: Rounds = [(m.from_output, list(zip(m.src.tolist(), m.dst.tolist(), map(tuple, m.src_cell.tolist()),
                                               map(tuple, m.dst_cell.tolist())))) for m in moves]
    return cell, rounds


def _cells_of(step: Step, offsets: np.ndarray, unit: list[int]) -> np.ndarray:
    """Element offsets (rows) in whole cells of the plan's shape; a typed error names a fraction."""
    u = np.asarray(unit, dtype=offsets.dtype if offsets.dtype != object else np.int64).reshape(1, -1)
    bad = np.argwhere(offsets % u != 0) if offsets.size else np.empty((0, 2), dtype=np.int64)
    if len(bad):
        i, d = (int(x) for x in bad[0])
        v = int(offsets[i, d])
        raise VerificationError("chain", f"{step}: schedule offset {v} is not a whole cell of dimension {d}",
                                {"dimension": d, "offset": v})
    return offsets // u


def device_coords(sp: Space, v: int) -> Dev:
    """A concrete device as Python ints: the model folds its digits into constants
    (``proofs.model.mixed``) instead of building z3 arithmetic per device."""
    coords = sp.mesh.coords(v)
    return tuple(coords[n] for n in sp.mesh.names)


def _on_grid(step: Step, cell: tuple[int, ...], rounds: Rounds, ext: tuple[int, ...]) -> None:
    for _, items in rounds:
        for _s, d, _so, do in items:
            if any(do[k] % cell[k] or do[k] + cell[k] > ext[k] for k in range(len(cell))):
                raise VerificationError("chain", f"{step}: a scheduled cell at {list(do)} of device {d} is off the "
                                        f"destination's cell grid", {"device": d, "local_cell": list(do)})


Cell = tuple[int, tuple[int, ...]]
"""A destination cell: ``(device, cell start in its new block)``."""


def _run(step: Step, cell: tuple[int, ...], rounds: Rounds, read: Callable[[int, tuple[int, ...]], Any],
         add: Callable[[Any, Any], Any], zero: Callable[[], Any]) -> dict[Cell, Any]:
    """Walk the rounds: ``read(source, cell start)`` is a cell of a source's old block, ``add``
    accumulates into a destination cell. A round is one ``ppermute``: every sender reads the state
    *before* the round (its old block, or its new block for ``from_output`` rounds that forward
    completed sums)."""
    state: dict[Cell, Any] = {}
    for from_output, items in rounds:
        prev = dict(state) if from_output else state
        for s, d, so, do in items:
            if from_output:
                if any(so[k] % cell[k] for k in range(len(cell))):
                    raise VerificationError("chain", f"{step}: a forwarded cell at {list(so)} of device {s} is off "
                                            f"the cell grid", {"device": s, "local_cell": list(so)})
                piece = prev.get((s, so))
                piece = zero() if piece is None else piece
            else:
                piece = read(s, so)
            state[(d, do)] = add(state[(d, do)], piece) if (d, do) in state else piece
    return state


def p2p_cells(step: Step, arr: Arr, before: ShardingType, after: ShardingType, sp: Space, o: Index
              ) -> tuple[tuple[int, ...], dict[Cell, Term]]:
    """Run the schedule on the model, cell by cell: the value at offset ``o`` (symbolic, inside the
    cell) of every destination cell ``(device, cell start)``, accumulated into zeros round by round."""
    cell, rounds = p2p_rounds(step, before, after, sp)
    _on_grid(step, cell, rounds, sp.ext(after))
    coords = {v: device_coords(sp, v) for v in range(sp.mesh.size)}

    def read(s: int, so: tuple[int, ...]) -> Term:
        return arr.val(coords[s], tuple((so[k] + o[k][0], o[k][1]) for k in range(sp.rank)))

    return cell, _run(step, cell, rounds, read, lambda a, b: a + b, lambda: z3.IntVal(0))


def _p2p(step: Step, arr: Arr, before: ShardingType, after: ShardingType, sp: Space) -> Arr:
    """The schedule as a function of a symbolic device and local index (``If`` over the cells)."""
    mesh = sp.mesh
    o = sp.index_vars("_cell")
    cell, state = p2p_cells(step, arr, before, after, sp, o)
    strides = []
    w = 1
    for _, n in reversed(mesh.axes):
        strides.append(w)
        w *= n
    strides.reverse()

    def val(dev: Dev, idx: Index) -> Term:
        dev_id = z3.Sum([c * s for c, s in zip(dev, strides)])
        out: Term = z3.IntVal(0)
        for (d, off), term in state.items():
            inside = z3.And([dev_id == d] + [z3.And(idx[k][0] >= off[k], idx[k][0] < off[k] + cell[k])
                                             for k in range(sp.rank)])
            subs = [(o[k][0], idx[k][0] - off[k]) for k in range(sp.rank)] + [(o[k][1], idx[k][1]) for k in range(sp.rank)]
            out = z3.If(inside, z3.substitute(term, *subs) if subs else term, out)
        return out

    return Arr(sp.ext(after), val)


__all__ = ["SEMANTICS", "Cell", "Moves", "apply_step", "device_coords", "p2p_cells", "p2p_rounds", "schedule_moves"]
