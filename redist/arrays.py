"""Test inputs laid out as a source type, their expected values, and the equality check.

Values are small integers in every dtype, so sums of unreduced partials are exact in bf16 and the
two sides' results can be compared for *equality*, not closeness: any difference is a bug.

An unreduced source cannot be ``device_put`` (it is not a value but a pending sum): it is built
with ``jax.make_array_from_single_device_arrays`` from per-device partials on an Explicit-axes
mesh (JAX allows ``unreduced`` only on Explicit axes). Ours and XLA's programs then receive the very same
array, so XLA and ours are measured identically.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from spmd_types import ShardingType
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import to_partition_spec
from spmd_types.layout import reduction_group_coords


def _block_slices(t: ShardingType, device: int) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in t.block(device))


def reference_values(t: ShardingType, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(partials ``[r, *shape]``, their sum ``[*shape]``) with ``r`` = unreduced group size.

    Partials are in ``[0, 4)`` when there is something to sum (8 of them stay below 32, exact in
    bf16) and in ``[0, 128)`` otherwise.
    """
    r = 1
    for a in t.sorted_unreduced():
        r *= t.mesh.axis_size(a)
    rng = np.random.default_rng(seed)
    high = 4 if r > 1 else 128
    partials = rng.integers(0, high, size=(r, *t.shape)).astype(numpy_dtype(t.dtype))  # type: ignore[call-overload]
    total = partials.astype(np.float64).sum(axis=0).astype(partials.dtype)
    return partials, total


def make_input(t: ShardingType, jax_mesh: jax.sharding.Mesh, seed: int = 0) -> tuple[jax.Array, np.ndarray]:
    """A ``jax.Array`` laid out as ``t`` on ``jax_mesh`` and the global value it stands for. With
    pending sums each device holds its own partial's block: across ``jax.distributed`` processes
    each process places only its own devices' blocks (every process computes the same values)."""
    partials, total = reference_values(t, seed)
    sharding = NamedSharding(jax_mesh, to_partition_spec(t))
    if not t.unreduced:
        return jax.make_array_from_callback(t.shape, sharding, partials[0].__getitem__), total
    group = reduction_group_coords(t)
    devices = list(jax_mesh.devices.reshape(-1))
    here = jax.process_index()
    shards = [
        jax.device_put(partials[int(group[i])][_block_slices(t, i)], devices[i])
        for i in range(t.mesh.size) if devices[i].process_index == here
    ]
    return jax.make_array_from_single_device_arrays(t.shape, sharding, shards), total


def check_output(out: Any, expected: np.ndarray, dst: ShardingType) -> str | None:
    """``None`` if ``out`` holds ``expected`` laid out exactly as ``dst``; else what is wrong."""
    want = to_partition_spec(dst)
    if not isinstance(out.sharding, NamedSharding):
        return f"output sharding {out.sharding!r} is not a NamedSharding"
    target = NamedSharding(out.sharding.mesh, want)
    if not out.sharding.is_equivalent_to(target, len(dst.shape)):
        return f"output sharding {out.sharding.spec} differs from {want}"
    if dst.unreduced:
        return _check_pending_sum(out, expected, dst)
    for shard in out.addressable_shards:
        got = np.asarray(shard.data)
        if not np.array_equal(got, expected[shard.index]):
            return f"values differ on device {shard.device} (block {shard.index})"
    return None


def _check_pending_sum(out: Any, expected: np.ndarray, dst: ShardingType) -> str | None:
    """``check_output`` of a pending sum: JAX gives no block index of an unreduced array, so the
    blocks come from ``dst`` by device position, and each block's partials are summed over the
    devices holding it. A block whose devices are not all addressable here (a group across
    ``jax.distributed`` processes) is not checked by this process."""
    positions = {d: i for i, d in enumerate(out.sharding.mesh.devices.reshape(-1))}
    group = math.prod(dst.mesh.axis_size(a) for a in dst.sorted_unreduced())
    sums: dict[tuple[tuple[int, int], ...], tuple[np.ndarray, int]] = {}
    for shard in out.addressable_shards:
        key = tuple(dst.block(positions[shard.device]))
        total, n = sums.get(key, (np.zeros(dst.local_shape, np.float64), 0))
        sums[key] = (total + np.asarray(shard.data, np.float64), n + 1)
    for key, (total, n) in sums.items():
        block = tuple(slice(a, b) for a, b in key)
        if n == group and not np.array_equal(total.astype(expected.dtype), expected[block]):
            return f"the partial sums of block {key} differ from the array's block"
    return None
