"""Emitting: a ``Lowered`` program (every decision made, see ``decide``) as one JAX program.

Each op runs on its local shards inside one ``shard_map``, with ``redist``'s local plan of every
move in between. A structured op (``scan``, ``while``, ``cond``) is emitted as the same loop or
switch around its bodies' local programs, so a collective inside a body runs once per iteration.
Nothing is decided here: this module only reads the decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from partir_core.decide import Lowered, OpDecision
from partir_core.ir import Const, Value
from partir_core.local import arg_value, run_local
from partir_core.rules import COMBINERS
from spmd_types import ShardingType


def _run_scan(step: OpDecision, args: list[Any]) -> list[Any]:
    from jax import lax

    p = step.op.params
    c, k = int(p["num_consts"]), int(p["num_carry"])
    body = body_fn(step.bodies[0])
    consts = args[:c]

    def f(carry: tuple[Any, ...], x: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        outs = body(*consts, *carry, *x)
        return tuple(outs[:k]), tuple(outs[k:])

    carry, ys = lax.scan(f, tuple(args[c:c + k]), tuple(args[c + k:]), length=int(p["length"]),
                         reverse=bool(p["reverse"]), unroll=p["unroll"])
    return list(carry) + list(ys)


def _run_while(step: OpDecision, args: list[Any]) -> list[Any]:
    from jax import lax

    p = step.op.params
    cn, bn = int(p["cond_nconsts"]), int(p["body_nconsts"])
    cond, body = body_fn(step.bodies[0]), body_fn(step.bodies[1])
    cc, bc = args[:cn], args[cn:cn + bn]
    out = lax.while_loop(lambda x: cond(*cc, *x)[0], lambda x: tuple(body(*bc, *x)), tuple(args[cn + bn:]))
    return list(out)


def _run_cond(step: OpDecision, args: list[Any]) -> list[Any]:
    from jax import lax

    branches = [body_fn(b) for b in step.bodies]
    return list(lax.switch(args[0], branches, *args[1:]))


_RUN_STRUCTURED: dict[str, Callable[[OpDecision, list[Any]], list[Any]]] = {
    "scan": _run_scan, "while": _run_while, "cond": _run_cond}


def _run_op(step: OpDecision, args: list[Any]) -> list[Any]:
    import jax.numpy as jnp
    from jax import lax

    if step.bodies:
        return _RUN_STRUCTURED[step.op.name](step, args)
    op = step.op

    def offset(t: ShardingType, d: int) -> Any:
        block = jnp.zeros((), jnp.int32)
        for a in t.dims[d]:
            name, pre, size = t.mesh.span(a)
            digit = lax.axis_index(name) // (t.mesh.axis_size(name) // (pre * size)) % size
            block = block * size + digit
        return block * t.local_shape[d]

    outs = run_local(op, step.in_types, step.out_types, args, offset, step.combine)
    if step.combine:
        axes = tuple(step.combine)
        kind = COMBINERS[op.name]
        if op.name in ("argmax", "argmin"):
            val = arg_value(op, args[0])
            best = lax.pmax(val, axes) if kind == "max" else lax.pmin(val, axes)
            big = jnp.iinfo(outs[0].dtype).max
            outs[0] = lax.pmin(jnp.where(val == best, outs[0], big), axes)
        else:
            outs[0] = lax.pmax(outs[0], axes) if kind == "max" else lax.pmin(outs[0], axes)
    return outs


def body_fn(low: Lowered) -> Callable[..., tuple[Any, ...]]:
    """The per-device program: every op on local shards, redist's local plans in between."""
    from redist.executor import apply_local

    def body(*xs: Any) -> tuple[Any, ...]:
        env: dict[tuple[int, ShardingType], Any] = {}
        for v, t, x in zip(low.program.inputs, low.in_types, xs):
            env[(v.id, t)] = x
        for cid, arr in low.program.consts.items():
            env[(cid, low.const_types[cid])] = arr
        for st in low.steps:
            for mv in st.moves:
                env[(mv.value, mv.dst)] = apply_local(mv.plan, env[(mv.value, mv.src)])
            args = [env[(a.id, t)] if isinstance(a, Value) and t is not None else a.array()  # type: ignore[union-attr]
                    for a, t in zip(st.op.inputs, st.in_types)]
            for v, t, o in zip(st.op.outputs, st.out_types, _run_op(st, args)):
                env[(v.id, t)] = o
        for mv in low.out_moves:
            env[(mv.value, mv.dst)] = apply_local(mv.plan, env[(mv.value, mv.src)])
        return tuple(env[(v.id, t)] if isinstance(v, Value) else _literal(v, t)
                     for v, t in zip(low.program.outputs, low.out_types))

    return body


def _literal(c: Const, t: ShardingType) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(c.array())


def compile_lowered(low: Lowered, jmesh: Any = None) -> Callable[..., Any]:
    """A jitted callable on flat input leaves (laid out by ``in_types``) -> flat output leaves."""
    import jax

    from spmd_types.jax_interop import to_partition_spec

    jmesh = jmesh if jmesh is not None else low.mesh.to_jax()
    in_specs = tuple(to_partition_spec(t) for t in low.in_types)
    out_specs = tuple(to_partition_spec(t) for t in low.out_types)
    fn = jax.shard_map(body_fn(low), mesh=jmesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    return jax.jit(fn)


__all__ = ["body_fn", "compile_lowered"]
