"""Reference executor: runs the lowered program device by device on NumPy arrays.

Each op is applied eagerly to each device's local arrays and each move runs through redist's
NumPy simulator, so it checks the lowering's *decisions* (rules, local parameters, unreduced
bookkeeping) independently of the ``shard_map`` emitter and of the JAX collective executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from partir_core.decide import Lowered, Move, OpDecision
from partir_core.errors import PartitionError
from partir_core.ir import Value
from partir_core.local import arg_value, needs_offset, run_local
from partir_core.rules import COMBINERS
from redist.simulate import scatter
from redist.simulate import simulate as run_plan
from spmd_types import ShardingType


def _move(mv: Move, xs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in run_plan(mv.plan.steps, mv.plan.all_types, xs)]


def _op(st: OpDecision, args: list[Any], stacked: list[bool]) -> list[np.ndarray]:
    """Run one op on every device (vmapped over a leading device axis when no block offset
    matters, else device by device), then finish any all-reduce(max/min) across device groups."""
    import jax

    op = st.op
    n = st.out_types[0].mesh.size if st.out_types else 1
    if needs_offset(op, st.in_types, st.out_types, st.combine):
        per = []
        for v in range(n):
            def offset(t: ShardingType, d: int, v: int = v) -> Any:
                return np.int32(t.block_index(t.mesh.coords(v))[d] * t.local_shape[d])
            xs = [a[v] if s else a for a, s in zip(args, stacked)]
            per.append(run_local(op, st.in_types, st.out_types, xs, offset, st.combine))
        outs = [np.stack([np.asarray(p[i]) for p in per]) for i in range(len(st.out_types))]
    else:
        def one(*xs: Any) -> tuple[Any, ...]:
            return tuple(run_local(op, st.in_types, st.out_types, list(xs), _no_offset))
        if any(stacked):
            outs = [np.asarray(o) for o in jax.vmap(one, in_axes=[0 if s else None for s in stacked])(*args)]
        else:
            outs = [np.broadcast_to(np.asarray(o), (n,) + np.shape(o)) for o in one(*args)]
    if st.combine:
        outs[0] = _combine(st, args[0], outs[0])
    return outs


def _no_offset(t: ShardingType, d: int) -> Any:  # pragma: no cover - only called when needed
    raise AssertionError("block offset requested for an op that needs none")


def _groups(st: OpDecision) -> list[list[int]]:
    """Devices that differ only in the combine axes (one all-reduce group each)."""
    mesh = st.out_types[0].mesh
    out: dict[tuple[int, ...], list[int]] = {}
    for v in range(mesh.size):
        c = mesh.coords(v)
        out.setdefault(tuple(c[a] for a in mesh.names if a not in st.combine), []).append(v)
    return list(out.values())


def _combine(st: OpDecision, x: np.ndarray, local: np.ndarray) -> np.ndarray:
    op = st.op
    big = COMBINERS[op.name] == "max"
    out = np.array(local)
    for g in _groups(st):
        if op.name in ("argmax", "argmin"):
            vals = np.stack([np.asarray(arg_value(op, x[v])) for v in g])
            best = vals.max(0) if big else vals.min(0)
            idx = np.where(vals == best, local[g], np.iinfo(local.dtype).max).min(0)
            out[g] = idx
        else:
            out[g] = local[g].max(0) if big else local[g].min(0)
    return out


def gather_global(t: ShardingType, xs: Sequence[np.ndarray]) -> np.ndarray:
    """Assemble a global array from per-device blocks of a type without pending sums."""
    out = np.zeros(t.shape, dtype=xs[0].dtype)
    for v in range(t.mesh.size):
        out[tuple(slice(a, b) for a, b in t.block(v))] = xs[v]
    return out


def emulate(low: Lowered, leaves: Sequence[Any]) -> list[np.ndarray]:
    """Run the partitioned program on global input leaves; returns global output leaves."""
    n = low.mesh.size
    env: dict[tuple[int, ShardingType], list[np.ndarray]] = {}
    for v, t, x in zip(low.program.inputs, low.in_types, leaves):
        env[(v.id, t)] = scatter(np.asarray(x), t)
    for cid, arr in low.program.consts.items():
        env[(cid, low.const_types[cid])] = [arr] * n
    for st in low.steps:
        if st.bodies:
            raise PartitionError(f"op #{st.op.index} {st.op.name}: the NumPy reference executor runs "
                                 "straight-line programs only; run the shard_map program instead")
        for mv in st.moves:
            env[(mv.value, mv.dst)] = _move(mv, env[(mv.value, mv.src)])
        args: list[Any] = []
        stacked: list[bool] = []
        for a, ta in zip(st.op.inputs, st.in_types):
            if isinstance(a, Value) and ta is not None:
                args.append(np.stack(env[(a.id, ta)]))
                stacked.append(True)
            else:
                args.append(a.array())  # type: ignore[union-attr]
                stacked.append(False)
        outs = _op(st, args, stacked)
        for v, t, o in zip(st.op.outputs, st.out_types, outs):
            env[(v.id, t)] = list(o)
    for mv in low.out_moves:
        env[(mv.value, mv.dst)] = _move(mv, env[(mv.value, mv.src)])
    return [gather_global(t, env[(v.id, t)]) for v, t in zip(low.program.outputs, low.out_types)]  # type: ignore[union-attr]
