"""Per-primitive tables, one per facet, side by side: the sharding rule of each primitive
(``RULES``: how each dimension of each operand relates to the results; propagation and the
lowering read it) and its local form (``LOCAL_FORMS``: the params that change on local shards).

A rule lists **factors** (as in Shardy's ``OpShardingRule``): independent index ranges of the
computation. Every tensor dimension is a sequence of factors (major to minor; a reshape splits or
merges them). A factor is

- ``pass``: it indexes a result dimension (operands that share it are sliced alike; a factor only
  in results is a broadcast and shards for free);
- ``contract``: summed away (dot_general contracting dims, ``reduce_sum`` axes, scatter-add
  batch dims): sharding it makes each device compute a partial sum, so the result is
  **unreduced** over the factor's axes;
- ``noshard``: must be whole on every device (concatenation, sort, top_k's dimension...);
- ``combine``: reduced by max/min (``reduce_max``, ``argmax``...): each device reduces its block
  and one all-reduce(max/min) over the factor's axes finishes it (``COMBINERS``).

A gather's indexed operand dimension is a ``contract`` factor: each device looks up only the
indices in its block, writes zeros elsewhere, and the pending sum finishes it (the Megatron masked
embedding lookup); a scatter-add's indexed dimension passes to the result, each device adding only
the updates whose index falls in its block. ``local.run_local`` gives such ops their block offset.

Given axes for every factor, each primitive runs unchanged on local shards once its shape
parameters are localised (its ``LOCAL_FORMS`` entry, read by ``local_params``); ``iota`` also
needs its block offset (``local.run_local``).

Unreduced operands: ``linearity="all"`` ops (add, transpose, reduce_sum...) are linear in the
operands at ``linear`` positions together, so pending sums pass through when those operands share
them; ``"one"`` ops (mul, dot_general, the numerator of div) are linear in each such operand alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from partir_core.errors import UnknownPrimitiveError
from partir_core.ir import STRUCTURED, Op, Program, is_key


class FactorKind(Enum):
    """How a factor may be sharded (see the module docstring)."""

    PASS = "pass"
    CONTRACT = "contract"
    NOSHARD = "noshard"
    COMBINE = "combine"


class Linearity(Enum):
    """Which operands a pending sum may pass through: none, all ``linear`` ones together, or one."""

    NONE = "none"
    ALL = "all"
    ONE = "one"


PASS, CONTRACT, NOSHARD, COMBINE = FactorKind.PASS, FactorKind.CONTRACT, FactorKind.NOSHARD, FactorKind.COMBINE

COMBINERS: dict[str, str] = {"reduce_max": "max", "reduce_min": "min", "argmax": "max", "argmin": "min"}
"""Primitives whose ``combine`` factors finish with an all-reduce of this kind (arg*: of the value,
then of the index among the devices holding it)."""

Dims = tuple[tuple[int, ...], ...]
"""Per tensor dimension, its factor ids (major to minor)."""


@dataclass(frozen=True)
class Factor:
    size: int
    kind: FactorKind


@dataclass(frozen=True)
class Rule:
    factors: tuple[Factor, ...]
    operands: tuple[Dims, ...]
    results: tuple[Dims, ...]
    linear: tuple[int, ...] = ()
    linearity: Linearity = Linearity.NONE


class _RB:
    """Small builder so each rule reads as 'this dim and that dim share a factor'."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.factors: list[Factor] = []
        self.ops: list[list[list[int]]] = [[[] for _ in a.shape] for a in op.inputs]
        self.res: list[list[list[int]]] = [[[] for _ in v.shape] for v in op.outputs]

    def factor(self, size: int, kind: FactorKind, operands: Sequence[tuple[int, int]] = (),
               results: Sequence[tuple[int, int]] = ()) -> int:
        f = len(self.factors)
        self.factors.append(Factor(int(size), kind))
        for i, d in operands:
            self.ops[i][d].append(f)
        for i, d in results:
            self.res[i][d].append(f)
        return f

    def own(self, kind: FactorKind = NOSHARD) -> None:
        """Every dimension not yet covered gets its own factor (replicated unless ``kind``)."""
        for i, a in enumerate(self.op.inputs):
            for d, n in enumerate(a.shape):
                if not self.ops[i][d]:
                    self.factor(n, kind, operands=[(i, d)])
        for i, v in enumerate(self.op.outputs):
            for d, n in enumerate(v.shape):
                if not self.res[i][d]:
                    self.factor(n, kind, results=[(i, d)])

    def build(self, linear: Sequence[int] = (), linearity: Linearity = Linearity.NONE) -> Rule:
        self.own(NOSHARD)
        in_results = {f for t in self.res for d in t for f in d}
        if self.op.outputs:  # a pass factor no result carries would lose data if sharded
            self.factors = [Factor(f.size, NOSHARD) if f.kind == PASS and i not in in_results else f
                            for i, f in enumerate(self.factors)]
        return Rule(tuple(self.factors), tuple(tuple(tuple(d) for d in t) for t in self.ops),
                    tuple(tuple(tuple(d) for d in t) for t in self.res), tuple(linear), linearity)


def _elementwise(op: Op, linear: Sequence[int] = (), linearity: Linearity = Linearity.NONE) -> Rule:
    b = _RB(op)
    out = op.outputs[0].shape
    for d, n in enumerate(out):
        shared = [(i, d) for i, a in enumerate(op.inputs) if len(a.shape) == len(out) and a.shape[d] == n]
        b.factor(n, PASS, operands=shared, results=[(r, d) for r in range(len(op.outputs))])
    return b.build(linear, linearity)


_ELEMENTWISE = """abs acos acosh asin asinh atan atan2 atanh cbrt ceil clamp cos cosh erf erfc erf_inv exp
exp2 expm1 floor imag integer_pow is_finite lgamma digamma log log1p logistic max min nextafter not pow
real rem round rsqrt sign sin sinh sqrt square tan tanh eq ne lt le gt ge and or xor shift_left
shift_right_logical shift_right_arithmetic population_count stop_gradient reduce_precision""".split()
_LINEAR_ALL = {"add": (0, 1), "sub": (0, 1), "add_any": (0, 1), "neg": (0,), "copy": (0,),
               "copy_p": (0,), "real": (0,), "imag": (0,)}
_LINEAR_ONE = {"mul": (0, 1), "div": (0,)}


def _convert(op: Op) -> Rule:
    a, r = op.inputs[0].dtype, op.outputs[0].dtype
    linear = (0,) if a.startswith(("f", "bf", "c")) and r.startswith(("f", "bf", "c")) else ()
    return _elementwise(op, linear, Linearity.ALL if linear else Linearity.NONE)


def _select_n(op: Op) -> Rule:
    return _elementwise(op, tuple(range(1, len(op.inputs))), Linearity.ALL)


def _broadcast_in_dim(op: Op) -> Rule:
    b = _RB(op)
    shape, bdims = op.params["shape"], op.params["broadcast_dimensions"]
    src = {int(r): i for i, r in enumerate(bdims)}
    for d, n in enumerate(shape):
        j = src.get(d)
        shared = [(0, j)] if j is not None and op.inputs[0].shape[j] == n else []
        b.factor(n, PASS, operands=shared, results=[(0, d)])
    return b.build((0,), Linearity.ALL)


def reshape_factors(src: Sequence[int], dst: Sequence[int]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """Common refinement of two row-major shapes: factor sizes, and each side's dims as factor ids.

    Dimensions that do not split/merge evenly (e.g. 6x4 -> 4x6 past the first common factor) get
    no factor: they stay unsharded.
    """
    sizes: list[int] = []
    a_f: list[list[int]] = [[] for _ in src]
    b_f: list[list[int]] = [[] for _ in dst]
    i = j = 0
    ra = src[0] if src else 1
    rb = dst[0] if dst else 1
    while i < len(src) and j < len(dst):
        if ra == 1:
            i += 1
            ra = src[i] if i < len(src) else 1
            continue
        if rb == 1:
            j += 1
            rb = dst[j] if j < len(dst) else 1
            continue
        g = math.gcd(ra, rb)
        if g == 1:
            break
        sizes.append(g)
        a_f[i].append(len(sizes) - 1)
        b_f[j].append(len(sizes) - 1)
        ra //= g
        rb //= g
    return sizes, a_f, b_f


def _reshape(op: Op) -> Rule:
    b = _RB(op)
    sizes, a_f, b_f = reshape_factors(op.inputs[0].shape, op.outputs[0].shape)
    a_f = [fs if _covers(fs, sizes, n) else [] for fs, n in zip(a_f, op.inputs[0].shape)]
    b_f = [fs if _covers(fs, sizes, n) else [] for fs, n in zip(b_f, op.outputs[0].shape)]
    while True:  # a factor must appear on both sides; drop dims holding one that does not
        both = {f for fs in a_f for f in fs} & {f for fs in b_f for f in fs}
        a2 = [fs if set(fs) <= both else [] for fs in a_f]
        b2 = [fs if set(fs) <= both else [] for fs in b_f]
        if (a2, b2) == (a_f, b_f):
            break
        a_f, b_f = a2, b2
    ids = [b.factor(s, PASS) for s in sizes]
    b.ops[0] = [[ids[f] for f in fs] for fs in a_f]
    b.res[0] = [[ids[f] for f in fs] for fs in b_f]
    return b.build((0,), Linearity.ALL)


def _covers(fs: list[int], sizes: list[int], n: int) -> bool:
    return math.prod(sizes[f] for f in fs) == n


def _transpose(op: Op) -> Rule:
    b = _RB(op)
    for d, p in enumerate(op.params["permutation"]):
        b.factor(op.outputs[0].shape[d], PASS, operands=[(0, int(p))], results=[(0, d)])
    return b.build((0,), Linearity.ALL)


def _reduce(kind: FactorKind, linear: bool) -> Callable[[Op], Rule]:
    def rule(op: Op) -> Rule:
        b = _RB(op)
        axes = set(int(a) for a in op.params["axes"])
        r = 0
        for d, n in enumerate(op.inputs[0].shape):
            if d in axes:
                b.factor(n, kind, operands=[(0, d)])
            else:
                b.factor(n, PASS, operands=[(0, d)], results=[(i, r) for i in range(len(op.outputs))])
                r += 1
        return b.build((0,) if linear else (), Linearity.ALL if linear else Linearity.NONE)
    return rule


def _dot_general(op: Op) -> Rule:
    b = _RB(op)
    (lc, rc), (lb, rb) = op.params["dimension_numbers"]
    lhs, rhs = op.inputs[0].shape, op.inputs[1].shape
    r = 0
    for x, y in zip(lb, rb):
        b.factor(lhs[x], PASS, operands=[(0, x), (1, y)], results=[(0, r)])
        r += 1
    for d in range(len(lhs)):
        if d not in lc and d not in lb:
            b.factor(lhs[d], PASS, operands=[(0, d)], results=[(0, r)])
            r += 1
    for d in range(len(rhs)):
        if d not in rc and d not in rb:
            b.factor(rhs[d], PASS, operands=[(1, d)], results=[(0, r)])
            r += 1
    for x, y in zip(lc, rc):
        b.factor(lhs[x], CONTRACT, operands=[(0, x), (1, y)])
    return b.build((0, 1), Linearity.ONE)


def _conv(op: Op) -> Rule:
    """conv_general_dilated: batch passes, input features are contracted (a pending sum), output
    features pass; spatial dims (windows, padding, strides) stay whole. Grouped convolutions
    keep every dim whole."""
    b = _RB(op)
    dn = op.params["dimension_numbers"]
    if op.params["feature_group_count"] != 1 or op.params["batch_group_count"] != 1:
        return b.build()
    lhs, rhs, out = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    x, w = op.inputs[0].shape, op.inputs[1].shape
    b.factor(x[lhs[0]], PASS, operands=[(0, lhs[0])], results=[(0, out[0])])
    b.factor(w[rhs[0]], PASS, operands=[(1, rhs[0])], results=[(0, out[1])])
    b.factor(x[lhs[1]], CONTRACT, operands=[(0, lhs[1]), (1, rhs[1])])
    return b.build((0, 1), Linearity.ONE)


def _rev(op: Op) -> Rule:
    """rev: reversed dims stay whole (a block would land on another device), the others pass."""
    b = _RB(op)
    rev = {int(d) for d in op.params["dimensions"]}
    for d, n in enumerate(op.inputs[0].shape):
        if d not in rev:
            b.factor(n, PASS, operands=[(0, d)], results=[(0, d)])
    return b.build((0,), Linearity.ALL)


def _along_axis(key: str) -> Callable[[Op], Rule]:
    """Ops that act along one dimension (concatenate, cumsum, sort...): it stays whole."""
    def rule(op: Op) -> Rule:
        b = _RB(op)
        ax = int(op.params[key])
        rank = len(op.outputs[0].shape)
        for d in range(rank):
            if d == ax:
                continue
            n = op.outputs[0].shape[d]
            b.factor(n, PASS, operands=[(i, d) for i, a in enumerate(op.inputs) if len(a.shape) == rank],
                     results=[(i, d) for i in range(len(op.outputs))])
        lin = tuple(range(len(op.inputs))) if op.name == "concatenate" else ()
        return b.build(lin, Linearity.ALL if lin else Linearity.NONE)
    return rule


def _squeeze(op: Op) -> Rule:
    b = _RB(op)
    gone = {int(d) % max(1, len(op.inputs[0].shape)) for d in op.params["dimensions"]}
    r = 0
    for d, n in enumerate(op.inputs[0].shape):
        if d not in gone:
            b.factor(n, PASS, operands=[(0, d)], results=[(0, r)])
            r += 1
    return b.build((0,), Linearity.ALL)


def _full_dims(op: Op, starts: Sequence[int] | None, sizes: Sequence[int], lin: tuple[int, ...]) -> Rule:
    """slice/dynamic_slice/pad: dims taken whole pass through, the others stay unsharded."""
    b = _RB(op)
    for d, n in enumerate(op.inputs[0].shape):
        whole = sizes[d] == n and (starts is None or starts[d] == 0)
        if whole:
            b.factor(n, PASS, operands=[(0, d)], results=[(0, d)])
    return b.build(lin, Linearity.ALL if lin else Linearity.NONE)


def _slice(op: Op) -> Rule:
    strides = op.params.get("strides") or (1,) * len(op.inputs[0].shape)
    sizes = [(hi - lo) if s == 1 else -1 for lo, hi, s in
             zip(op.params["start_indices"], op.params["limit_indices"], strides)]
    return _full_dims(op, op.params["start_indices"], sizes, (0,))


def _dynamic_slice(op: Op) -> Rule:
    return _full_dims(op, None, op.params["slice_sizes"], (0,))


def _pad(op: Op) -> Rule:
    sizes = [n if tuple(c) == (0, 0, 0) else -1 for n, c in zip(op.inputs[0].shape, op.params["padding_config"])]
    b = _RB(op)
    for d, n in enumerate(op.inputs[0].shape):
        if sizes[d] == n:
            b.factor(n, PASS, operands=[(0, d)], results=[(0, d)])
    return b.build()


def _dynamic_update_slice(op: Op) -> Rule:
    b = _RB(op)
    for d, n in enumerate(op.inputs[0].shape):
        if op.inputs[1].shape[d] == n:
            b.factor(n, PASS, operands=[(0, d), (1, d)], results=[(0, d)])
    return b.build()


def _iota(op: Op) -> Rule:
    b = _RB(op)
    for d, n in enumerate(op.outputs[0].shape):
        b.factor(n, PASS, results=[(0, d)])
    return b.build()


def _gather(op: Op) -> Rule:
    """Gather (embedding lookup, ``take_along_axis``): whole slices along offset dims pass
    through; the indices' batch dims pass to the result, and to the operand's batching dims
    (``take_along_axis``: a batch-sharded lookup needs no communication); a single indexed
    dimension may be sharded as a masked local lookup (a ``contract`` factor)."""
    b = _RB(op)
    dn = op.params["dimension_numbers"]
    operand = op.inputs[0].shape
    out = op.outputs[0].shape
    offset_src = [d for d in range(len(operand)) if d not in dn.collapsed_slice_dims
                  and d not in dn.operand_batching_dims]
    for od, sd in zip(dn.offset_dims, offset_src):
        if op.params["slice_sizes"][sd] == operand[sd] and sd not in dn.start_index_map:
            b.factor(operand[sd], PASS, operands=[(0, sd)], results=[(0, int(od))])
    batch_out = [d for d in range(len(out)) if d not in dn.offset_dims]
    pair = dict(zip((int(d) for d in dn.start_indices_batching_dims), (int(d) for d in dn.operand_batching_dims)))
    for k, od in enumerate(batch_out):
        shared = [(1, k)] + ([(0, pair[k])] if k in pair else [])
        b.factor(out[od], PASS, operands=shared, results=[(0, od)])
    if len(dn.start_index_map) == 1 and op.inputs[1].shape[-1] == 1:
        d = int(dn.start_index_map[0])
        if op.params["slice_sizes"][d] == 1 and d in dn.collapsed_slice_dims:
            b.factor(operand[d], CONTRACT, operands=[(0, d)])
    return b.build((0,), Linearity.ONE)


def _scatter(op: Op, add: bool) -> Rule:
    """Scatter(-add): window dims pass through; update batch dims paired with operand batching
    dims pass too (the transpose of ``take_along_axis``); other update batch dims are summed
    into the operand (a ``contract`` factor: the result is unreduced, the operand must be too),
    which only an add may do; a single indexed dimension passes to the result, each device
    scattering only the updates that fall in its block."""
    b = _RB(op)
    dn = op.params["dimension_numbers"]
    operand, upd = op.inputs[0].shape, op.inputs[2].shape
    window_src = [d for d in range(len(operand)) if d not in dn.inserted_window_dims
                  and d not in dn.operand_batching_dims]
    for ud, sd in zip(dn.update_window_dims, window_src):
        if upd[ud] == operand[sd] and sd not in dn.scatter_dims_to_operand_dims:
            b.factor(operand[sd], PASS, operands=[(0, sd), (2, int(ud))], results=[(0, sd)])
    pair = dict(zip((int(d) for d in dn.scatter_indices_batching_dims), (int(d) for d in dn.operand_batching_dims)))
    scatter_dims = [d for d in range(len(upd)) if d not in dn.update_window_dims]
    for k, ud in enumerate(scatter_dims):
        if k in pair:
            b.factor(upd[ud], PASS, operands=[(0, pair[k]), (1, k), (2, ud)], results=[(0, pair[k])])
        elif add:
            b.factor(upd[ud], CONTRACT, operands=[(1, k), (2, ud)])
    if len(dn.scatter_dims_to_operand_dims) == 1 and op.inputs[1].shape[-1] == 1:
        d = int(dn.scatter_dims_to_operand_dims[0])
        if d in dn.inserted_window_dims:
            b.factor(operand[d], PASS, operands=[(0, d)], results=[(0, d)])
    return b.build((0, 2), Linearity.ALL) if add else b.build()


def _replicate(op: Op) -> Rule:
    return _RB(op).build()


def _bitcast(op: Op) -> Rule:
    """bitcast_convert_type: a width change adds or drops a minor dim; the leading dims pass."""
    b = _RB(op)
    a, r = op.inputs[0].shape, op.outputs[0].shape
    for d in range(min(len(a), len(r))):
        if a[d] == r[d]:
            b.factor(a[d], PASS, operands=[(0, d)], results=[(0, d)])
    return b.build()


# random numbers: keys stay replicated (no communication); random bits are generated only for a
# device's block where the generator is partitionable (``random_bits``, see ``_random_bits``)
_RANDOM = ("random_seed", "random_split", "random_fold_in", "random_wrap",
           "random_unwrap", "random_clone", "threefry2x32")


def partitionable_bits(op: Op) -> bool:
    """Whether a block of ``random_bits`` can be generated alone, equal bit for bit to the same
    block of the whole array: JAX's partitionable threefry hashes each element's global index
    (``jax_threefry_partitionable``, the default), so a device hashes only its block's indices
    (``local.random_bits_block``). A 32-bit index covers the arrays handled here; a key array
    (several keys) or another generator keeps the whole-array generation."""
    import jax

    partitionable = bool(jax.config.jax_threefry_partitionable)  # type: ignore[attr-defined]
    key = op.inputs[0]
    return (op.name == "random_bits" and not key.shape and key.dtype == "key<fry>"
            and partitionable and math.prod(op.outputs[0].shape) < 2 ** 32)


def _random_bits(op: Op) -> Rule:
    """Partitionable random bits: each result dimension may be sharded (no operand has it)."""
    if not partitionable_bits(op):
        return _replicate(op)
    b = _RB(op)
    for d, n in enumerate(op.outputs[0].shape):
        b.factor(n, PASS, results=[(0, d)])
    return b.build()


RuleFn = Callable[[Op], Rule]
"""Builds the rule of one op (its factors depend on the op's shapes and params)."""

Shape = tuple[int, ...]
LocalForm = Callable[[Op, Sequence[Shape], Sequence[Shape]], dict[str, Any]]
"""(op, local operand shapes, local result shapes) -> the params whose values change locally."""


def _linear(lin: tuple[int, ...], kind: Linearity) -> RuleFn:
    return lambda op: _elementwise(op, lin, kind)


# -- local forms: the params that change when an op runs on local shards --------------------------

def _out_shape(key: str) -> LocalForm:
    """The result's shape, named ``key``, becomes the local one."""
    return lambda op, ins, outs: {key: tuple(outs[0])}


def _reshape_local(op: Op, ins: Sequence[Shape], outs: Sequence[Shape]) -> dict[str, Any]:
    return {"new_sizes": tuple(outs[0]), "dimensions": None}


def _random_bits_local(op: Op, ins: Sequence[Shape], outs: Sequence[Shape]) -> dict[str, Any]:
    return {"shape": tuple(outs[0][len(ins[0]):])}  # the shape after the key array's own dims


def _slice_sizes_local(op: Op, ins: Sequence[Shape], outs: Sequence[Shape]) -> dict[str, Any]:
    """gather, dynamic_slice: a dimension taken whole is taken whole locally."""
    glob = op.inputs[0].shape
    return {"slice_sizes": tuple(ins[0][d] if s == glob[d] else s for d, s in enumerate(op.params["slice_sizes"]))}


def _slice_local(op: Op, ins: Sequence[Shape], outs: Sequence[Shape]) -> dict[str, Any]:
    """slice: a dimension taken whole ends at the local block's end."""
    glob = op.inputs[0].shape
    return {"limit_indices": tuple(
        ins[0][d] if (hi == glob[d] and lo == 0) else hi
        for d, (lo, hi) in enumerate(zip(op.params["start_indices"], op.params["limit_indices"])))}


# -- the tables: one entry per primitive and facet ---------------------------------------------------

RULES: dict[str, RuleFn] = {
    **{name: _elementwise for name in _ELEMENTWISE},
    **{n: _linear(lin, Linearity.ALL) for n, lin in _LINEAR_ALL.items()},
    **{n: _linear(lin, Linearity.ONE) for n, lin in _LINEAR_ONE.items()},
    "convert_element_type": _convert, "select_n": _select_n, "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape, "transpose": _transpose, "dot_general": _dot_general,
    "reduce_sum": _reduce(CONTRACT, True), "reduce_max": _reduce(COMBINE, False),
    "reduce_min": _reduce(COMBINE, False), "reduce_prod": _reduce(NOSHARD, False),
    "reduce_and": _reduce(NOSHARD, False), "reduce_or": _reduce(NOSHARD, False),
    "argmax": _reduce(COMBINE, False), "argmin": _reduce(COMBINE, False),
    "concatenate": _along_axis("dimension"), "cumsum": _along_axis("axis"),
    "cumprod": _along_axis("axis"), "cummax": _along_axis("axis"), "cummin": _along_axis("axis"),
    "cumlogsumexp": _along_axis("axis"), "sort": _along_axis("dimension"), "split": _along_axis("axis"),
    "top_k": _along_axis("axis"), "conv_general_dilated": _conv, "rev": _rev,
    "squeeze": _squeeze, "slice": _slice, "dynamic_slice": _dynamic_slice, "pad": _pad,
    "dynamic_update_slice": _dynamic_update_slice, "iota": _iota, "gather": _gather,
    "scatter-add": lambda op: _scatter(op, True), "scatter_add": lambda op: _scatter(op, True),
    "scatter": lambda op: _scatter(op, False), "bitcast_convert_type": _bitcast,
    **{name: _replicate for name in _RANDOM},
    "random_bits": _random_bits,
    **{name: _replicate for name in STRUCTURED},  # placeholders: layouts come from ties
}
"""Propagation facet: primitive -> its sharding rule's builder (``rule_for`` reads it)."""

LOCAL_FORMS: dict[str, LocalForm] = {
    "broadcast_in_dim": _out_shape("shape"), "iota": _out_shape("shape"), "reshape": _reshape_local,
    "random_bits": _random_bits_local, "gather": _slice_sizes_local, "dynamic_slice": _slice_sizes_local,
    "slice": _slice_local,
}
"""Local-form facet: primitive -> the params that change on local shards (``local_params`` reads
it). A primitive with no entry runs on its blocks with its params unchanged; one with an entry
has a rule in ``RULES`` too (tests/test_partir_rules.py holds that)."""


def _keys_whole(op: Op, rule: Rule) -> Rule:
    """No factor of a PRNG key tensor may be sharded (a key is one indivisible value)."""
    keyed = {f for a, dims in zip(op.inputs, rule.operands) if is_key(a.dtype) for fs in dims for f in fs}
    keyed |= {f for v, dims in zip(op.outputs, rule.results) if is_key(v.dtype) for fs in dims for f in fs}
    if not keyed:
        return rule
    factors = tuple(Factor(f.size, NOSHARD) if i in keyed else f for i, f in enumerate(rule.factors))
    return Rule(factors, rule.operands, rule.results, rule.linear, rule.linearity)


def rule_for(op: Op, unknown: str = "error", where: str = "") -> Rule:
    """The rule of ``op``; an unknown primitive raises, or (``unknown="replicate"``) is run on
    whole arrays: every operand is gathered and every result replicated."""
    fn = RULES.get(op.name)
    if fn is None:
        if unknown == "replicate":
            return _keys_whole(op, _replicate(op))
        raise UnknownPrimitiveError(
            f"no sharding rule for primitive {op.name!r} (op #{op.index}{where}); register one in "
            f"partir_core.rules.RULES or pass unknown='replicate' to run it on whole arrays"
        )
    return _keys_whole(op, fn(op))


def rules_for(program: Program, unknown: str = "error") -> tuple[Rule, ...]:
    """The rule of every op, bodies included, indexed by ``Op.index``; an unknown primitive's
    error says where it sits (``scan #3 body > cond #7 branch 1``)."""
    out: list[Rule] = []

    def walk(p: Program, where: str) -> None:
        for op in p.ops:
            out.append(rule_for(op, unknown, where))
            for k, body in enumerate(op.bodies):
                walk(body, f"{where} in {op.name} #{op.index} {_body_name(op.name, k)}")

    walk(program, "")
    return tuple(out)


def _body_name(prim: str, k: int) -> str:
    return {"scan": "body", "while": ("cond", "body")[min(k, 1)]}.get(prim, f"branch {k}")


# -- localisation: the primitive's parameters for local shapes ------------------------------------

def local_params(op: Op, in_local: Sequence[Shape], out_local: Sequence[Shape]) -> dict[str, Any]:
    """JAX parameters for running ``op`` on local shards of the given shapes: its local form's
    changes (``LOCAL_FORMS``), and no sharding annotation (``shard_map`` places the blocks)."""
    p = dict(op.params)
    form = LOCAL_FORMS.get(op.name)
    if form is not None:
        p.update(form(op, in_local, out_local))
    for key in ("sharding", "out_sharding"):
        if key in p:
            p[key] = None
    return p
