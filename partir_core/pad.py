"""Uneven dimensions: run a function on inputs padded to a multiple of their axes (XLA's way).

A dimension a tactic shards over axes whose product does not divide it is padded, as the input
enters, to the next multiple; the program is re-traced on the padded shapes by interpreting its
jaxpr with each value's padded dimensions known (``dim -> true size``). What sits in a padding
region is unspecified; every op whose true results would read it is made exact: reductions and
contractions over a padded dimension first select the reduction's identity there (0 for sums and
dot products, -inf for max/argmax, so softmax, means and losses are exact: a mean divides by the
true size already in the jaxpr), and operands of true size meeting padded ones are zero-padded.
Cumulative ops (``cumsum``...) along a padded dimension are exact as they are, the padding being
at the end (a reverse one selects the identity there first), and ``top_k`` along one selects
-inf there. A primitive that reads across a padded dimension in any other way raises
``UnevenPrimitiveError`` naming it. Outputs leave with their padded dimensions, sliced back by ``Partitioned``. The
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
    extra_bytes: int = 0
    """Bytes the padding adds to inputs and outputs (whole arrays)."""
    extra_flops: float = 0.0
    """FLOPs it adds to the whole step (``simulate.program_flops``, padded minus true)."""

    def lines(self, in_paths: Sequence[str], out_paths: Sequence[str]) -> list[str]:
        """One line per padded input or output, then the totals (for ``explain()``)."""
        out = []
        for kind, paths, dims in (("input", in_paths, self.inputs), ("output", out_paths, self.outputs)):
            for path, ds in zip(paths, dims):
                if ds:
                    pads = ", ".join(f"dim {d}: {t} -> {p}" for d, t, p in ds)
                    out.append(f"{kind} {path}: {pads}" + (" (cut back as it leaves, replicated)"
                                                           if kind == "output" else ""))
        out.append(f"padding adds {self.extra_bytes:,} B to inputs and outputs and "
                   f"{self.extra_flops:,.0f} FLOPs to the step (all devices)")
        return out


def extra_bytes(leaves: Sequence[Any], dims: Sequence[tuple[tuple[int, int, int], ...]]) -> int:
    """Bytes added to ``leaves`` (arrays or shape structs of the true shapes) by padding ``dims``."""
    total = 0
    for x, ds in zip(leaves, dims):
        if ds:
            shape = list(np.shape(x))
            true = math.prod(shape)
            for d, _, p in ds:
                shape[d] = p
            total += (math.prod(shape) - true) * np.dtype(x.dtype).itemsize
    return total


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
                if d not in a.pads and np.shape(x)[d] == t:
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
        if shape[bd[i]] != t:  # a true size of 1 broadcast wider: the padding would be read
            raise _refuse("broadcast_in_dim", [i], "broadcasts a dimension of true size 1")
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


def _slice(eqn: Any, a: _PV) -> list[_PV]:
    """A slice may keep a padded dimension only whole (from 0 to its true size, stride 1)."""
    start, limit, strides = eqn.params["start_indices"], list(eqn.params["limit_indices"]), eqn.params["strides"]
    for d, t in a.pads.items():
        if start[d] != 0 or limit[d] != t or (strides and strides[d] != 1):
            raise _refuse("slice", [d], "takes part of a dimension")
        limit[d] = np.shape(a.x)[d]
    return [_PV(o, dict(a.pads)) for o in _bind(eqn.primitive, [a.x], {**eqn.params, "limit_indices": tuple(limit)})]


def _along(eqn: Any, ins: list[_PV]) -> list[_PV]:
    """Ops along one axis (concatenate, split, pad): the padded dimensions must be other ones."""
    axis = eqn.params.get("dimension", eqn.params.get("axis"))
    if eqn.primitive.name == "pad":
        axes = [d for d, c in enumerate(eqn.params["padding_config"]) if tuple(c) != (0, 0, 0)]
    else:
        axes = [axis]
    hit = sorted({d for a in ins for d in a.pads if d in axes})
    if hit:
        raise _refuse(eqn.primitive.name, hit, "works along")
    if eqn.primitive.name == "pad":
        return [_PV(o, dict(ins[0].pads)) for o in _bind(eqn.primitive, [a.x for a in ins], eqn.params)]
    return _aligned(eqn.primitive, ins, eqn.params)


def _gather(eqn: Any, op: _PV, idx: _PV) -> list[_PV]:
    """Rows picked by index stay true rows (indices point into the true region); a padded offset
    dimension taken whole stays padded; padded index batch dimensions pad the result's."""
    dn = eqn.params["dimension_numbers"]
    sizes = list(eqn.params["slice_sizes"])
    rank_out = len(eqn.outvars[0].aval.shape)
    batch_out = [d for d in range(rank_out) if d not in dn.offset_dims]
    window = [d for d in range(len(sizes)) if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    x, i = op.x, idx.x
    pads: Pads = {}
    for d, t in op.pads.items():
        if d in dn.operand_batching_dims:
            k = dn.start_indices_batching_dims[dn.operand_batching_dims.index(d)]
            if k not in idx.pads:
                i = _grow(i, k, np.shape(x)[d])
            pads[batch_out[k]] = t
        elif d in window and sizes[d] == t:
            sizes[d] = np.shape(x)[d]
            pads[dn.offset_dims[window.index(d)]] = t
        elif sizes[d] != 1:
            raise _refuse("gather", [d], "takes a partial slice")
    last = np.ndim(idx.x) - 1
    for k, t in idx.pads.items():
        if k == last:
            raise _refuse("gather", [k], "reads its index vector")
        if k in dn.start_indices_batching_dims:
            d = dn.operand_batching_dims[dn.start_indices_batching_dims.index(k)]
            if d not in op.pads:
                x = _grow(x, d, np.shape(i)[k])
        pads[batch_out[k]] = t
    params = {**eqn.params, "slice_sizes": tuple(sizes)}
    return [_PV(o, pads) for o in _bind(eqn.primitive, [x, i], params)]


def _scatter_add(eqn: Any, op: _PV, idx: _PV, upd: _PV) -> list[_PV]:
    """Updates in a padding region are zeroed first (their indices may point at true rows)."""
    dn = eqn.params["dimension_numbers"]
    x, i, u = op.x, idx.x, upd.x
    scatter_dims = [d for d in range(np.ndim(u)) if d not in dn.update_window_dims]
    window = [d for d in range(np.ndim(x)) if d not in dn.inserted_window_dims and d not in dn.operand_batching_dims]
    last = np.ndim(i) - 1
    for j, du in enumerate(scatter_dims):  # update scatter dim j <-> index batch dim j
        t = upd.pads.get(du, idx.pads.get(j))
        if t is None:
            continue
        if j == last and j in idx.pads:
            raise _refuse("scatter-add", [j], "reads its index vector")
        if du not in upd.pads:
            u = _grow(u, du, np.shape(i)[j])
        if j not in idx.pads:
            i = _grow(i, j, np.shape(u)[du])
        u = mask(u, du, t, 0)
        if j in dn.scatter_indices_batching_dims:
            d = dn.operand_batching_dims[dn.scatter_indices_batching_dims.index(j)]
            if d not in op.pads:
                x = _grow(x, d, np.shape(u)[du])
    pads = dict(op.pads)
    for j, du in enumerate(scatter_dims):
        if j in dn.scatter_indices_batching_dims:
            d = dn.operand_batching_dims[dn.scatter_indices_batching_dims.index(j)]
            t = upd.pads.get(du, idx.pads.get(j))
            if t is not None:
                pads[d] = t
    for k, d in enumerate(window):
        du = dn.update_window_dims[k]
        if d in pads and du not in upd.pads:
            u = _grow(u, du, np.shape(x)[d])
        elif du in upd.pads and d not in pads:
            raise _refuse("scatter-add", [du], "writes a padded window into a true-size operand")
    return [_PV(o, pads) for o in _bind(eqn.primitive, [x, i, u], eqn.params)]


def _grown(v: _PV, want: Pads, sizes: dict[int, int]) -> Any:
    """``v``'s array zero-padded on each dimension of ``want`` it does not have padded yet."""
    y = v.x
    for d in want:
        if d not in v.pads:
            y = _grow(y, d, sizes[d])
    return y


def _scan(eqn: Any, ins: list[_PV]) -> list[_PV]:
    """The body re-traced with its carries' and slices' padding; carries padded on the way out
    are padded on the way in too (a fixpoint), and ``lax.scan`` builds the new loop."""
    p = eqn.params
    nc, nk = p["num_consts"], p["num_carry"]
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    if any(0 in x.pads for x in xs):
        raise _refuse("scan", [0], "iterates over")
    body = p["jaxpr"]
    carry = [dict(c.pads) for c in init]
    sizes = [{d: int(np.shape(c.x)[d]) for d in c.pads} for c in init]
    xs_pads = [{d - 1: t for d, t in x.pads.items()} for x in xs]
    for _ in range(nk + 1):
        seen: list[tuple[Pads, tuple[int, ...]]] = []

        def f(c: list[Any], x: list[Any], carry: list[Pads] = carry, sizes: list[dict[int, int]] = sizes,
              seen: list[tuple[Pads, tuple[int, ...]]] = seen) -> tuple[list[Any], list[Any]]:
            outs = _eval(body.jaxpr, body.consts, consts + [_PV(a, q) for a, q in zip(c, carry)]
                         + [_PV(a, q) for a, q in zip(x, xs_pads)])
            seen[:] = [(o.pads, tuple(np.shape(o.x))) for o in outs]
            new = [_grown(o, want, sz) for o, want, sz in zip(outs[:nk], carry, sizes)]
            return new, [o.x for o in outs[nk:]]

        start = [_grown(c, want, sz) for c, want, sz in zip(init, carry, sizes)]
        try:
            fin, ys = lax.scan(f, start, [x.x for x in xs], length=p["length"], reverse=p["reverse"],
                               unroll=p["unroll"])
        except TypeError:
            if not seen:
                raise
            fin = None
        grew = False
        for k in range(nk):
            q, shape = seen[k]
            for d, t in q.items():
                if d not in carry[k]:
                    carry[k][d], sizes[k][d], grew = t, shape[d], True
        if not grew and fin is not None:
            ys_pv = [_PV(y, {d + 1: t for d, t in q.items()}) for y, (q, _) in zip(ys, seen[nk:])]
            return [_PV(y, dict(q)) for y, q in zip(fin, carry)] + ys_pv
    raise _refuse("scan", sorted({d for q in carry for d in q}), "carries no stable padding")


_CUMULATIVE = {"cumsum": 0.0, "cumprod": 1.0, "cummax": -np.inf, "cummin": np.inf, "cumlogsumexp": -np.inf}
"""Cumulative primitives and the identity their padding takes when the scan runs through it."""


def _cumulative(eqn: Any, a: _PV) -> list[_PV]:
    """Along another dimension each row runs alone (aligned); along a padded one the padding is
    at the end, so the true prefix is unchanged forwards, and a reverse scan, which starts in
    the padding, first selects the identity there."""
    axis, x = eqn.params["axis"], a.x
    if axis in a.pads and eqn.params["reverse"]:
        x = mask(x, axis, a.pads[axis], _CUMULATIVE[eqn.primitive.name])
    return [_PV(o, dict(a.pads)) for o in _bind(eqn.primitive, [x], eqn.params)]


def _top_k(eqn: Any, a: _PV) -> list[_PV]:
    """Along a padded dimension the padding becomes -inf first, so the ``k`` largest (``k`` is at
    most the true size) are true entries, ties going to the lower, true, index; the results'
    ``k`` dimension is not padded. Other padded dimensions stay padded (each row runs alone)."""
    axis, x = eqn.params.get("axis", np.ndim(a.x) - 1), a.x
    if axis in a.pads:
        x = mask(x, axis, a.pads[axis], -np.inf)
    pads = {d: t for d, t in a.pads.items() if d != axis}
    return [_PV(o, dict(pads)) for o in _bind(eqn.primitive, [x], eqn.params)]


_UNARY: dict[str, Callable[[Any, _PV], list[_PV]]] = {
    "slice": _slice, "top_k": _top_k, **{n: _cumulative for n in _CUMULATIVE},
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
    if name == "gather":
        return _gather(eqn, ins[0], ins[1])
    if name in ("scatter-add", "scatter_add"):
        return _scatter_add(eqn, ins[0], ins[1], ins[2])
    if name == "scan":
        return _scan(eqn, ins)
    if name in ("concatenate", "split", "pad"):
        return _along(eqn, ins)
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
