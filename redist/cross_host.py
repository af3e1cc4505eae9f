"""Running a ``CrossMeshPlan`` on CPU devices, whose memory is host memory, by NumPy copies.

On the CPU backend a device buffer is host memory and NumPy reads it as a view, so the cheapest
way to carry the plan's pieces is no program at all: each destination block is written once in
host memory from views of its holders' source blocks (exactly the plan's pieces: its local
copies and its messages, each cell once), and all blocks go to their devices in one batched
placement, the call ``jax.device_put`` itself ends in. A block that is the receiver's own whole
source block is that buffer, not copied. Other backends use ``redist.cross_direct`` (device
buffers copied between devices); docs/design.md section 8.4 compares the two.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding

from redist.cross_direct import block_parts, union_devices
from redist.cross_mesh import CrossMeshPlan
from redist.errors import ExecutionError
from spmd_types.dtypes import numpy_dtype
from spmd_types.memo import Scope, memo


class Write(NamedTuple):
    """One piece written into a destination block: ``block[put] = source block of sender[cut]``."""

    sender: int
    cut: tuple[slice, ...]
    put: tuple[slice, ...]


class HostRunner:
    """A plan made ready to run as NumPy copies: per destination block (in the order of the
    destination mesh's devices) its device and its writes, or the receiver's own source block
    where that is the whole block (``keep``)."""

    def __init__(self, plan: CrossMeshPlan) -> None:
        devs = union_devices(plan)
        for g in plan.union:
            if devs[g].platform != "cpu":
                raise ExecutionError(f"transport='host' reads device buffers as host memory, but device {g} is a "
                                     f"{devs[g].platform} device: use 'direct' or 'auto'")
        self.plan = plan
        self.dtype: Any = numpy_dtype(plan.src.type.dtype)
        self.shape = plan.dst.type.local_shape
        self.aval = jax.core.ShapedArray(plan.src.type.shape, self.dtype)
        self.devices = [devs[g] for g in plan.dst.devices]
        self.blocks: list[tuple[int, bool, tuple[Write, ...]]] = []
        for b in block_parts(plan):
            writes = tuple(Write(p.sender, _sl(p.cut), _sl(p.put)) for p in b.parts)
            self.blocks.append((b.device, b.whole and b.parts[0].local, writes))
        self.senders = frozenset(w.sender for _, keep, ws in self.blocks if not keep for w in ws)

    def __call__(self, x: jax.Array, out_sharding: NamedSharding) -> jax.Array:
        by_dev = {s.device.id: s.data for s in x.addressable_shards}
        views = {g: np.asarray(by_dev[g]) for g in self.senders}
        out: list[Any] = []
        for g, keep, writes in self.blocks:
            if keep:
                out.append(by_dev[g])
                continue
            if len(writes) == 1:  # one holder's piece is the whole block: its view, placed as is
                out.append(views[writes[0].sender][writes[0].cut])
                continue
            buf = np.empty(self.shape, self.dtype)
            for w in writes:
                buf[w.put] = views[w.sender][w.cut]
            out.append(buf)
        return place(self.aval, out_sharding, out, self.devices)


def place(aval: Any, sharding: NamedSharding, blocks: list[Any], devices: list[Any]) -> jax.Array:
    """The array of ``blocks`` (one per device of ``sharding``, in its order) in one batched
    placement: JAX's own (``pxla.batched_device_put``) where this JAX has it, else
    ``jax.device_put`` of the list and ``jax.make_array_from_single_device_arrays``."""
    if _BATCHED_PUT is not None:
        return _BATCHED_PUT(aval, sharding, blocks, devices)
    placed = jax.device_put(blocks, devices)
    return jax.make_array_from_single_device_arrays(aval.shape, sharding, placed, dtype=aval.dtype)


def _batched_put() -> Any:
    try:
        from jax._src.interpreters import pxla

        return pxla.batched_device_put
    except (ImportError, AttributeError):  # another JAX: the public calls
        return None


_BATCHED_PUT = _batched_put()


def _sl(s: tuple[tuple[int, int], ...]) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in s)


@memo(Scope.TYPE, maxsize=256)
def host_runner(plan: CrossMeshPlan) -> HostRunner:
    """The ``HostRunner`` of ``plan`` (cached per plan)."""
    return HostRunner(plan)


__all__ = ["HostRunner", "Write", "host_runner", "place"]
