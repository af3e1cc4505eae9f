"""Uneven dimensions: run a function on inputs padded to a multiple of their axes (XLA's way).

A dimension a tactic shards over axes whose product does not divide it is padded, as the input
enters, to the next multiple; the program is re-traced on the padded shapes by interpreting its
jaxpr with each value's padded dimensions known (``dim -> true size``). What sits in a padding
region is unspecified; every op whose true results would read it is made exact: reductions and
contractions over a padded dimension first select the reduction's identity there (0 for sums and
dot products, -inf for max/argmax, so softmax, means and losses are exact: a mean divides by the
true size already in the jaxpr), and operands of true size meeting padded ones are zero-padded.
A primitive that reads across a padded dimension in any other way raises ``UnevenPrimitiveError``
naming it. Outputs leave with their padded dimensions, sliced back by ``Partitioned``. The
partitioned program (and every ``redist`` plan in it) sees only even shapes. See design.md 10.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from partir_core.errors import UnevenPrimitiveError
from partir_core.ir import _CALLS
from partir_core.rules import _ELEMENTWISE, _LINEAR_ALL, _LINEAR_ONE

Pads = dict[int, int]
"""A value's padded dimensions: dimension -> true size (its array holds the padded size)."""

_ALIGNED = set(_ELEMENTWISE) | set(_LINEAR_ALL) | set(_LINEAR_ONE) | {
    "select_n", "convert_element_type", "neg", "sign", "copy", "copy_p", "clamp", "square"}
_IDENTITY = {"reduce_sum": 0.0, "reduce_max": -np.inf, "reduce_min": np.inf, "reduce_prod": 1.0,
             "argmax": -np.inf, "argmin": np.inf, "reduce_and": True, "reduce_or": False}


@dataclass(frozen=True)
class Padding:
    """What padding did to one input signature: per input and output leaf, ``dim -> (true, padded)``."""

    inputs: tuple[tuple[tuple[int, int, int], ...], ...]
    outputs: tuple[tuple[tuple[int, int, int], ...], ...]

    def any(self) -> bool:
        return any(self.inputs) or any(self.outputs)


def padded_size(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


@dataclass
class _PV:
    x: Any
    pads: Pads


def _fill(dtype: Any, value: Any) -> Any:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return bool(value)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return info.min if value == -np.inf else info.max if value == np.inf else int(value)
    return value


def mask(x: Any, dim: int, true: int, value: Any) -> Any:
    """``x`` with ``value`` in its padding region along ``dim`` (iota < true size selects)."""
    keep = lax.broadcasted_iota(np.int32, x.shape, dim) < true
    return lax.select(keep, x, lax.full_like(x, _fill(x.dtype, value)))


def _grow(x: Any, dim: int, to: int) -> Any:
    """Zero-pad dimension ``dim`` of a true-size operand to the padded size ``to``."""
    cfg = [(0, to - n if d == dim else 0, 0) for d, n in enumerate(x.shape)]
    return lax.pad(x, lax.full((), 0, x.dtype), cfg)


def _refuse(prim: str, dims: Sequence[int], why: str) -> UnevenPrimitiveError:
    return UnevenPrimitiveError(
        f"{prim} {why} on padded dimension(s) {list(dims)}; padding it to a multiple of its axes "
        "would change the result: shard another dimension, make the size divisible, or pass "
        "uneven='refuse' to partition")


def _aligned(prim: str, args: list[_PV], params: dict[str, Any]) -> list[_PV]:
    rank = max(len(np.shape(a.x)) for a in args)
    pads: Pads = {}
    for a in args:
        pads.update(a.pads)
    xs = []
    for a in args:
        x = a.x
        if len(np.shape(x)) == rank:
            for d, t in pads.items():
                if d not in a.pads and np.shape(x)[d] == t and t > 1:
                    x = _grow(x, d, _padded_of(args, d))
        xs.append(x)
    return [_PV(o, dict(pads)) for o in _bind(prim, xs, params)]


def _padded_of(args: list[_PV], d: int) -> int:
    return next(int(np.shape(a.x)[d]) for a in args if d in a.pads)


def _bind(prim: Any, xs: Sequence[Any], params: dict[str, Any]) -> list[Any]:
    out = prim.bind(*xs, **params)
    return list(out) if prim.multiple_results else [out]


def _broadcast(eqn: Any, a: _PV) -> list[_PV]:
    bd = eqn.params["broadcast_dimensions"]
    shape = list(eqn.params["shape"])
    pads = {}
    for i, t in a.pads.items():
        if shape[bd[i]] != 1:
            shape[bd[i]] = np.shape(a.x)[i]
            pads[bd[i]] = t
    return [_PV(o, pads) for o in _bind(eqn.primitive, [a.x], {**eqn.params, "shape": tuple(shape)})]


def _transpose(eqn: Any, a: _PV) -> list[_PV]:
    perm = eqn.params["permutation"]
    pads = {j: a.pads[p] for j, p in enumerate(perm) if p in a.pads}
    return [_PV(o, pads) for o in _bind(eqn.primitive, [a.x], eqn.params)]


def _reshape(eqn: Any, a: _PV) -> list[_PV]:
    """A padded dimension must survive as one whole output dimension (same size, same position in
    the row-major order): reshapes that merge or split it would interleave the padding."""
    old = list(np.shape(a.x))
    true_old = [a.pads.get(d, n) for d, n in enumerate(old)]
    new = list(eqn.params["new_sizes"])
    pads: Pads = {}
    for d, t in a.pads.items():
        before = math.prod(true_old[:d])
        j = next((j for j in range(len(new)) if math.prod(new[:j]) == before and new[j] == t), None)
        if j is None or math.prod(true_old[d + 1:]) != math.prod(new[j + 1:]):
            raise _refuse("reshape", [d], "merges or splits a dimension")
        new[j] = old[d]
        pads[j] = t
    params = {**eqn.params, "new_sizes": tuple(new)}
    return [_PV(o, pads) for o in _bind(eqn.primitive, [a.x], params)]


def _squeeze(eqn: Any, a: _PV) -> list[_PV]:
    gone = set(eqn.params["dimensions"])
    keep = [d for d in range(len(np.shape(a.x))) if d not in gone]
    pads = {keep.index(d): t for d, t in a.pads.items()}
    return [_PV(o, pads) for o in _bind(eqn.primitive, [a.x], eqn.params)]


def _reduce(eqn: Any, a: _PV) -> list[_PV]:
    name = eqn.primitive.name
    axes = eqn.params.get("axes", ())
    axes = tuple(axes) if not isinstance(axes, int) else (axes,)
    x = a.x
    for d in axes:
        if d in a.pads:
            x = mask(x, d, a.pads[d], _IDENTITY[name])
    keep = [d for d in range(len(np.shape(a.x))) if d not in axes]
    pads = {keep.index(d): t for d, t in a.pads.items() if d not in axes}
    return [_PV(o, pads) for o in _bind(eqn.primitive, [x], eqn.params)]


def _dot(eqn: Any, lhs: _PV, rhs: _PV) -> list[_PV]:
    """Contracted padded dims are zeroed on both sides (a garbage inf times zero would be NaN);
    a true-size side meeting a padded one is zero-padded first."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    x, y = lhs.x, rhs.x
    for dl, dr in list(zip(lc, rc)) + list(zip(lb, rb)):
        t = lhs.pads.get(dl, rhs.pads.get(dr))
        if t is None:
            continue
        if dl not in lhs.pads:
            x = _grow(x, dl, np.shape(y)[dr])
        if dr not in rhs.pads:
            y = _grow(y, dr, np.shape(x)[dl])
        if dl in lc:
            x, y = mask(x, dl, t, 0), mask(y, dr, t, 0)
    lfree = [d for d in range(len(np.shape(x))) if d not in lc and d not in lb]
    rfree = [d for d in range(len(np.shape(y))) if d not in rc and d not in rb]
    pads: Pads = {}
    for k, (dl, dr) in enumerate(zip(lb, rb)):
        t = lhs.pads.get(dl, rhs.pads.get(dr))
        if t is not None:
            pads[k] = t
    for k, d in enumerate(lfree):
        if d in lhs.pads:
            pads[len(lb) + k] = lhs.pads[d]
    for k, d in enumerate(rfree):
        if d in rhs.pads:
            pads[len(lb) + len(lfree) + k] = rhs.pads[d]
    return [_PV(o, pads) for o in _bind(eqn.primitive, [x, y], eqn.params)]


_UNARY: dict[str, Callable[[Any, _PV], list[_PV]]] = {
    "broadcast_in_dim": _broadcast, "transpose": _transpose, "reshape": _reshape,
    "squeeze": _squeeze, **{n: _reduce for n in _IDENTITY},
}


def _eval(jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[_PV]) -> list[_PV]:
    env: dict[Any, _PV] = {}
    for v, c in zip(jaxpr.constvars, consts):
        env[v] = _PV(c, {})
    for v, a in zip(jaxpr.invars, args):
        env[v] = a

    def read(v: Any) -> _PV:
        return _PV(v.val, {}) if isinstance(v, Literal) else env[v]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _eqn(eqn, ins)
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _eqn(eqn: Any, ins: list[_PV]) -> list[_PV]:
    name = eqn.primitive.name
    key = _CALLS.get(name)
    if key is not None and key in eqn.params:
        sub = eqn.params[key]
        return _eval(sub.jaxpr, sub.consts, ins) if isinstance(sub, ClosedJaxpr) else _eval(sub, (), ins)
    if not any(a.pads for a in ins):
        return [_PV(o, {}) for o in _bind(eqn.primitive, [a.x for a in ins], eqn.params)]
    if name in _ALIGNED:
        return _aligned(eqn.primitive, ins, eqn.params)
    if name in _UNARY and len(ins) == 1:
        return _UNARY[name](eqn, ins[0])
    if name == "dot_general":
        return _dot(eqn, ins[0], ins[1])
    dims = sorted({d for a in ins for d in a.pads})
    raise _refuse(name, dims, "has no padding rule")


def pad_function(fn: Callable[..., Any], args: Sequence[Any],
                 in_pads: dict[int, dict[int, int]]) -> tuple[Callable[..., Any], tuple[Any, ...], Padding]:
    """``fn`` as a function of padded inputs (leaf ``i`` dim ``d`` padded to ``in_pads[i][d]``),
    example padded arguments (``ShapeDtypeStruct``), and what was padded (outputs included)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    closed = jax.make_jaxpr(fn)(*args)
    out_tree = jax.tree_util.tree_structure(jax.eval_shape(fn, *args))
    true_pads = [{d: int(np.shape(x)[d]) for d in in_pads.get(i, {})} for i, x in enumerate(leaves)]
    record: list[tuple[tuple[int, int, int], ...]] = []

    def padded(*pargs: Any) -> Any:
        flat = jax.tree_util.tree_leaves(pargs)
        outs = _eval(closed.jaxpr, closed.consts, [_PV(x, p) for x, p in zip(flat, true_pads)])
        record[:] = [tuple((d, t, int(np.shape(o.x)[d])) for d, t in sorted(o.pads.items())) for o in outs]
        return jax.tree_util.tree_unflatten(out_tree, [o.x for o in outs])

    padded.__signature__ = _signature(fn)  # type: ignore[attr-defined]
    specs = []
    for i, x in enumerate(leaves):
        shape = list(np.shape(x))
        for d, p in in_pads.get(i, {}).items():
            shape[d] = p
        specs.append(jax.ShapeDtypeStruct(tuple(shape), x.dtype))
    pargs = tuple(jax.tree_util.tree_unflatten(tree, specs))
    jax.eval_shape(padded, *pargs)
    ins = tuple(tuple((d, int(np.shape(leaves[i])[d]), p) for d, p in sorted(in_pads.get(i, {}).items()))
                for i in range(len(leaves)))
    return padded, pargs, Padding(ins, tuple(record))


def _signature(fn: Callable[..., Any]) -> Any:
    import inspect

    return inspect.signature(fn)


def pad_inputs(leaves: Sequence[Any], padding: Padding) -> list[Any]:
    """Each input leaf zero-padded as ``padding`` says (as it enters the partitioned program)."""
    out = []
    for x, dims in zip(leaves, padding.inputs):
        if dims:
            widths = [(0, 0)] * np.ndim(x)
            for d, t, p in dims:
                widths[d] = (0, p - t)
            x = jax.numpy.pad(x, widths)
        out.append(x)
    return out


def slice_outputs(outs: Sequence[Any], padding: Padding, auto_mesh: Any) -> list[Any]:
    """Each output leaf cut back to its true shape as it leaves. A ``NamedSharding`` cannot
    describe an uneven block, so a cut output leaves replicated (jit on ``auto_mesh``, the same
    devices with Auto axes, picks that); outputs without padding keep their layout."""
    from jax.sharding import NamedSharding

    res = []
    for x, dims in zip(outs, padding.outputs):
        if dims:
            spec = getattr(x.sharding, "spec", None)
            if spec is not None:
                x = jax.device_put(x, NamedSharding(auto_mesh, spec))
            limits = list(np.shape(x))
            for d, t, _ in dims:
                limits[d] = t
            x = _cut(x, tuple(limits))
        res.append(x)
    return res


@jax.jit(static_argnums=1)
def _cut(x: Any, limits: tuple[int, ...]) -> Any:
    return lax.slice(x, (0,) * len(limits), limits)
