"""Plans that move an array between two placements on different device sets (docs/design.md 8.4).

The source and destination are ``Placement`` values: a type on a logical mesh plus the physical
devices of its positions. A plan works on the *cell grid*: per dimension ``L_d`` =
lcm(source shards, destination shards) equal cells, so every block of either type is a box of
whole cells and every message is a box. For each destination device the plan lists exactly the
cells of its destination block it does not hold in its source block (a device in both sets keeps
the overlap with a local copy), each from one holder of the source block containing it, the
holder chosen least loaded (bytes sent so far). Messages become point-to-point rounds by bipartite
edge colouring (``redist.colouring``): each device sends and receives at most one message a round,
and there are exactly ``max degree`` rounds.

The lower bound on received bytes: a destination device must receive every element of its
destination block it does not hold already, so ``recv(d) >= |B_d| - |B_d & A_d|`` (``A_d`` its
source block, empty off the source set). The plan receives each such cell once and nothing else,
so it meets the bound on every device; ``proofs.cross_mesh`` re-derives and proves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from redist.colouring import colour_classes, max_degree
from redist.errors import IncompatibleTypesError
from spmd_types import ShardingType
from spmd_types.layout import block_bounds, check_index_range
from spmd_types.placement import Placement

Box = tuple[tuple[int, int], ...]
"""Global cell ranges ``[lo, hi)`` per dimension."""


class Piece(NamedTuple):
    """One box of cells moved from ``sender`` (source position ``src_pos``) to ``receiver``
    (destination position ``dst_pos``), physical device ids; ``round`` is -1 for a local copy
    (``sender == receiver``)."""

    sender: int
    receiver: int
    src_pos: int
    dst_pos: int
    box: Box
    round: int


@dataclass(frozen=True)
class CrossMeshPlan:
    """The move of one array from placement ``src`` to ``dst``: its local copies and its messages
    in rounds, with the figures the proofs check (bytes per device, keyed by physical id).

    Example:
        >>> import redist
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.placement import Placement
        >>> src = Placement(parse("f32[8,4@x]", Mesh({"x": 4})), (0, 1, 2, 3))
        >>> plan = redist.cross_mesh_plan(src, Placement(parse("f32[8,4@y]", Mesh({"y": 4})), (0, 1, 6, 7)))
        >>> [(m.sender, m.receiver) for m in plan.messages], [(c.sender, c.receiver) for c in plan.local]
        ([(2, 6), (3, 7)], [(0, 0), (1, 1)])
    """

    src: Placement
    dst: Placement
    cells: tuple[int, ...]
    local: tuple[Piece, ...]
    messages: tuple[Piece, ...]
    rounds: int

    @property
    def union(self) -> tuple[int, ...]:
        """Every device the move touches: the source's in order, then the destination's others."""
        extra = [d for d in self.dst.devices if d not in set(self.src.devices)]
        return self.src.devices + tuple(extra)

    @property
    def cell_extent(self) -> tuple[int, ...]:
        """Elements per cell along each dimension."""
        return tuple(n // c for n, c in zip(self.src.type.shape, self.cells))

    def piece_bytes(self, p: Piece) -> int:
        return box_cells(p.box) * math.prod(self.cell_extent) * self.src.type.itemsize

    def piece_offsets(self, p: Piece) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Elements: the piece's start in its source block, its start in its destination block,
        and its size per dimension (the executors' static slices)."""
        ext = self.cell_extent
        lo = [b[0] * e for b, e in zip(p.box, ext)]
        size = tuple((b[1] - b[0]) * e for b, e in zip(p.box, ext))
        sb = block_bounds(self.src.type)[p.src_pos, :, 0].tolist()
        db = block_bounds(self.dst.type)[p.dst_pos, :, 0].tolist()
        return (tuple(a - b for a, b in zip(lo, sb)), tuple(a - b for a, b in zip(lo, db)), size)

    def recv_bytes(self) -> dict[int, int]:
        """Bytes each device receives from other devices (local copies excluded)."""
        out = dict.fromkeys(self.union, 0)
        for p in self.messages:
            out[p.receiver] += self.piece_bytes(p)
        return out

    def sent_bytes(self) -> dict[int, int]:
        out = dict.fromkeys(self.union, 0)
        for p in self.messages:
            out[p.sender] += self.piece_bytes(p)
        return out

    def lower_bound_bytes(self) -> dict[int, int]:
        """Per device, the bytes of its destination block it does not hold in its source block."""
        return lacking_bytes(self.src, self.dst)

    @cached_property
    def by_round(self) -> tuple[tuple[Piece, ...], ...]:
        """The messages of each round, in round order."""
        out: list[list[Piece]] = [[] for _ in range(self.rounds)]
        for p in self.messages:
            out[p.round].append(p)
        return tuple(tuple(r) for r in out)

    def stage(self, r: int) -> tuple[Piece, ...]:
        """The pieces of round ``r``; ``r = -1``: the local copies."""
        return self.local if r < 0 else self.by_round[r]

    def round_window(self, r: int) -> tuple[int, ...]:
        """Elements per dimension of round ``r``'s message buffer: the largest piece of the round
        per dimension (``r = -1``: the local copies); static shapes for the executor."""
        ext = self.cell_extent
        pieces = self.stage(r)
        return tuple(max((p.box[d][1] - p.box[d][0] for p in pieces), default=0) * ext[d]
                     for d in range(len(ext)))

    @property
    def memory_bound_bytes(self) -> int:
        """``max(local_bytes(src), local_bytes(dst))``: the larger block."""
        return max(self.src.type.local_bytes, self.dst.type.local_bytes)

    def peak_bytes(self) -> int:
        """The largest single buffer the program holds on any device: a source block, a
        destination block, or a round's message buffer (docs/design.md 4.1 counts buffers one at
        a time; ``transient_bytes`` sums them)."""
        item = self.src.type.itemsize
        windows = [math.prod(self.round_window(r)) * item for r in range(-1, self.rounds)]
        return max([self.src.type.local_bytes, self.dst.type.local_bytes, *windows])

    def transient_bytes(self) -> int:
        """Per device, everything the executor holds at once at worst: its source block, its
        destination block and one round's send and receive buffers."""
        item = self.src.type.itemsize
        window = max((math.prod(self.round_window(r)) for r in range(-1, self.rounds)), default=0) * item
        return self.src.type.local_bytes + self.dst.type.local_bytes + 2 * window

    def __str__(self) -> str:
        recv, lb = self.recv_bytes(), self.lower_bound_bytes()
        lines = [f"cross-mesh move {self.src}", f"          -> {self.dst}",
                 f"  cells {list(self.cells)}; {len(self.local)} local copies, {len(self.messages)} messages "
                 f"in {self.rounds} rounds",
                 f"  recv {sum(recv.values())} B in all (lower bound {sum(lb.values())} B); "
                 f"peak buffer {self.peak_bytes()} B per device (larger block {self.memory_bound_bytes} B)"]
        for r in range(self.rounds):
            pairs = ", ".join(f"{p.sender}->{p.receiver}" for p in self.messages if p.round == r)
            lines.append(f"  round {r}: {pairs}")
        return "\n".join(lines)


def box_cells(box: Box) -> int:
    return math.prod(max(hi - lo, 0) for lo, hi in box)


def _intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def cell_counts(src: ShardingType, dst: ShardingType) -> tuple[int, ...]:
    """Per dimension, ``lcm`` of the two types' shard counts: every block is whole cells."""
    return tuple(math.lcm(src.shape[d] // src.local_shape[d] if src.local_shape[d] else 1,
                          dst.shape[d] // dst.local_shape[d] if dst.local_shape[d] else 1)
                 for d in range(src.rank))


def cell_blocks(t: ShardingType, cells: tuple[int, ...]) -> list[Box]:
    """Per mesh position, its block as a box of cells."""
    ext = np.array([n // c for n, c in zip(t.shape, cells)], dtype=np.int64).reshape(1, -1, 1)
    b = block_bounds(t) // np.maximum(ext, 1)
    return [tuple((int(lo), int(hi)) for lo, hi in row) for row in b]


def lacking_bytes(src: Placement, dst: Placement) -> dict[int, int]:
    """Per physical device of either placement: bytes of its destination block outside its
    source block (0 off the destination set)."""
    s, d = src.type, dst.type
    cells = cell_counts(s, d)
    unit = math.prod(n // c for n, c in zip(s.shape, cells)) * s.itemsize
    sb, db = cell_blocks(s, cells), cell_blocks(d, cells)
    out = dict.fromkeys(src.devices + dst.devices, 0)
    for q, g in enumerate(dst.devices):
        p = src.position_of(g)
        held = _intersect(db[q], sb[p]) if p is not None else None
        out[g] = (box_cells(db[q]) - (box_cells(held) if held else 0)) * unit
    return out


def check_pair(src: Any, dst: Any) -> tuple[Placement, Placement]:
    """The two placements of one move, or the typed error saying why not."""
    for what, p in (("source", src), ("destination", dst)):
        if not isinstance(p, Placement):
            raise IncompatibleTypesError(f"{what} of a move between meshes must be a spmd_types.placement."
                                         f"Placement (a type and its device ids), got {type(p).__name__}")
    s, d = src.type, dst.type
    if s.shape != d.shape:
        raise IncompatibleTypesError(f"global shapes differ: source {list(s.shape)}, destination {list(d.shape)}; "
                                     f"redistribution does not reshape")
    if s.dtype != d.dtype:
        raise IncompatibleTypesError(f"dtypes differ: source {s.dtype}, destination {d.dtype}")
    if s.unreduced or d.unreduced:
        side = "source" if s.unreduced else "destination"
        raise IncompatibleTypesError(f"the {side} type {s if s.unreduced else d} is a pending sum; a move between "
                                     f"meshes moves data blocks: reduce it on its own mesh first (redist.reshard)")
    check_index_range(s)
    check_index_range(d)
    return src, dst


def cross_mesh_plan(src: Placement, dst: Placement) -> CrossMeshPlan:
    """Plan the move of an array placed as ``src`` to ``dst`` over any two device sets.

    Every destination device receives exactly the cells it lacks (the transfer lower bound, on
    every device), each from one holder chosen least loaded; rounds by edge colouring.

    Examples:
        A pipeline hand-off: columns over devices 0-3 become rows over devices 4-7, so every
        destination device receives a quarter of each source block, one message a round.

        >>> import redist
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.placement import Placement
        >>> src = Placement(parse("f32[8,4@x]", Mesh({"x": 4})), (0, 1, 2, 3))
        >>> dst = Placement(parse("f32[8@y,4]", Mesh({"y": 4})), (4, 5, 6, 7))
        >>> plan = redist.cross_mesh_plan(src, dst)
        >>> plan.rounds, len(plan.messages), len(plan.local)
        (4, 16, 0)

    Raises:
        IncompatibleTypesError: not two placements, or their shapes or dtypes differ, or a type
            is a pending sum (unreduced axes).
    """
    src, dst = check_pair(src, dst)
    s, d = src.type.without_reduced(), dst.type.without_reduced()
    cells = cell_counts(s, d)
    sb, db = cell_blocks(s, cells), cell_blocks(d, cells)
    holders: dict[Box, list[int]] = {}
    for p in range(len(src.devices)):
        holders.setdefault(sb[p], []).append(p)
    local: list[Piece] = []
    needs: list[tuple[int, Box, Box]] = []  # (dst position, source block, box)
    blocks = list(holders)
    S = np.array(blocks, dtype=np.int64).reshape(len(blocks), s.rank, 2)
    for q, g in enumerate(dst.devices):  # one NumPy pass per destination block over the source blocks
        lo = np.maximum(np.array(db[q])[:, 0], S[:, :, 0])
        hi = np.minimum(np.array(db[q])[:, 1], S[:, :, 1])
        own = src.position_of(g)
        for b in np.flatnonzero((lo < hi).all(axis=1)).tolist():
            box = tuple(zip(lo[b].tolist(), hi[b].tolist()))
            if own is not None and sb[own] == blocks[b]:
                local.append(Piece(g, g, own, q, box, -1))
            else:
                needs.append((q, blocks[b], box))
    messages = _assign(src, dst, holders, needs)
    return CrossMeshPlan(src, dst, cells, tuple(local), *_rounds(src, dst, messages))


def _assign(src: Placement, dst: Placement, holders: dict[Box, list[int]],
            needs: list[tuple[int, Box, Box]]) -> list[Piece]:
    """Each needed box from the least-loaded holder of its source block (largest boxes first)."""
    load = dict.fromkeys(src.devices, 0)
    count = dict.fromkeys(src.devices, 0)
    out: list[Piece] = []
    for q, blk, box in sorted(needs, key=lambda n: (-box_cells(n[2]), n[0], n[1])):
        p = min(holders[blk], key=lambda p: (load[src.devices[p]], count[src.devices[p]], p))
        g = src.devices[p]
        load[g] += box_cells(box)
        count[g] += 1
        out.append(Piece(g, dst.devices[q], p, q, box, 0))
    return sorted(out, key=lambda m: (m.dst_pos, m.box))


def _rounds(src: Placement, dst: Placement, messages: list[Piece]) -> tuple[tuple[Piece, ...], int]:
    """Messages coloured into rounds: no device sends or receives twice in one."""
    edges = [(m.sender, m.receiver) for m in messages]
    out = list(messages)
    for r, idx in enumerate(colour_classes(edges)):
        for i in idx:
            out[i] = out[i]._replace(round=r)
    return tuple(out), max_degree(edges)


__all__ = ["CrossMeshPlan", "Piece", "box_cells", "cell_counts", "check_pair", "cross_mesh_plan", "lacking_bytes"]
