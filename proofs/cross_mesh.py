"""Certificates of moves between meshes (``redist.CrossMeshPlan``; docs/design.md section 9.1).

Everything is re-derived here from the placements (cell counts from ``proofs.model.cells``,
blocks from ``proofs.tables``), not read from ``redist.cross_mesh``:

- ``delivery`` (NumPy, exact): on the cell grid (``L_d`` cells per dimension, ``n_d = L_d*m_d``)
  every destination device gets every cell of its block exactly once, each piece from a device
  whose source block holds it, local copies only on the device itself, and every round is a
  matching (a device sends and receives at most one message). Pieces move whole cells with the
  offset inside a cell kept, so this one check holds for every ``m_d``.
- ``recv`` (z3, symbolic in the ``m_d``): per class of devices (equal received and lacking cell
  counts), ``recv(d) <= lacking(d)``, the cells of its destination block outside its source block;
  with ``delivery`` (every lacking cell arrives) this is equality: the plan is at the bound.
- ``memory`` (z3, symbolic in the ``m_d``): every buffer the plan names (a source block, a
  destination block, each stage's message window) is at most ``max(local(src), local(dst))``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from proofs.certificate import Property, prove_inequality
from proofs.errors import VerificationError
from proofs.link import DEFAULT_TIMEOUT_MS, Status
from proofs.model import cells, shards
from proofs.tables import blocks, coord_table
from redist.cross_mesh import CrossMeshPlan, Piece
from spmd_types import ShardingType

DELIVERY = "each destination device receives each cell of its block exactly once, from a holder"
RECV = "recv_bytes(d) <= bytes of d's destination block outside its source block, every device d"
MEMORY = "every buffer (source block, destination block, stage window) <= max(local(src), local(dst))"


@dataclass(frozen=True)
class CrossCertificate:
    """What was checked of one cross-mesh plan: ``properties`` (each proved or undecided), how
    (``how``: which by NumPy on the cell grid, which by z3), and the figures at the plan's shape."""

    src: str
    dst: str
    cells: tuple[int, ...]
    properties: tuple[Property, ...]
    how: tuple[tuple[str, str], ...]
    recv_bytes: int
    lower_bound_bytes: int
    peak_bytes: int
    memory_bound_bytes: int

    @property
    def ok(self) -> bool:
        return all(p.status is Status.PROVED for p in self.properties)

    @property
    def proved(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.properties if p.status is Status.PROVED)

    def __str__(self) -> str:
        shapes = ", ".join(f"n{d} = {c}*m{d}" for d, c in enumerate(self.cells))
        lines = [f"certificate {self.src}", f"         -> {self.dst}", f"  for all shapes {shapes} (m_d >= 1)"]
        how = dict(self.how)
        lines += [f"  {p}  ({how[p.name]})" for p in self.properties]
        lines += [f"  recv {self.recv_bytes} B in all = lower bound {self.lower_bound_bytes} B at this shape",
                  f"  peak buffer {self.peak_bytes} B per device, larger block {self.memory_bound_bytes} B",
                  f"  {'proved: ' + ', '.join(self.proved) if self.ok else 'NOT all proved'}"]
        return "\n".join(lines)


def block_boxes(t: ShardingType, L: Sequence[int]) -> np.ndarray:
    """int64 ``[positions, rank, 2]``: each position's block in cells (re-derived)."""
    per = np.array([L[d] // shards(t, d) for d in range(t.rank)], dtype=np.int64)
    lo = blocks(t, coord_table(t.mesh)) * per
    return np.stack([lo, lo + per], axis=-1)


def _within(box: Sequence[tuple[int, int]], blk: np.ndarray) -> bool:
    return all(blk[d, 0] <= lo and hi <= blk[d, 1] and lo < hi for d, (lo, hi) in enumerate(box))


def _cells(box: Sequence[tuple[int, int]] | np.ndarray) -> int:
    return math.prod(int(hi) - int(lo) for lo, hi in box)


def check_delivery(plan: CrossMeshPlan, L: Sequence[int]) -> Property:
    """``delivery`` by NumPy on the cell grid; a ``VerificationError`` naming the first wrong
    device, cell or round."""
    t0 = time.perf_counter()
    sb, db = block_boxes(plan.src.type, L), block_boxes(plan.dst.type, L)
    counts = [np.zeros([int(b[1] - b[0]) for b in db[q]], dtype=np.int64) for q in range(len(db))]
    for p in plan.local + plan.messages:
        _check_piece(plan, p, sb, db)
        region = tuple(slice(lo - int(db[p.dst_pos][d, 0]), hi - int(db[p.dst_pos][d, 0]))
                       for d, (lo, hi) in enumerate(p.box))
        counts[p.dst_pos][region] += 1
    for q, c in enumerate(counts):
        if c.size and (c.min() != 1 or c.max() != 1):
            bad = np.argwhere(c != 1)[0]
            cell = [int(db[q][d, 0] + bad[d]) for d in range(len(bad))]
            raise VerificationError("delivery", f"device {plan.dst.devices[q]} receives cell {cell} of its block "
                                    f"{int(c[tuple(bad)])} times", {"device": plan.dst.devices[q], "cell": cell})
    _check_rounds(plan)
    return Property("delivery", Status.PROVED, DELIVERY, time.perf_counter() - t0)


def _check_piece(plan: CrossMeshPlan, p: Piece, sb: np.ndarray, db: np.ndarray) -> None:
    holder = plan.src.position_of(p.sender)
    ok = (holder is not None and _within(p.box, sb[holder]) and plan.dst.devices[p.dst_pos] == p.receiver
          and _within(p.box, db[p.dst_pos]) and ((p.round < 0) == (p.sender == p.receiver)))
    if not ok:
        raise VerificationError("delivery", f"piece {p.sender}->{p.receiver} of cells {list(p.box)} is not held by "
                                f"its sender's source block, outside its receiver's destination block, or a "
                                f"local copy between two devices", {"sender": p.sender, "receiver": p.receiver})


def _check_rounds(plan: CrossMeshPlan) -> None:
    seen: set[tuple[int, str, int]] = set()
    for p in plan.messages:
        for key in ((p.round, "sends", p.sender), (p.round, "receives", p.receiver)):
            if key in seen or not 0 <= p.round < plan.rounds:
                raise VerificationError("delivery", f"device {key[2]} {key[1]} twice in round {p.round} "
                                        f"(or the round is out of range)", {"round": p.round, "device": key[2]})
            seen.add(key)


def _lacking_cells(plan: CrossMeshPlan, L: Sequence[int]) -> dict[int, int]:
    sb, db = block_boxes(plan.src.type, L), block_boxes(plan.dst.type, L)
    out = dict.fromkeys(plan.src.devices + plan.dst.devices, 0)
    for q, g in enumerate(plan.dst.devices):
        p = plan.src.position_of(g)
        held = 0
        if p is not None:
            lo, hi = np.maximum(sb[p][:, 0], db[q][:, 0]), np.minimum(sb[p][:, 1], db[q][:, 1])
            held = int(np.prod(np.maximum(hi - lo, 0)))
        out[g] = _cells(db[q]) - held
    return out


def prove_recv(plan: CrossMeshPlan, L: Sequence[int], timeout_ms: int) -> tuple[Property, int, int]:
    """``recv`` per class of devices by z3; returns it and the totals in cells."""
    recv = dict.fromkeys(plan.src.devices + plan.dst.devices, 0)
    for p in plan.messages:
        recv[p.receiver] += _cells(p.box)
    lack = _lacking_cells(plan, L)
    t0, rank, note = time.perf_counter(), plan.src.type.rank, []
    for r, lb in sorted({(recv[g], lack[g]) for g in recv}):
        prop, cex = prove_inequality("recv", rank, [Fraction(r)], Fraction(lb), RECV, L, timeout_ms)
        if prop.status is Status.REFUTED:
            g = next(g for g in recv if (recv[g], lack[g]) == (r, lb))
            raise VerificationError("recv", f"device {g} receives {r} cells, its block lacks {lb}",
                                    dict(cex or {}, device=g))
        if prop.status is not Status.PROVED:
            return Property("recv", prop.status, RECV, time.perf_counter() - t0, prop.note), 0, 0
        note.append(prop.note)
    classes = len({(recv[g], lack[g]) for g in recv})
    return (Property("recv", Status.PROVED, RECV, time.perf_counter() - t0, f"{classes} classes of devices"),
            sum(recv.values()), sum(lack.values()))


def prove_memory(plan: CrossMeshPlan, L: Sequence[int], timeout_ms: int) -> tuple[Property, int, int]:
    """``memory`` by z3 over every buffer; returns it, the largest buffer and the bound in cells."""
    s, d = plan.src.type, plan.dst.type
    local_s = math.prod(L[k] // shards(s, k) for k in range(s.rank))
    local_d = math.prod(L[k] // shards(d, k) for k in range(d.rank))
    stages: dict[int, list[Piece]] = {-1: list(plan.local)}
    for p in plan.messages:
        stages.setdefault(p.round, []).append(p)
    windows = []
    for pieces in stages.values():
        if pieces:
            windows.append(math.prod(max(p.box[k][1] - p.box[k][0] for p in pieces) for k in range(s.rank)))
    lhs = [Fraction(c) for c in (local_s, local_d, *windows)]
    prop, cex = prove_inequality("memory", s.rank, lhs, Fraction(max(local_s, local_d)), MEMORY, L, timeout_ms)
    if prop.status is Status.REFUTED:
        raise VerificationError("memory", f"a buffer of {int(max(lhs))} cells exceeds the larger block "
                                f"{max(local_s, local_d)} cells", dict(cex or {}))
    return prop, int(max(lhs)), max(local_s, local_d)


def verify_cross_mesh(plan: CrossMeshPlan, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> CrossCertificate:
    """Check ``delivery`` (NumPy on the cell grid), ``recv`` and ``memory`` (z3) of ``plan``, and
    that the plan's own figures at its shape agree (``VerificationError`` otherwise)."""
    L = cells([plan.src.type, plan.dst.type])
    if tuple(L) != plan.cells:
        raise VerificationError("cells", f"the plan's cell counts {list(plan.cells)} are not lcm of the shard "
                                f"counts {list(L)}")
    delivery = check_delivery(plan, L)
    recv, recv_c, lb_c = prove_recv(plan, L, timeout_ms)
    memory, peak_c, bound_c = prove_memory(plan, L, timeout_ms)
    unit = math.prod(n // c for n, c in zip(plan.src.type.shape, L)) * plan.src.type.itemsize
    _agree("recv_formula", recv_c * unit, sum(plan.recv_bytes().values()))
    _agree("lower_bound", lb_c * unit, sum(plan.lower_bound_bytes().values()))
    _agree("peak_formula", peak_c * unit, plan.peak_bytes())
    how = (("delivery", "NumPy on the cell grid, exact"), ("recv", "z3, symbolic m_d, per class of devices"),
           ("memory", "z3, symbolic m_d"))
    return CrossCertificate(str(plan.src), str(plan.dst), tuple(L), (delivery, recv, memory), how,
                            recv_c * unit, lb_c * unit, peak_c * unit, bound_c * unit)


def _agree(name: str, here: int, plans: int) -> None:
    if here != plans:
        raise VerificationError(name, f"re-derived {here} B, the plan says {plans} B")


__all__ = ["CrossCertificate", "block_boxes", "check_delivery", "prove_memory", "prove_recv", "verify_cross_mesh"]
