"""Running one op on a device's blocks when the block's position matters.

Most ops run unchanged on local shards, their size params localised (``rules.LOCAL_FORMS``). A
few need the offset of the device's block along a dimension: ``iota`` (its values), a gather or
scatter whose indexed dimension is sharded (each device handles only the indices in its block:
a masked lookup whose zeros the pending sum fills, or a scatter that drops the others), and
``argmax``/``argmin`` over a sharded dimension (local indices become global ones before the
all-reduce picks the winner). Both executors (the ``shard_map`` emitter and the NumPy reference)
call ``run_local`` with their own way of reading a block offset, so the index arithmetic exists
once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from partir_core.ir import Op
from partir_core.rules import COMBINERS, local_params
from spmd_types import ShardingType

Offset = Callable[[ShardingType, int], Any]
"""(type, dim) -> the first global index of this device's block along ``dim`` (an int32 scalar)."""


def indexed_dim(op: Op) -> int | None:
    """The operand dimension a single-index gather or scatter looks up, if any."""
    if op.name == "gather":
        sim = op.params["dimension_numbers"].start_index_map
    elif op.name in ("scatter", "scatter-add", "scatter_add"):
        sim = op.params["dimension_numbers"].scatter_dims_to_operand_dims
    else:
        return None
    return int(sim[0]) if len(sim) == 1 else None


def _sharded(t: ShardingType | None, d: int | None) -> bool:
    return t is not None and d is not None and bool(t.dims[d])


def needs_offset(op: Op, in_types: Sequence[ShardingType | None], out_types: Sequence[ShardingType],
                 combine: Sequence[str]) -> bool:
    if op.name == "random_bits":
        return any(out_types[0].dims)
    if op.name == "iota":
        return bool(out_types[0].dims[int(op.params["dimension"])])
    if op.name in ("argmax", "argmin"):
        return bool(combine)
    return _sharded(in_types[0] if in_types else None, indexed_dim(op))


def _gather(op: Op, params: dict[str, Any], args: list[Any], off: Any, n: int) -> Any:
    import jax.numpy as jnp
    from jax import lax

    operand, idx = args
    local = idx - off.astype(idx.dtype)
    ok = (local >= 0) & (local < n)
    out = op.prim.bind(operand, jnp.where(ok, local, 0), **params)
    dn = params["dimension_numbers"]
    batch = tuple(d for d in range(out.ndim) if d not in dn.offset_dims)
    return jnp.where(lax.broadcast_in_dim(ok[..., 0], out.shape, batch), out, jnp.zeros((), out.dtype))


def _scatter(op: Op, params: dict[str, Any], args: list[Any], off: Any, n: int) -> Any:
    import jax.numpy as jnp
    from jax.lax import GatherScatterMode

    operand, idx, upd = args
    local = idx - off.astype(idx.dtype)
    ok = (local >= 0) & (local < n)
    params = dict(params, mode=GatherScatterMode.FILL_OR_DROP)
    return op.prim.bind(operand, jnp.where(ok, local, n), upd, **params)  # index n: dropped


def random_bits_block(op: Op, key: Any, t: ShardingType, offset: Offset) -> Any:
    """This device's block of ``random_bits(key, shape)``, equal bit for bit to that block of the
    whole array (JAX's partitionable threefry: element i is ``threefry(key, (0, i))`` for its
    row-major global index i, then the two words combined as ``bit_width`` asks)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.extend.random import threefry2x32_p

    shape, local = op.outputs[0].shape, t.local_shape
    strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    index = jnp.zeros(local, jnp.uint32)
    for d, s in enumerate(strides):
        pos = lax.broadcasted_iota(jnp.uint32, local, d)
        if t.dims[d]:
            pos = pos + offset(t, d).astype(jnp.uint32)
        index = index + pos * jnp.uint32(s)
    kd = jax.random.key_data(key)  # the key words stay scalars (as JAX binds them): the hash's
    bits1, bits2 = threefry2x32_p.bind(kd[0], kd[1], jnp.zeros(local, jnp.uint32), index)  # loop carries less
    width = int(op.params["bit_width"])
    dtype = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[width]
    if width == 64:
        return (bits1.astype(dtype) << jnp.asarray(32, dtype)) | bits2.astype(dtype)
    return (bits1 ^ bits2).astype(dtype)


def run_local(op: Op, in_types: Sequence[ShardingType | None], out_types: Sequence[ShardingType],
              args: list[Any], offset: Offset, combine: Sequence[str] = ()) -> list[Any]:
    """``op`` on one device's blocks (before any all-reduce(max/min) its combine axes need)."""
    in_local = [t.local_shape if t is not None else () for t in in_types]
    params = local_params(op, in_local, [t.local_shape for t in out_types])
    d = indexed_dim(op)
    if d is not None and _sharded(in_types[0], d):
        t = in_types[0]
        assert t is not None
        run = _gather if op.name == "gather" else _scatter
        return [run(op, params, args, offset(t, d), t.local_shape[d])]
    if op.name == "random_bits" and any(out_types[0].dims):
        return [random_bits_block(op, args[0], out_types[0], offset)]
    out = op.prim.bind(*args, **params)
    outs = list(out) if op.prim.multiple_results else [out]
    if op.name == "iota":
        t, k = out_types[0], int(op.params["dimension"])
        if t.dims[k]:
            outs[0] = outs[0] + offset(t, k).astype(outs[0].dtype)
    elif op.name in ("argmax", "argmin") and combine:
        t = in_types[0]
        assert t is not None
        outs[0] = outs[0] + offset(t, int(op.params["axes"][0])).astype(outs[0].dtype)
    return outs


def arg_value(op: Op, x: Any) -> Any:
    """The local max (argmax) or min (argmin) that decides which device's index wins."""
    import jax.numpy as jnp

    fn = jnp.max if COMBINERS[op.name] == "max" else jnp.min
    return fn(x, axis=int(op.params["axes"][0]))
