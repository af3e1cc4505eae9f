"""Reference executor: runs the lowered program device by device on NumPy arrays.

Each op is applied eagerly to each device's local arrays and each move runs through redist's
NumPy simulator, so it checks the lowering's *decisions* (rules, local parameters, unreduced
bookkeeping) independently of the ``shard_map`` emitter and of the JAX collective executor.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from partir_core.ir import Value
from partir_core.lower import Lowered, Move, Step
from partir_core.rules import local_params
from redist.simulate import scatter
from redist.simulate import simulate as run_plan
from spmd_types import ShardingType
from spmd_types.dtypes import numpy_dtype


def _move(mv: Move, xs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in run_plan(mv.plan.steps, mv.plan.all_types, xs)]


def _op(st: Step, dev: int, args: list[Any]) -> list[np.ndarray]:
    op = st.op
    in_local = [t.local_shape if t is not None else () for t in st.in_types]
    params = local_params(op, in_local, [t.local_shape for t in st.out_types])
    out = op.prim.bind(*args, **params)
    outs = [np.asarray(o) for o in (out if op.prim.multiple_results else [out])]
    if op.name == "iota":
        t = st.out_types[0]
        d = int(op.params["dimension"])
        block = t.block_index(t.mesh.coords(dev))[d]
        outs[0] = outs[0] + np.asarray(block * t.local_shape[d], outs[0].dtype)
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
        for mv in st.moves:
            env[(mv.value, mv.dst)] = _move(mv, env[(mv.value, mv.src)])
        per_dev: list[list[np.ndarray]] = []
        for dev in range(n):
            args = [env[(a.id, t)][dev] if isinstance(a, Value) and t is not None
                    else np.asarray(a.value, numpy_dtype(a.dtype)) for a, t in zip(st.op.inputs, st.in_types)]  # type: ignore[union-attr]
            per_dev.append(_op(st, dev, args))
        for k, (v, t) in enumerate(zip(st.op.outputs, st.out_types)):
            env[(v.id, t)] = [per_dev[dev][k] for dev in range(n)]
    for mv in low.out_moves:
        env[(mv.value, mv.dst)] = _move(mv, env[(mv.value, mv.src)])
    return [gather_global(t, env[(v.id, t)]) for v, t in zip(low.program.outputs, low.out_types)]  # type: ignore[union-attr]
