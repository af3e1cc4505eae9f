"""Running a ``CrossMeshPlan``: by copies in one process (``redist.cross_host`` on CPU devices,
``redist.cross_direct`` elsewhere), or as one jitted program over the union of the two device
sets, the only way across processes (``Transport``; docs/design.md 8.4).

The union is a 1-D mesh (axis ``u``, the source's devices first). Each union device passes in its
source block (a zero block where it has none) and gets back a destination block; the program is a
``shard_map`` of static-shape pieces: per stage (the local copies, then each round) every device
cuts a window of the stage's largest piece shape out of its source block at a clamped start read
from a per-device table, the round's ``ppermute`` carries it, and the receiver rolls the piece into
place and writes it under a mask. The destination blocks become the result with
``jax.make_array_from_single_device_arrays`` on the destination's ``NamedSharding``, so the value
is an ordinary array of the destination mesh (docs/design.md section 8.4). Each process passes in
and takes out only its own devices' blocks, so under ``jax.distributed`` every process makes the
same call with its part of the array and the one program spans their devices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from redist.cross_direct import direct_runner, union_devices
from redist.cross_host import host_runner
from redist.cross_mesh import CrossMeshPlan, Piece
from redist.errors import ExecutionError
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_placement import devices_by_id, placement_of, to_named_sharding
from spmd_types.memo import Scope, memo

AXIS = "u"


class Transport(Enum):
    """How a plan's pieces travel (the pieces, hence the bytes each device receives, are the
    plan's either way; docs/design.md section 8.4)."""

    AUTO = "auto"
    """Where this process addresses every device of the move: ``HOST`` on CPU devices, else
    ``DIRECT``; otherwise ``UNION``."""
    DIRECT = "direct"
    """Device buffers cut on their devices and copied between devices (``redist.cross_direct``):
    one process only."""
    HOST = "host"
    """CPU devices only, whose memory is host memory: each destination block written once by
    NumPy from views of its holders' blocks (``redist.cross_host``): one process only."""
    UNION = "union"
    """One program over the union of the devices: also across ``jax.distributed`` processes."""


def transport_for(plan: CrossMeshPlan, transport: Transport | str = Transport.AUTO) -> Transport:
    """``transport`` resolved: ``AUTO`` becomes ``DIRECT`` when every device of ``plan.union``
    belongs to this process, else ``UNION``.

    Raises:
        ExecutionError: an unknown transport, or ``DIRECT`` for a move over another process's devices.
    """
    try:
        t = Transport(transport)
    except ValueError:
        raise ExecutionError(f"transport={transport!r} is not one of {[m.value for m in Transport]}") from None
    mine = {int(d.id): d for d in jax.local_devices()}
    local = all(g in mine for g in plan.union)
    if t in (Transport.DIRECT, Transport.HOST) and not local:
        raise ExecutionError(f"transport={t.value!r} copies buffers within one process, but devices "
                             f"{sorted(set(plan.union) - set(mine))} of the move belong to other processes: use "
                             f"'union' or 'auto'")
    if t is not Transport.AUTO:
        return t
    if not local:
        return Transport.UNION
    return Transport.HOST if all(mine[g].platform == "cpu" for g in plan.union) else Transport.DIRECT


def run_cross_mesh(plan: CrossMeshPlan, x: jax.Array, out_sharding: NamedSharding | None = None,
                   transport: Transport | str = Transport.AUTO) -> jax.Array:
    """``x`` (placed as ``plan.src``) moved to ``plan.dst``: the result is laid out as
    ``out_sharding`` where given (a ``NamedSharding`` whose mesh is ``plan.dst``'s, e.g. the one a
    caller asked for, reduced axes included), else as ``plan.dst``'s own. ``transport`` picks how
    the plan's pieces travel (``Transport``; default: direct copies when this process addresses
    every device of the move, else one program over the union of the devices).

    Example:
        >>> import jax, numpy as np, redist
        >>> from spmd_types import Mesh, parse
        >>> from spmd_types.jax_placement import to_named_sharding
        >>> from spmd_types.placement import Placement
        >>> src = Placement(parse("f32[8,4@x]", Mesh({"x": 4})), (0, 1, 2, 3))
        >>> dst = Placement(parse("f32[8@y,4]", Mesh({"y": 4})), (4, 5, 6, 7))
        >>> a = np.arange(32, dtype=np.float32).reshape(8, 4)
        >>> y = redist.run_cross_mesh(redist.cross_mesh_plan(src, dst), jax.device_put(a, to_named_sharding(src)))
        >>> sorted(d.id for d in y.sharding.device_set), bool(np.array_equal(np.asarray(y), a))
        ([4, 5, 6, 7], True)

    Raises:
        ExecutionError: ``x`` is not placed as ``plan.src``, or is a scalar, or
            ``out_sharding`` is on other devices than ``plan.dst``, or ``transport`` is unknown,
            ``"direct"`` or ``"host"`` over another process's devices, or ``"host"`` off CPU.
        UnknownDeviceError: a device of either placement does not exist in this process.
    """
    have = placement_of(x)
    if have.type.without_reduced() != plan.src.type.without_reduced() or have.devices != plan.src.devices:
        raise ExecutionError(f"x is placed as {have}; the plan's source is {plan.src}")
    ns = out_sharding if out_sharding is not None else to_named_sharding(plan.dst)
    ids = tuple(int(d.id) for d in np.asarray(ns.mesh.devices).reshape(-1))
    if ids != plan.dst.devices:
        raise ExecutionError(f"out_sharding is on devices {ids}; the plan's destination is on {plan.dst.devices}")
    return runner_for(plan, transport)(x, ns)


@memo(Scope.TYPE, maxsize=512)
def runner_for(plan: CrossMeshPlan, transport: Transport | str = Transport.AUTO) -> Callable[[jax.Array, NamedSharding], jax.Array]:
    """The runner of ``plan`` by ``transport`` (resolved by ``transport_for``; cached)."""
    t = transport_for(plan, transport)
    if t is Transport.DIRECT:
        return direct_runner(plan)
    return host_runner(plan) if t is Transport.HOST else runner(plan)


class Runner:
    """A plan made ready to run: its jitted program over the union mesh, the sharding of the
    program's input, and a zero source block on each of this process's devices outside the
    source set (the program's input there, never read; read-only, so made once and kept with the
    runner: that memory is held until ``redist.clear_caches()``). A call is one dispatch of the
    program and two array assemblies."""

    def __init__(self, plan: CrossMeshPlan) -> None:
        devs = union_devices(plan)
        self.plan = plan
        self.program, umesh = _compiled(plan)
        self.in_sharding = NamedSharding(umesh, PartitionSpec(AXIS))
        local = plan.src.type.local_shape
        self.in_shape = (len(plan.union) * local[0], *local[1:])
        self.extra = tuple(g for g in plan.union if g not in set(plan.src.devices))
        mine = {int(d.id) for d in jax.local_devices()}
        np_dtype: Any = numpy_dtype(plan.src.type.dtype)
        self.dtype = np_dtype
        self.zeros: dict[int, Any] = {g: jax.device_put(np.zeros(local, np_dtype), devs[g])
                                      for g in self.extra if g in mine}

    def __call__(self, x: jax.Array, out_sharding: NamedSharding) -> jax.Array:
        """Only this process's devices' blocks go in and come out (``addressable_shards``), so
        under ``jax.distributed`` every process calls it with its own part of ``x``."""
        by_dev = {s.device.id: s.data for s in x.addressable_shards}
        by_dev.update(self.zeros)
        glob = jax.make_array_from_single_device_arrays(self.in_shape, self.in_sharding,
                                                        [by_dev[g] for g in self.plan.union if g in by_dev],
                                                        dtype=self.dtype)
        got = {s.device.id: s.data for s in self.program(glob).addressable_shards}
        return jax.make_array_from_single_device_arrays(self.plan.src.type.shape, out_sharding,
                                                        [got[g] for g in self.plan.dst.devices if g in got],
                                                        dtype=self.dtype)


@memo(Scope.TYPE, maxsize=256)
def runner(plan: CrossMeshPlan) -> Runner:
    """The ``Runner`` of ``plan`` (cached per plan)."""
    return Runner(plan)


@memo(Scope.TYPE, maxsize=256)
def _compiled(plan: CrossMeshPlan) -> tuple[Callable[[Any], Any], jax.sharding.Mesh]:
    """The jitted ``shard_map`` of ``plan`` and its union mesh (cached per plan)."""
    devs = devices_by_id()
    umesh = jax.sharding.Mesh(np.array([devs[g] for g in plan.union], dtype=object), (AXIS,))
    stages = [s for s in (_stage(plan, r) for r in range(-1, plan.rounds)) if s is not None]
    dst_local = plan.dst.type.local_shape

    def body(a: Any) -> Any:
        idx = jax.lax.axis_index(AXIS)
        out = jnp.zeros(dst_local, a.dtype)
        for st in stages:
            out = _run_stage(st, a, out, idx)
        return out

    spec = PartitionSpec(AXIS)
    fn = jax.shard_map(body, mesh=umesh, in_specs=spec, out_specs=spec, check_vma=False)
    return jax.jit(fn), umesh


class _Stage:
    """One stage's static window, ``ppermute`` pairs (``None``: local copies) and per-device
    tables (rows by union index): the sender's clamped start, the receiver's clamped start, the
    roll that moves the piece from the one window to the other, the piece's place and size."""

    def __init__(self, window: tuple[int, ...], perm: list[tuple[int, int]] | None, tables: dict[str, np.ndarray],
                 receivers: np.ndarray):
        self.window, self.perm, self.tables = window, perm, tables
        self.active = receivers
        whole = (tables["size"][receivers] == np.array(window)).all() and not tables["shift"].any()
        self.plain = bool(whole)
        """Every receiver's piece fills the window at the same place in both windows: no roll, no mask."""
        self.everyone = bool(receivers.all())


def _stage(plan: CrossMeshPlan, r: int) -> _Stage | None:
    pieces = plan.stage(r)
    if not pieces:
        return None
    window = plan.round_window(r)
    pos = {g: i for i, g in enumerate(plan.union)}
    rank, n = plan.src.type.rank, len(plan.union)
    tables = {k: np.zeros((n, rank), dtype=np.int32) for k in ("send", "recv", "shift", "lo", "size")}
    for p in pieces:
        s0, t0, size = _offsets(plan, p)
        cs = np.minimum(s0, np.array(plan.src.type.local_shape) - window)
        cd = np.minimum(t0, np.array(plan.dst.type.local_shape) - window)
        tables["send"][pos[p.sender]] = cs
        i = pos[p.receiver]
        tables["recv"][i], tables["lo"][i], tables["size"][i] = cd, t0 - cd, size
        tables["shift"][i] = (t0 - cd) - (s0 - cs)
    perm = None if r < 0 else [(pos[p.sender], pos[p.receiver]) for p in pieces]
    receivers = np.zeros(n, dtype=bool)
    receivers[[pos[p.receiver] for p in pieces]] = True
    return _Stage(window, perm, tables, receivers)


def _offsets(plan: CrossMeshPlan, p: Piece) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The piece's start in its source block, its start in its destination block, its size."""
    return tuple(np.array(v, dtype=np.int64) for v in plan.piece_offsets(p))  # type: ignore[return-value]


def _run_stage(st: _Stage, a: Any, out: Any, idx: Any) -> Any:
    t = {k: jnp.asarray(v)[idx] for k, v in st.tables.items()}
    win = jax.lax.dynamic_slice(a, _starts(t["send"]), st.window)
    if st.perm is not None:
        win = jax.lax.ppermute(win, AXIS, perm=st.perm)
    starts = _starts(t["recv"])
    if st.plain and st.everyone:
        return jax.lax.dynamic_update_slice(out, win, starts)
    old = jax.lax.dynamic_slice(out, starts, st.window)
    if st.plain:
        return jax.lax.dynamic_update_slice(out, jnp.where(jnp.asarray(st.active)[idx], win, old), starts)
    mask = _mask(st.window, t["lo"], t["size"])
    for d in range(len(st.window)):
        if st.window[d] > 1:
            win = jnp.roll(win, t["shift"][d], axis=d)
    return jax.lax.dynamic_update_slice(out, jnp.where(mask, win, old), starts)


def _starts(row: Any) -> Sequence[Any]:
    return [row[d] for d in range(row.shape[0])]


def _mask(window: tuple[int, ...], lo: Any, size: Any) -> Any:
    mask = jnp.ones(window, dtype=bool)
    for d in range(len(window)):
        i = jax.lax.broadcasted_iota(jnp.int32, window, d)
        mask = mask & (i >= lo[d]) & (i < lo[d] + size[d])
    return mask


def window_elements(plan: CrossMeshPlan) -> int:
    """Elements of the largest stage window (the executor's message buffer per device)."""
    return max((math.prod(plan.round_window(r)) for r in range(-1, plan.rounds)), default=0)


__all__ = ["Transport", "run_cross_mesh", "runner_for", "transport_for", "window_elements"]
