"""Reference executor: runs the lowered program device by device on NumPy arrays.

Each op is applied eagerly to each device's local arrays and each move runs through redist's
NumPy simulator, so it checks the lowering's *decisions* (rules, local parameters, unreduced
bookkeeping) independently of the ``shard_map`` emitter and of the JAX collective executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from partir_core.errors import PartitionError
from partir_core.ir import Value
from partir_core.lower import Lowered, Move, OpDecision
from partir_core.rules import local_params
from redist.simulate import scatter
from redist.simulate import simulate as run_plan
from spmd_types import ShardingType


def _move(mv: Move, xs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in run_plan(mv.plan.steps, mv.plan.all_types, xs)]


def _op(st: OpDecision, args: list[Any], stacked: list[bool]) -> list[np.ndarray]:
    """Run one op on every device at once (vmapped over a leading device axis)."""
    import jax

    op = st.op
    in_local = [t.local_shape if t is not None else () for t in st.in_types]
    params = local_params(op, in_local, [t.local_shape for t in st.out_types])

    def one(*xs: Any) -> Any:
        out = op.prim.bind(*xs, **params)
        return tuple(out) if op.prim.multiple_results else (out,)

    n = st.out_types[0].mesh.size if st.out_types else 1
    if any(stacked):
        outs = [np.asarray(o) for o in jax.vmap(one, in_axes=[0 if s else None for s in stacked])(*args)]
    else:
        outs = [np.broadcast_to(np.asarray(o), (n,) + np.shape(o)) for o in one(*args)]
    if op.name == "iota":
        t = st.out_types[0]
        d = int(op.params["dimension"])
        offs = np.array([t.block_index(t.mesh.coords(v))[d] * t.local_shape[d] for v in range(n)])
        outs[0] = outs[0] + offs.reshape((n,) + (1,) * t.rank).astype(outs[0].dtype)
    return outs


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
