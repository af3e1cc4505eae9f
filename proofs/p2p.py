"""A point-to-point schedule run on atoms with NumPy.

The generic state of ``before`` (``proofs.model.Space.generic``) holds, at a concrete device and
local cell ``q``, a linear combination of *atoms*: ``G`` at a global cell, or a partial ``F`` of a
device at a local cell, each applied at ``q + o`` for the symbolic in-cell offset ``o`` and sizes
``m_d``. Here every atom is an integer code and a state is a table of rows ``(device, cell, atom,
coefficient)``, so running the schedule round by round and comparing every destination with what
``after`` says are a few NumPy passes over the rows instead of Python work per device and cell.

The comparison is exact: distinct atoms are distinct applications of uninterpreted functions at
the same ``o``, so a destination is right for every ``o`` and ``m_d`` iff its rows sum to the one
atom ``after`` names (``Space.realize`` turns rows back into the z3 term ``proofs.link`` proves).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from proofs.errors import VerificationError
from proofs.model import Lin, Space
from proofs.steps_semantics import Moves
from proofs.tables import blocks, coord_table, device_ids, mixed_of, with_mixed
from redist.steps import Step
from spmd_types import ShardingType

MAX_CODE = 1 << 62
"""Atom and row codes are int64: a proof whose codes would pass this raises a typed error."""


class Rows(NamedTuple):
    """A state (or a sum of pieces) as rows: ``value[device, cell] = sum coef * atom``."""

    device: np.ndarray  # [n]
    cell: np.ndarray    # [n] flat index of the cell start in the local block
    atom: np.ndarray    # [n] atom code (``AtomTable``)
    coef: np.ndarray    # [n]

    @staticmethod
    def empty() -> Rows:
        z = np.zeros(0, dtype=np.int64)
        return Rows(z, z, z, z)

    @staticmethod
    def cat(parts: list[Rows]) -> Rows:
        if not parts:
            return Rows.empty()
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in Rows._fields))


def _check_codes(what: str, n: int) -> None:
    if n >= MAX_CODE:
        raise VerificationError("chain", f"{what}: {n:,} codes exceed the int64 tables of the point-to-point "
                                f"proof", {"codes": n})


@dataclass(frozen=True)
class AtomTable:
    """The generic state of ``t`` as atom codes: ``G`` at global cell ``g`` is code ``flat(g)``
    (``[0, n_global)``), partial ``F`` of device key ``w`` at local cell ``q`` is
    ``n_global + w * n_local + flat(q)``."""

    sp: Space
    t: ShardingType
    fi: int | None               # index of the partials' function in ``sp`` (None: no unreduced axes)
    block: np.ndarray            # [devices, rank] first global cell of each device's block
    u: np.ndarray                # [devices] index along the unreduced axes
    key: np.ndarray              # [devices] id of the partial's device argument
    siblings: np.ndarray         # [devices, k - 1] keys of the other members of the unreduced group

    @staticmethod
    def of(sp: Space, t: ShardingType, fi: int | None, replicas_agree: bool) -> AtomTable:
        mesh, coords = sp.mesh, coord_table(sp.mesh)
        uspans = sp.unreduced_spans(t)
        k = math.prod(s for _, _, s in uspans)
        key_of = (lambda c: device_ids(mesh, _kept(sp, t, c))) if replicas_agree else (lambda c: device_ids(mesh, c))
        sib = [key_of(with_mixed(mesh, coords, uspans, j)) for j in range(1, k)]
        table = AtomTable(sp, t, fi, blocks(t, coords) * np.array(sp.ext(t), dtype=np.int64),
                          mixed_of(mesh, coords, uspans), key_of(coords),
                          np.stack(sib, axis=1) if sib else np.zeros((mesh.size, 0), dtype=np.int64))
        _check_codes(f"{t}", table.n_global + mesh.size * table.n_local)
        return table

    @property
    def n_global(self) -> int:
        return math.prod(self.sp.L)

    @property
    def n_local(self) -> int:
        return math.prod(self.sp.ext(self.t))

    def g_code(self, gcell: np.ndarray) -> np.ndarray:
        return _ravel(gcell, self.sp.L)

    def read(self, device: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pieces ``(device[i], local cell q[i])`` as ``(piece index, atom, coef)`` rows."""
        g = self.g_code(self.block[device] + q)
        idx = np.arange(len(device), dtype=np.int64)
        if self.fi is None:
            return idx, g, np.ones(len(device), dtype=np.int64)
        qf = _ravel(q, self.sp.ext(self.t))
        own = self.u[device] == 0
        first = np.where(own, g, self.n_global + self.key[device] * self.n_local + qf)
        k1 = self.siblings.shape[1]
        src = np.repeat(idx[own], k1)
        sib = (self.n_global + self.siblings[device[own]] * self.n_local + qf[own, None]).reshape(-1)
        return (np.concatenate([idx, src]), np.concatenate([first, sib]),
                np.concatenate([np.ones(len(idx), dtype=np.int64), -np.ones(len(src), dtype=np.int64)]))

    def lin(self, atoms: np.ndarray, coefs: np.ndarray) -> Lin:
        """Rows as ``proofs.model`` atoms, for ``Space.realize``."""
        out: Lin = {}
        sizes = tuple(n for _, n in self.sp.mesh.axes)
        for a, c in zip(atoms.tolist(), coefs.tolist()):
            if a < self.n_global:
                atom: tuple[object, ...] = (-1, _unravel(a, self.sp.L))
            else:
                w, q = divmod(a - self.n_global, self.n_local)
                atom = (self.fi, _unravel(w, sizes), _unravel(q, self.sp.ext(self.t)))
            out[atom] = out.get(atom, 0) + c
        return {a: c for a, c in out.items() if c}


def _off(step: Step, what: str, device: np.ndarray, cells: np.ndarray, bad: np.ndarray) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise VerificationError("chain", f"{step}: {what} at {cells[i].tolist()} of device {int(device[i])}",
                                {"device": int(device[i]), "local_cell": cells[i].tolist()})


def _in(cells: np.ndarray, cell: tuple[int, ...], ext: tuple[int, ...]) -> np.ndarray:
    """Whether each cell ``[start, start + cell)`` lies inside a block of extents ``ext``."""
    c, e = np.array(cell, dtype=np.int64), np.array(ext, dtype=np.int64)
    return np.asarray(((cells >= 0) & (cells + c <= e)).all(axis=1)) if cells.shape[1] else np.ones(len(cells), bool)


def _aligned(cells: np.ndarray, cell: tuple[int, ...]) -> np.ndarray:
    return (cells % np.array(cell, dtype=np.int64) == 0).all(axis=1) if cells.shape[1] else np.ones(len(cells), bool)


def _segments(sorted_keys: np.ndarray, order: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each ``wanted`` key, the rows (``order`` positions) whose key equals it: ``(which
    wanted, row)`` pairs, wanted-major."""
    lo = np.searchsorted(sorted_keys, wanted, "left")
    cnt = np.searchsorted(sorted_keys, wanted, "right") - lo
    which = np.repeat(np.arange(len(wanted), dtype=np.int64), cnt)
    start = np.repeat(np.cumsum(cnt) - cnt, cnt)
    return which, order[lo[which] + np.arange(len(which), dtype=np.int64) - start]


def run_moves(step: Step, cell: tuple[int, ...], moves: list[Moves], table: AtomTable, after_ext: tuple[int, ...]
              ) -> Rows:
    """Walk the rounds on atom rows: a round is one ``ppermute``, every sender reading the state
    *before* the round (its old block, or its new block for ``from_output`` rounds that forward
    sums completed earlier); each destination cell accumulates (``+=``) what it receives."""
    n_after = math.prod(after_ext)
    before_ext = table.sp.ext(table.t)
    _check_codes("destination cells", table.sp.mesh.size * n_after)
    parts: list[Rows] = []
    for m in moves:
        _off(step, "a scheduled cell is off the destination's cell grid", m.dst, m.dst_cell,
             ~(_in(m.dst_cell, cell, after_ext) & _aligned(m.dst_cell, cell)))
        dflat = _ravel(m.dst_cell, after_ext)
        if not m.from_output:
            _off(step, "a scheduled read is off the source's block", m.src, m.src_cell,
                 ~_in(m.src_cell, cell, before_ext))
            piece, atom, coef = table.read(m.src, m.src_cell)
            parts.append(Rows(m.dst[piece], dflat[piece], atom, coef))
            continue
        _off(step, "a forwarded cell is off the cell grid", m.src, m.src_cell, ~_aligned(m.src_cell, cell))
        state = Rows.cat(parts)
        parts = [state]
        key = state.device * n_after + state.cell
        order = np.argsort(key, kind="stable")
        ok = _in(m.src_cell, cell, after_ext)
        wanted = np.where(ok, m.src * n_after + _ravel(np.where(ok[:, None], m.src_cell, 0), after_ext), -1)
        which, row = _segments(key[order], order, wanted)
        parts.append(Rows(m.dst[which], dflat[which], state.atom[row], state.coef[row]))
    return Rows.cat(parts)


class Verdict(NamedTuple):
    """The destinations (group's first device, cell start) of a run: one that is right (if any)
    and the first that is wrong (if any), each with the atoms its group sums to there."""

    cell: tuple[int, ...]  # the schedule's cell extents, in cells
    good: tuple[int, tuple[int, ...], Lin] | None
    bad: tuple[int, tuple[int, ...], Lin] | None
    destinations: int


def compare(sp: Space, after: ShardingType, cell: tuple[int, ...], state: Rows, table: AtomTable) -> Verdict:
    """Every destination (unreduced group of ``after``, cell of its block): the rows its members
    hold there, summed, against the one atom ``after`` says - exactly, with NumPy."""
    mesh, ext = sp.mesh, sp.ext(after)
    coords = coord_table(mesh)
    uspans = sp.unreduced_spans(after)
    group = device_ids(mesh, with_mixed(mesh, coords, uspans, 0))  # each device's group, by its first member
    firsts = np.flatnonzero(mixed_of(mesh, coords, uspans) == 0)
    grid = np.array(list(itertools.product(*[range(0, e, c) for e, c in zip(ext, cell)])), dtype=np.int64)
    grid = grid.reshape(len(grid), len(ext))
    start = blocks(after, coords) * np.array(ext, dtype=np.int64)
    g_rep, c_rep = np.repeat(firsts, len(grid)), np.tile(np.arange(len(grid)), len(firsts))
    want = Rows(g_rep, _ravel(grid, ext)[c_rep], table.g_code(start[g_rep] + grid[c_rep]),
                -np.ones(len(g_rep), dtype=np.int64))
    diff = Rows.cat([Rows(group[state.device], state.cell, state.atom, state.coef), want])
    order = np.lexsort((diff.atom, diff.cell, diff.device))
    d, c, a = diff.device[order], diff.cell[order], diff.atom[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (d[1:] != d[:-1]) | (c[1:] != c[:-1]) | (a[1:] != a[:-1])
    starts = np.flatnonzero(new)
    total = np.add.reduceat(diff.coef[order], starts) if len(starts) else np.zeros(0, dtype=np.int64)
    n_after = math.prod(ext)
    wrong = starts[total != 0]
    wrong_keys = np.unique(d[wrong] * n_after + c[wrong])
    dest_keys = g_rep * n_after + want.cell
    right = np.flatnonzero(~np.isin(dest_keys, wrong_keys))
    good = int(dest_keys[right[0]]) if len(right) else None
    bad = int(wrong_keys[0]) if len(wrong_keys) else None
    row_keys = group[state.device] * n_after + state.cell

    def case(x: int | None) -> tuple[int, tuple[int, ...], Lin] | None:
        if x is None:
            return None
        mine = row_keys == x
        g, cflat = divmod(x, n_after)
        return g, _unravel(cflat, ext), table.lin(state.atom[mine], state.coef[mine])

    return Verdict(cell, case(good), case(bad), len(dest_keys))


def _kept(sp: Space, t: ShardingType, coords: np.ndarray) -> np.ndarray:
    """``replicas_agree`` partials' device argument: each device's digits along the axes ``t``
    uses, in place, the others zero (``Space._kept``, vectorised)."""
    mesh = sp.mesh
    out = np.zeros_like(coords)
    for a in t.used_axes():
        name, pre, size = mesh.span(a)
        stride = mesh.axis_size(name) // (pre * size)
        pos = mesh.position(name)
        out[:, pos] += ((coords[:, pos] // stride) % size) * stride
    return out


def _ravel(q: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(len(q), dtype=np.int64)
    for d, n in enumerate(shape):
        out = out * n + q[:, d]
    return out


def _unravel(code: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for n in reversed(shape):
        code, r = divmod(code, n)
        out.append(r)
    return tuple(reversed(out))


__all__ = ["MAX_CODE", "AtomTable", "Rows", "Verdict", "compare", "run_moves"]
