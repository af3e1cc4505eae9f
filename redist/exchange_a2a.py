"""An exchange's cells as the slots of one all-to-all (``ExchangeAllToAll``).

A point-to-point schedule (``redist.exchange.schedule``) moves cells in rounds of ``ppermute``.
When no round forwards a completed sum, the same cells can travel in a single all-to-all over the
mesh axes its messages cross: each device sends ``k`` slots to every member of its group (itself
included, which carries its local copies), ``k`` being the most cells any (sender, receiver) pair
moves. Slots a pair does not use are padding; they are counted as received bytes, so a padded
all-to-all never meets the transfer bound and the bytes objective never picks it. The send and
receive buffers are ``g * k`` cells each: more than the memory bound is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from redist.errors import StepError
from redist.exchange import Schedule, schedule
from redist.groups import coords as mesh_coords
from spmd_types import ShardingType, axis_name
from spmd_types.layout import flat_index
from spmd_types.memo import Scope, memo

MAX_DEVICES = 128
"""Packing the slots reads the whole schedule per device and per cell: beyond this mesh size the
variant is not offered (planning stays in milliseconds on large meshes); the exchange in
rounds, at the transfer bound, still is. The all-to-all variant only saves launches, which matter
least where a mesh is large and blocks are big."""


def offered(t: ShardingType) -> bool:
    """Whether the one-all-to-all form (``ExchangeAllToAll``) is offered on ``t``'s mesh
    (``MAX_DEVICES``): ``slots`` refuses it elsewhere, and the synthesizer's floors count it only here."""
    return t.mesh.size <= MAX_DEVICES


@dataclass(frozen=True, eq=False)
class Slots:
    """One all-to-all over the whole mesh axes ``names`` (mesh order, ``g`` members): slot
    ``j * k + t`` of a device's buffer goes to the member of group index ``j``."""

    names: tuple[str, ...]
    g: int
    k: int
    cell: tuple[int, ...]
    send_offset: np.ndarray  # [devices, g * k, rank] cell start in the old block
    recv_offset: np.ndarray  # [devices, g * k, rank] cell start in the new block
    recv_valid: np.ndarray   # [devices, g * k] whether the received slot carries a cell
    received: int            # cells actually received from other devices, all devices together

    def cell_bytes(self, itemsize: int) -> int:
        return math.prod(self.cell) * itemsize

    @property
    def slots(self) -> int:
        return self.g * self.k

    @property
    def static(self) -> bool:
        """Every slot valid and every device using the same offsets: the all-to-all is a fixed
        reorder of the block, lowered with reshapes and one transpose (no per-device tables)."""
        return bool(self.recv_valid.all() and (self.send_offset == self.send_offset[:1]).all()
                    and (self.recv_offset == self.recv_offset[:1]).all())


def _group_index(old: ShardingType, names: tuple[str, ...]) -> np.ndarray:
    """Each device's row-major index over the mesh axes ``names`` (its all-to-all rank)."""
    coords = mesh_coords(old.mesh)
    idx = np.zeros(old.mesh.size, dtype=np.int64)
    for i, (n, size) in enumerate(old.mesh.axes):
        if n in names:
            idx = idx * size + coords[:, i]
    return idx


def _transfers(sch: Schedule) -> tuple[np.ndarray, ...]:
    """(src, dst, send offset, recv offset) of every cell, local copies included."""
    src, dst, so, ro = [], [], [], []
    for r in sch.local_copies + sch.rounds:
        d = np.flatnonzero(r.recv_valid)
        if r.pairs:
            s_of = {b: a for a, b in r.pairs}
            s = np.array([s_of.get(int(x), int(x)) for x in d], dtype=np.int64)
        else:
            s = d
        src.append(s)
        dst.append(d)
        so.append(r.send_offset[s])
        ro.append(r.recv_offset[d])
    rank = len(sch.cell)
    if not src:
        z = np.zeros(0, dtype=np.int64)
        return z, z, np.zeros((0, rank), np.int64), np.zeros((0, rank), np.int64)
    return np.concatenate(src), np.concatenate(dst), np.concatenate(so), np.concatenate(ro)


def _same_replica(old: ShardingType, new: ShardingType, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Senders moved to the receiver's coordinate along the mesh axes the old type does not use:
    those devices hold the same old block, and the all-to-all's group then spans only the axes the
    data really crosses (the schedule spreads sends over such replicas to balance its rounds)."""
    used = {axis_name(a) for axes in (*old.dims, tuple(old.unreduced)) for a in axes}
    free = [i for i, n in enumerate(old.mesh.names) if n not in used]
    if not free or not len(src):
        return src
    coords = mesh_coords(old.mesh)
    c = coords[src].copy()
    c[:, free] = coords[dst][:, free]
    return flat_index(list(c.T), tuple(n for _, n in old.mesh.axes))


@memo(Scope.TYPE)
def slots(old: ShardingType, new: ShardingType) -> Slots:
    """The all-to-all slots of the exchange ``old -> new``; ``StepError`` when it has none (no
    message, a forwarding phase, buffers above the memory bound, or a mesh above
    ``MAX_DEVICES``)."""
    if not offered(old):
        raise StepError(f"exchange {old} -> {new}: one all-to-all is packed per device, offered on "
                        f"meshes of at most {MAX_DEVICES} devices (this one has {old.mesh.size}); "
                        f"the exchange runs in rounds")
    sch = schedule(old, new)
    if any(r.from_output for r in sch.rounds):
        raise StepError(f"exchange {old} -> {new} forwards completed sums: not one all-to-all")
    src, dst, so, ro = _transfers(sch)
    src = _same_replica(old, new, src, dst)
    coords = mesh_coords(old.mesh)
    crossed = (coords[src] != coords[dst]).any(axis=0)
    names = tuple(n for n, c in zip(old.mesh.names, crossed.tolist()) if c)
    if not names:
        raise StepError(f"exchange {old} -> {new} sends nothing: no all-to-all to run")
    g = math.prod(old.mesh.axis_size(n) for n in names)
    gi = _group_index(old, names)
    pair = dst * g + gi[src]
    order = np.lexsort((np.arange(len(pair)), pair))
    t = np.empty(len(pair), dtype=np.int64)
    t[order] = np.arange(len(pair)) - np.searchsorted(pair[order], pair[order])
    k = int(t.max()) + 1
    bound = max(old.local_size, new.local_size)
    if g * k * math.prod(sch.cell) > bound:
        raise StepError(f"exchange {old} -> {new} as one all-to-all needs {g} x {k} slots of {list(sch.cell)}, "
                        f"more than the memory bound of {bound} elements")
    n, rank = old.mesh.size, len(sch.cell)
    send = np.zeros((n, g * k, rank), dtype=np.int64)
    recv = np.zeros((n, g * k, rank), dtype=np.int64)
    valid = np.zeros((n, g * k), dtype=bool)
    send[src, gi[dst] * k + t] = so
    recv[dst, gi[src] * k + t] = ro
    valid[dst, gi[src] * k + t] = True
    return Slots(names, g, k, sch.cell, send, recv, valid, int((src != dst).sum()))


def padded_recv_cells(s: Slots) -> int:
    """Cells each device receives from the others, padding included: ``(g - 1) * k``."""
    return (s.g - 1) * s.k


__all__ = ["Slots", "padded_recv_cells", "slots"]
