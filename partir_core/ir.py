"""A first-order program traced from a JAX function: the partitioner's input.

Propagation and lowering reason about a list of primitive applications; nested calls (``jit``,
``custom_jvp_call``, ``custom_vjp_call``, ``remat``/``checkpoint``/``remat2``) are inlined so every
rule sees only primitives, and dead code is dropped so unused values never force a collective.
Inlining a checkpoint keeps its semantics (the values are the same); what it drops is the
rematerialisation hint, which inside an already-differentiated step only stops CSE.

Control flow stays structured: ``scan``, ``while`` and ``cond`` are ops whose ``bodies`` are
sub-programs (their values have ids unique across the whole program, and every op of every body
has its own ``index``), so propagation can tie a loop's carries to its body's and reach a
fixpoint through the body, and lowering can emit the loop as a loop.

Typed PRNG keys (``key<fry>``) are values like any other; their dtype string is kept as JAX prints
it, and ``is_key`` tells the rules to keep them replicated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from spmd_types import canonical_dtype


@dataclass(frozen=True)
class Value:
    """An SSA value of the program (an array with a static shape)."""

    id: int
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"%{self.id}"


@dataclass(frozen=True)
class Const:
    """A scalar literal operand (replicated, needs no layout)."""

    value: Any
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    def array(self) -> np.ndarray:
        """The literal as a 0-d array of its own dtype (what ``bind`` needs)."""
        from spmd_types.dtypes import numpy_dtype

        return np.asarray(self.value, dtype=numpy_dtype(self.dtype))  # type: ignore[call-overload]

    def __str__(self) -> str:
        return repr(self.value)


Atom = Value | Const


@dataclass(frozen=True, eq=False)
class Op:
    """One primitive application; ``params`` are JAX's, passed back to ``bind`` after localising."""

    index: int
    prim: Any
    inputs: tuple[Atom, ...]
    outputs: tuple[Value, ...]
    params: dict[str, Any] = field(hash=False)
    bodies: tuple[Program, ...] = ()

    @property
    def name(self) -> str:
        return str(self.prim.name)


@dataclass(frozen=True, eq=False)
class Program:
    """Flat program: inputs named by pytree path, ops in order, outputs, closed-over arrays."""

    inputs: tuple[Value, ...]
    input_paths: tuple[str, ...]
    outputs: tuple[Atom, ...]
    output_paths: tuple[str, ...]
    ops: tuple[Op, ...]
    consts: dict[int, np.ndarray]
    in_tree: Any
    out_tree: Any

    def names(self) -> dict[int, str]:
        """Readable names: input/output paths where they exist, ``%id`` elsewhere."""
        out = {v.id: f"%{v.id}" for op in self.ops for v in op.outputs}
        out.update({v.id: f"const%{v.id}" for v in self.values() if v.id in self.consts})
        for v, p in zip(self.outputs, self.output_paths):
            if isinstance(v, Value) and v.id in out and not out[v.id].startswith("out/"):
                out[v.id] = p
        out.update({v.id: p for v, p in zip(self.inputs, self.input_paths)})
        return out

    def values(self) -> list[Value]:
        """Every value, those inside loop and branch bodies included."""
        seen: dict[int, Value] = {v.id: v for v in self.inputs}
        for op in self.ops:
            for a in op.inputs:
                if isinstance(a, Value):
                    seen.setdefault(a.id, a)
            for v in op.outputs:
                seen.setdefault(v.id, v)
            for body in op.bodies:
                for v in body.values():
                    seen.setdefault(v.id, v)
        return list(seen.values())

    def all_ops(self) -> list[Op]:
        """Every op in index order: each structured op, then its bodies' ops (pre-order)."""
        out: list[Op] = []
        for op in self.ops:
            out.append(op)
            for body in op.bodies:
                out.extend(body.all_ops())
        return out


def is_key(dtype: str) -> bool:
    """A typed PRNG key (``key<fry>``...): never sharded, never moved."""
    return dtype.startswith("key<")


STRUCTURED: dict[str, tuple[str, ...]] = {
    "scan": ("jaxpr",), "while": ("cond_jaxpr", "body_jaxpr"), "cond": ("branches",),
}
"""Control-flow primitives kept as ops with sub-programs, and the params holding their bodies."""


_CALLS = {
    "pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr", "remat2": "jaxpr",
}


def _dtype(aval: Any) -> str:
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        return str(aval.dtype)  # key<fry>: kept as JAX prints it (see is_key)
    return canonical_dtype(np.dtype(aval.dtype).name)


def _arg_names(fn: Callable[..., Any], n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n)]


def _path(prefix: str, keypath: Sequence[Any]) -> str:
    rest = jax.tree_util.keystr(tuple(keypath), simple=True, separator="/")
    return f"{prefix}/{rest}" if rest else prefix


class _Builder:
    def __init__(self, parent: _Builder | None = None) -> None:
        self.parent = parent
        self._next_id = 0
        self.ops: list[Op] = []
        self.consts: dict[int, np.ndarray] = {}

    @property
    def next_id(self) -> int:
        return self.parent.next_id if self.parent is not None else self._next_id

    @next_id.setter
    def next_id(self, n: int) -> None:
        if self.parent is not None:
            self.parent.next_id = n
        else:
            self._next_id = n

    def sub(self, closed: Any) -> Program:
        """A body (``ClosedJaxpr``) as a sub-program with fresh values, ids shared with the parent."""
        jaxpr, consts = (closed.jaxpr, closed.consts) if isinstance(closed, ClosedJaxpr) else (closed, ())
        b = _Builder(self)
        inputs = tuple(b.new(v.aval) for v in jaxpr.invars)
        outs = b.inline(jaxpr, consts, inputs)
        ops = _dce(b.ops, outs)
        live = _live(ops, outs)
        n = len(inputs)
        return Program(inputs, tuple(f"in{i}" for i in range(n)), tuple(outs),
                       tuple(f"out{i}" for i in range(len(outs))), ops,
                       {k: v for k, v in b.consts.items() if k in live}, None, None)

    def new(self, aval: Any) -> Value:
        v = Value(self.next_id, tuple(int(d) for d in aval.shape), _dtype(aval))
        self.next_id += 1
        return v

    def const(self, val: Any) -> Atom:
        arr = np.asarray(val)
        if arr.shape == ():
            return Const(arr.item(), canonical_dtype(arr.dtype.name))
        v = Value(self.next_id, tuple(arr.shape), canonical_dtype(arr.dtype.name))
        self.next_id += 1
        self.consts[v.id] = arr
        return v

    def inline(self, jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Atom]) -> list[Atom]:
        env: dict[Any, Atom] = {}
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self.const(c)
        for var, a in zip(jaxpr.invars, args):
            env[var] = a

        def read(x: Any) -> Atom:
            if isinstance(x, Literal):
                return Const(np.asarray(x.val).item(), _dtype(x.aval))
            return env[x]

        for eqn in jaxpr.eqns:
            ins = [read(x) for x in eqn.invars]
            key = _CALLS.get(eqn.primitive.name)
            outs: list[Atom]
            if eqn.primitive.name in STRUCTURED:
                new = [self.new(v.aval) for v in eqn.outvars]
                bodies = [self.sub(j) for k in STRUCTURED[eqn.primitive.name]
                          for j in (eqn.params[k] if k == "branches" else (eqn.params[k],))]
                self.ops.append(Op(len(self.ops), eqn.primitive, tuple(ins), tuple(new), dict(eqn.params),
                                   tuple(bodies)))
                outs = list(new)
            elif key is not None and key in eqn.params:
                sub = eqn.params[key]
                if isinstance(sub, ClosedJaxpr):
                    outs = self.inline(sub.jaxpr, sub.consts, ins)
                else:
                    outs = self.inline(sub, (), ins)
            else:
                outs = [self.new(v.aval) for v in eqn.outvars]
                self.ops.append(Op(len(self.ops), eqn.primitive, tuple(ins), tuple(outs),  # type: ignore[arg-type]
                                   dict(eqn.params)))
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [read(x) for x in jaxpr.outvars]


def _dce(ops: list[Op], outputs: Sequence[Atom]) -> tuple[Op, ...]:
    live = {a.id for a in outputs if isinstance(a, Value)}
    kept: list[Op] = []
    for op in reversed(ops):
        if any(o.id in live for o in op.outputs) or op.prim.name in ("debug_callback",):
            kept.append(op)
            live.update(a.id for a in op.inputs if isinstance(a, Value))
    kept.reverse()
    return tuple(Op(i, op.prim, op.inputs, op.outputs, op.params, op.bodies) for i, op in enumerate(kept))


def _live(ops: Sequence[Op], outs: Sequence[Atom]) -> set[int]:
    return {a.id for op in ops for a in op.inputs if isinstance(a, Value)} | {
        a.id for a in outs if isinstance(a, Value)}


def _renumber(p: Program, start: int = 0) -> tuple[Program, int]:
    """Give every op of the program and of its bodies its own index (pre-order)."""
    ops = []
    k = start
    for op in p.ops:
        me = k
        k += 1
        bodies = []
        for body in op.bodies:
            nb, k = _renumber(body, k)
            bodies.append(nb)
        ops.append(Op(me, op.prim, op.inputs, op.outputs, op.params, tuple(bodies)))
    return Program(p.inputs, p.input_paths, p.outputs, p.output_paths, tuple(ops), p.consts,
                   p.in_tree, p.out_tree), k


def trace(fn: Callable[..., Any], *args: Any) -> Program:
    """Trace ``fn`` on example arguments (arrays or ``ShapeDtypeStruct``) into a flat ``Program``."""
    closed = jax.make_jaxpr(fn)(*args)
    leaves_with_paths, in_tree = jax.tree_util.tree_flatten_with_path(args)
    names = _arg_names(fn, len(args))
    paths = tuple(_path(names[int(kp[0].idx)], kp[1:]) for kp, _ in leaves_with_paths)  # type: ignore[attr-defined]
    out_shape = jax.eval_shape(fn, *args)
    out_leaves, out_tree = jax.tree_util.tree_flatten_with_path(out_shape)
    out_paths = tuple(_path("out", kp) for kp, _ in out_leaves)
    b = _Builder()
    inputs = tuple(b.new(v.aval) for v in closed.jaxpr.invars)
    outs = b.inline(closed.jaxpr, closed.consts, inputs)
    ops = _dce(b.ops, outs)
    live = _live(ops, outs)
    consts = {k: v for k, v in b.consts.items() if k in live}
    return _renumber(Program(inputs, paths, tuple(outs), out_paths, ops, consts, in_tree, out_tree))[0]
