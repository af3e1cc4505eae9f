"""Running a ``CrossMeshPlan`` as direct buffer copies, when this process addresses every device.

The plan says which holder sends which box of cells to whom; this transport carries exactly
those pieces without a program over the union of devices (docs/design.md section 8.4): a piece
that is a whole source block is the sender's buffer itself; other pieces are cut on the sender
(one cached jitted slice per sender, all its pieces in one dispatch); every message then moves in
one batched ``jax.device_put`` (the copies ``jax.device_put`` itself makes between devices), and
each destination block that is not one whole piece is assembled on its device from its pieces
and its own source block's overlap (one cached jitted update per block). So the bytes each
device receives are the plan's, and a call is one copy batch plus one small dispatch per sender
that cuts and per block that is assembled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, SingleDeviceSharding

from redist.cross_mesh import CrossMeshPlan, Piece
from redist.errors import ExecutionError
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_placement import devices_by_id
from spmd_types.memo import Scope, memo
from spmd_types.placement import UnknownDeviceError

Slices = tuple[tuple[int, int], ...]
"""Static ``[start, stop)`` per dimension."""


class Part(NamedTuple):
    """One input of a destination block: ``message`` (its index; ``local`` False: the arrived piece)
    or the receiver's own source block (``local`` True), cut to ``take`` where given, written at
    ``put`` in the block; ``sender`` and ``cut`` say where the piece lies in its holder's
    source block."""

    local: bool
    message: int
    take: Slices | None
    put: Slices
    sender: int
    cut: Slices


class Block(NamedTuple):
    """How destination device ``device``'s block is made: ``parts`` written into a block of
    ``shape``, or ``parts[0]`` as it is where ``whole`` (one piece that is the whole block)."""

    device: int
    shape: tuple[int, ...]
    parts: tuple[Part, ...]
    whole: bool


def _slices(start: Sequence[int], size: Sequence[int]) -> Slices:
    return tuple((int(a), int(a) + int(n)) for a, n in zip(start, size))


def _is_whole(start: Sequence[int], size: Sequence[int], shape: Sequence[int]) -> bool:
    return not any(start) and tuple(size) == tuple(shape)



def union_devices(plan: CrossMeshPlan) -> dict[int, Any]:
    """The JAX devices by id, once every device of the move is known to exist (``UnknownDeviceError``
    names the first that does not) and the array has blocks to move (a scalar has none)."""
    if not plan.src.type.rank:
        raise ExecutionError("a scalar has no blocks to move between meshes: place it with jax.device_put")
    devs = devices_by_id()
    for g in plan.union:
        if g not in devs:
            raise UnknownDeviceError(f"device {g} of the move does not exist; available ids: {sorted(devs)}")
    return devs

class DirectRunner:
    """A plan made ready to run as copies: per message its sender and whether it is cut (and
    where), per destination block its parts. ``sends`` lists ``(sender, receiver, shape)`` of
    every array the call hands to ``send``: the plan's messages, in order."""

    def __init__(self, plan: CrossMeshPlan) -> None:
        devs = union_devices(plan)
        self.plan = plan
        self.dtype: Any = numpy_dtype(plan.src.type.dtype)
        src_local = plan.src.type.local_shape
        cuts: dict[int, list[Slices]] = {}
        self.payload: list[tuple[int, int | None]] = []  # (sender, index in its cut outputs or None: whole)
        self.sends: list[tuple[int, int, tuple[int, ...]]] = []
        for m in plan.messages:
            s0, _, size = plan.piece_offsets(m)
            if _is_whole(s0, size, src_local):
                self.payload.append((m.sender, None))
            else:
                cuts.setdefault(m.sender, []).append(_slices(s0, size))
                self.payload.append((m.sender, len(cuts[m.sender]) - 1))
            self.sends.append((m.sender, m.receiver, tuple(size)))
        self.cutters = tuple((g, _cutter(tuple(sl))) for g, sl in cuts.items())
        self.targets = tuple(devs[m.receiver] for m in plan.messages)
        self.blocks = block_parts(plan)
        self.assemblers = tuple(None if b.whole else _assembler(b.shape, tuple((p.take, p.put) for p in b.parts))
                                for b in self.blocks)

    def __call__(self, x: jax.Array, out_sharding: NamedSharding) -> jax.Array:
        by_dev = {s.device.id: s.data for s in x.addressable_shards}
        cut = {g: fn(by_dev[g]) for g, fn in self.cutters}
        payload = [by_dev[g] if k is None else cut[g][k] for g, k in self.payload]
        arrived = send(payload, self.targets) if payload else []
        out = []
        for b, fn in zip(self.blocks, self.assemblers):
            ins = [by_dev[b.device] if p.local else arrived[p.message] for p in b.parts]
            out.append(ins[0] if fn is None else fn(*ins))
        return jax.make_array_from_single_device_arrays(self.plan.src.type.shape, out_sharding, out, dtype=self.dtype)


def send(arrays: list[Any], devices: Sequence[Any]) -> list[Any]:
    """Every message in one batched copy: the runtime call ``jax.device_put`` itself ends in
    (``batched_copy_array_to_devices_with_sharding``) where this JAX has it, which skips
    ``device_put``'s per-leaf Python work (docs/design.md 8.4); else ``jax.device_put`` of the
    list onto the list of devices."""
    if _BATCHED_COPY is None:
        return list(jax.device_put(arrays, devices))
    lists, shardings, semantics = _route(tuple(devices))
    return list(_BATCHED_COPY(arrays, lists, shardings, semantics))


def _batched_copy() -> tuple[Any, Any]:
    """JAX's batched copy between devices and its copy semantics, or ``(None, None)``."""
    try:
        from jax._src.lib import xla_client as xc

        return xc.batched_copy_array_to_devices_with_sharding, xc.ArrayCopySemantics.REUSE_INPUT
    except (ImportError, AttributeError):  # another JAX: the public call
        return None, None


_BATCHED_COPY, _REUSE = _batched_copy()


@memo(Scope.PROGRAM, maxsize=1024)
def _route(devices: tuple[Any, ...]) -> tuple[list[Any], list[SingleDeviceSharding], list[Any]]:
    """The batched copy's arguments for ``devices`` other than the arrays (cached)."""
    shardings = [SingleDeviceSharding(d) for d in devices]
    return [s._internal_device_list for s in shardings], shardings, [_REUSE] * len(devices)


def block_parts(plan: CrossMeshPlan) -> tuple[Block, ...]:
    """Per destination position, its parts: its local copies, then its messages (one pass)."""
    src_local, dst_local = plan.src.type.local_shape, plan.dst.type.local_shape
    parts: list[list[Part]] = [[] for _ in plan.dst.devices]
    pieces: list[tuple[bool, int, Piece]] = [(True, -1, p) for p in plan.local]
    pieces += [(False, i, m) for i, m in enumerate(plan.messages)]
    for local, i, p in pieces:
        s0, t0, size = plan.piece_offsets(p)
        take = None if not local or _is_whole(s0, size, src_local) else _slices(s0, size)
        parts[p.dst_pos].append(Part(local, i, take, _slices(t0, size), p.sender, _slices(s0, size)))
    whole = _slices([0] * len(dst_local), dst_local)
    return tuple(Block(g, dst_local, tuple(ps), len(ps) == 1 and ps[0].take is None and ps[0].put == whole)
                 for g, ps in zip(plan.dst.devices, parts))


@memo(Scope.PROGRAM, maxsize=1024)
def _cutter(pieces: tuple[Slices, ...]) -> Callable[[Any], Any]:
    """One jitted function: a source block -> its pieces ``pieces`` (static slices)."""

    def cut(a: Any) -> tuple[Any, ...]:
        return tuple(a[tuple(slice(lo, hi) for lo, hi in sl)] for sl in pieces)

    return jax.jit(cut)


@memo(Scope.PROGRAM, maxsize=1024)
def _assembler(shape: tuple[int, ...], layout: tuple[tuple[Slices | None, Slices], ...]) -> Callable[..., Any]:
    """One jitted function: the parts of a destination block -> the block. Each part is cut to
    its ``take`` where given and written at its ``put``; the parts tile the block (the plan
    delivers every cell), so the zeros it starts from are all overwritten."""

    def assemble(*parts: Any) -> Any:
        out = jnp.zeros(shape, parts[0].dtype)
        for a, (take, put) in zip(parts, layout):
            if take is not None:
                a = a[tuple(slice(lo, hi) for lo, hi in take)]
            out = out.at[tuple(slice(lo, hi) for lo, hi in put)].set(a)
        return out

    return jax.jit(assemble)


@memo(Scope.TYPE, maxsize=256)
def direct_runner(plan: CrossMeshPlan) -> DirectRunner:
    """The ``DirectRunner`` of ``plan`` (cached per plan)."""
    return DirectRunner(plan)


__all__ = ["Block", "DirectRunner", "Part", "block_parts", "direct_runner", "send"]
