"""Deciding: how each op of a traced program runs on local shards, and which moves feed it.

For every op the lowering picks axes for the rule's factors. Candidates: follow the result's
propagated layout (taking contracting factors from the operands), follow the operands, or follow
one operand; each candidate fixes the local type every operand must have and the type the op
produces (unreduced over its sharded contracting factors). ``redist`` plans the moves into those
operand types and, as an estimate of what consumers will ask, out of the result into its
propagated layout; the candidate with the least estimated time wins (ties: the result-led one).
Pending sums are never reduced eagerly: a consumer that is linear in them keeps them, any other
asks for a reduced type and ``redist`` chooses all-reduce or reduce-scatter.

Structured ops (``scan``, ``while``, ``cond``) take their carries, consts and stacked slices in
the layouts propagation tied to their bodies (without pending sums); each body is lowered as its
own program with those input and output types.

The decisions (``OpDecision``s and ``Move``s, gathered in ``Lowered``) are plain data and nothing
here traces JAX: the emitter (``emit``), the simulator and the NumPy emulator all read the same
objects, so predicted and emitted collectives cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from partir_core.errors import PartitionError
from partir_core.ir import Atom, Const, Op, Program, Value, is_key
from partir_core.propagate import Layout, clashes, factor_axes, layout_from_factors
from partir_core.rules import COMBINE, CONTRACT, NOSHARD, Linearity, Rule
from redist import CostModel, Plan, redistribute
from redist.cost import KindCost
from spmd_types import Axis, Mesh, ShardingType, ShardingTypeError, SubAxis
from spmd_types.memo import Scope, memo


@dataclass(frozen=True)
class Move:
    """A redistribution of one value from ``src`` to ``dst`` (its ``plan`` comes from redist)."""

    value: int
    src: ShardingType
    dst: ShardingType
    plan: Plan
    reason: str


@dataclass(frozen=True, eq=False)
class OpDecision:
    """How one op runs: axes per factor, local operand/result types, the moves before it; for a
    structured op, its bodies lowered (``scan``: body; ``while``: cond, body; ``cond``: branches)."""

    op: Op
    rule: Rule
    assign: tuple[tuple[Axis, ...], ...]
    in_types: tuple[ShardingType | None, ...]
    out_types: tuple[ShardingType, ...]
    moves: tuple[Move, ...]
    choice: str
    cost_s: float
    bodies: tuple[Lowered, ...] = ()
    combine: tuple[str, ...] = ()
    combine_plan: Plan | None = None


@dataclass(frozen=True, eq=False)
class Lowered:
    """The partitioned program: every decision, ready to simulate, explain or run."""

    program: Program
    mesh: Mesh
    layouts: dict[int, Layout]
    in_types: tuple[ShardingType, ...]
    const_types: dict[int, ShardingType]
    steps: tuple[OpDecision, ...]
    out_moves: tuple[Move, ...]
    out_types: tuple[ShardingType, ...]

    def moves(self) -> list[Move]:
        return [m for s in self.steps for m in s.moves] + list(self.out_moves)


_KINDS = ("all_reduce", "all_reduce_slice", "all_gather", "reduce_scatter", "all_to_all", "permute", "exchange")
PARTITIONER_COST_MODEL = CostModel(latency_s=10e-6, objective="alpha-beta", kind_costs=tuple(
    (k, KindCost(10e-6, 0.0, 50e9)) for k in _KINDS))
"""A compiler wants the fastest move, not the fewest bytes at any latency (a scalar loss must not
become a many-round exchange to save a byte): inside programs redist minimises estimated time,
10 us per collective whatever its group plus bytes at 50 GB/s. Why these two constants and not
the measured profile: docs/design.md section 10, "Lowering"."""


@memo(Scope.TYPE, maxsize=65536)
def plan_move(src: ShardingType, dst: ShardingType) -> Plan:
    return redistribute(src, dst, cost_model=PARTITIONER_COST_MODEL)


def _cost(src: ShardingType, dst: ShardingType) -> float:
    if src == dst:
        return 0.0
    try:
        return plan_move(src, dst).time_s
    except ShardingTypeError:
        return math.inf


def _type(v: Value | Const, layout: Layout, mesh: Mesh, unreduced: Sequence[Axis] = ()) -> ShardingType:
    # a PRNG key is 8 bytes (two u32 words) per element and is never moved: u64 stands in for it
    return ShardingType(v.shape, "u64" if is_key(v.dtype) else v.dtype, layout, mesh, unreduced)


def _layout(t: ShardingType) -> Layout:
    return tuple(tuple(d) for d in t.dims)


def whole_axes(layout: Layout) -> Layout:
    """``layout`` without its sub-axes: what a program's inputs and outputs take, since a JAX
    ``PartitionSpec`` names whole axes only (a KV head sharded over part of ``model`` enters
    replicated and is sliced locally, for free; it leaves by an all-gather)."""
    return tuple(tuple(a for a in d if not isinstance(a, SubAxis)) for d in layout)


def _stack(t: ShardingType, n: int) -> ShardingType:
    """The type of ``n`` stacked slices of type ``t`` (the stacked dimension whole)."""
    return ShardingType((n,) + t.shape, t.dtype, ((),) + t.dims, t.mesh)


class _Planner:
    def __init__(self, program: Program, mesh: Mesh, rules: Sequence[Rule], layouts: dict[int, Layout]) -> None:
        self.p, self.mesh, self.rules, self.layouts = program, mesh, rules, layouts
        self.avail: dict[int, list[ShardingType]] = {}
        self.uses: dict[int, int] = {}
        self.consumer: dict[int, Op] = {}
        for op in program.ops:
            for a in op.inputs:
                if isinstance(a, Value):
                    self.uses[a.id] = self.uses.get(a.id, 0) + 1
                    self.consumer[a.id] = op
        for a in program.outputs:
            if isinstance(a, Value):
                self.uses[a.id] = self.uses.get(a.id, 0) + 1

    # -- candidates -------------------------------------------------------------------------------
    def _gather_assign(self, rule: Rule, sources: Sequence[tuple[Any, Layout]], final_after: int
                       ) -> dict[int, tuple[Axis, ...]]:
        """Axes per factor, first source first; factors seen in the first ``final_after`` sources
        are fixed even where they are unsharded there. A max/min factor takes whole axes only
        (its all-reduce is named by axis)."""
        assign: dict[int, tuple[Axis, ...]] = {}
        fixed: set[int] = set()
        used: list[Axis] = []
        for k, (dims, layout) in enumerate(sources):
            fa = factor_axes(self.mesh, rule, dims, layout)
            if fa is None:
                continue
            for f, axes in fa.items():
                if f in fixed or f in assign or rule.factors[f].kind == NOSHARD:
                    continue
                if not axes:
                    if k < final_after:
                        fixed.add(f)
                    continue
                if clashes(self.mesh, axes, used) or (
                        rule.factors[f].kind == COMBINE and any(isinstance(a, SubAxis) for a in axes)):
                    continue
                assign[f] = axes
                used += axes
        return assign

    def _candidates(self, op: Op, rule: Rule, produced: list[ShardingType | None]
                    ) -> list[tuple[str, dict[int, tuple[Axis, ...]]]]:
        res: list[tuple[Any, Layout]] = [(d, self.layouts[v.id]) for v, d in zip(op.outputs, rule.results)]
        ins: list[tuple[Any, Layout]] = [(d, t.dims) for d, t in zip(rule.operands, produced)  # type: ignore[misc]
                                         if t is not None]
        idx = [i for i, t in enumerate(produced) if t is not None]
        cands = [("result-led", self._gather_assign(rule, res + ins, len(res))),
                 ("operand-led", self._gather_assign(rule, ins + res, 0))]
        # operands as produced, their unsharded dims kept whole: pending sums added before one
        # reduce-scatter (Megatron-SP's backward) instead of each reduce-scattered to the result
        strict = self._gather_assign(rule, ins + res, len(ins))
        if all(strict != a for _, a in cands):
            cands.append(("as-produced", strict))
        # operands in their propagated layouts: a pending sum read twice is reduce-scattered into
        # the layout its readers share instead of all-reduced whole and sliced
        prop = [(d, self.layouts[a.id]) for a, d in zip(op.inputs, rule.operands) if isinstance(a, Value)]
        led = self._gather_assign(rule, prop + res, len(prop))
        if all(led != a for _, a in cands):
            cands.append(("propagated", led))
        if len(ins) > 1:
            for i, src in zip(idx, ins):
                cands.append((f"operand {i}-led", self._gather_assign(rule, [src] + res, 0)))
        return cands

    # -- materialising a candidate ---------------------------------------------------------------
    def _layouts(self, op: Op, rule: Rule, assign: dict[int, tuple[Axis, ...]]
                 ) -> tuple[list[Layout | None], list[Layout]]:
        assign = dict(assign)
        for _ in range(len(rule.factors) + 1):
            bad: set[int] = set()
            ins: list[Layout | None] = []
            for a, dims in zip(op.inputs, rule.operands):
                if isinstance(a, Const):
                    ins.append(None)
                    continue
                lay = layout_from_factors(self.mesh, rule, dims, a.shape, assign)
                if lay is None:
                    bad |= {f for fs in dims for f in fs}
                ins.append(lay)
            outs: list[Layout] = []
            for v, dims in zip(op.outputs, rule.results):
                lay = layout_from_factors(self.mesh, rule, dims, v.shape, assign)
                if lay is None:
                    bad |= {f for fs in dims for f in fs}
                    lay = ((),) * len(v.shape)
                outs.append(lay)
            if not bad & set(assign):
                return ins, outs
            for f in bad:
                assign.pop(f, None)
        raise PartitionError(f"op #{op.index} ({op.name}): no valid local layout")  # pragma: no cover

    def _unreduced(self, op: Op, rule: Rule, produced: list[ShardingType | None], used: set[Axis],
                   assign: dict[int, tuple[Axis, ...]]) -> tuple[list[frozenset[Axis]], frozenset[Axis]]:
        """Pending sums each operand keeps, and those of the result (see the rules' linearity).

        A pending sum is carried through only from a value with this one consumer: a value read
        twice is better reduced once than carried into two results reduced separately."""
        n = len(op.inputs)
        keep: list[frozenset[Axis]] = [frozenset()] * n
        us = [frozenset(t.unreduced) if t is not None else frozenset() for t in produced]
        if any(u and self.uses.get(a.id, 0) > 1 for a, u in zip(op.inputs, us) if isinstance(a, Value)):
            us = [frozenset() if u else u for u in us]  # forces a reduction of every pending operand
        lin = set(rule.linear)
        contract = {a for f, k in enumerate(rule.factors) if k.kind == CONTRACT for a in assign.get(f, ())}
        carried: frozenset[Axis] = frozenset()
        if rule.linearity == Linearity.ALL and lin:
            pend = {us[i] for i in lin if i < n and isinstance(op.inputs[i], Value)}
            consts_ok = all(isinstance(op.inputs[i], Value) for i in lin if i < n)
            others_clean = all(not us[i] for i in range(n) if i not in lin)
            if len(pend) == 1 and consts_ok and others_clean:
                u = next(iter(pend))
                if u and not clashes(self.mesh, u, used):
                    carried = u
                    keep = [u if (i in lin and isinstance(op.inputs[i], Value)) else frozenset() for i in range(n)]
        elif rule.linearity == Linearity.ONE:
            dirty = [i for i in range(n) if us[i]]
            if len(dirty) == 1 and dirty[0] in lin and not clashes(self.mesh, us[dirty[0]], used):
                carried = us[dirty[0]]
                keep[dirty[0]] = carried
        if contract and rule.linearity == Linearity.ALL:
            # linear operands without the summed factor (scatter-add's operand) must become partial
            for i, dims in enumerate(rule.operands):
                has = {f for fs in dims for f in fs}
                missing = {a for f, k in enumerate(rule.factors) if k.kind == CONTRACT and f not in has
                           for a in assign.get(f, ())}
                if i in lin and missing and isinstance(op.inputs[i], Value):
                    keep[i] = keep[i] | frozenset(missing)
        return keep, carried | frozenset(contract)

    def _materialise(self, op: Op, rule: Rule, assign: dict[int, tuple[Axis, ...]],
                     produced: list[ShardingType | None]) -> tuple[list[ShardingType | None], list[ShardingType], dict[int, tuple[Axis, ...]]]:
        ins_l, outs_l = self._layouts(op, rule, assign)
        used = {a for lay in outs_l for ax in lay for a in ax} | {
            a for lay in ins_l if lay is not None for ax in lay for a in ax}
        keep, out_u = self._unreduced(op, rule, produced, used, assign)
        ins: list[ShardingType | None] = []
        for a, lay, u in zip(op.inputs, ins_l, keep):
            ins.append(None if isinstance(a, Const) or lay is None else _type(a, lay, self.mesh, sorted(u, key=str)))
        outs = [_type(v, lay, self.mesh, sorted(out_u, key=str)) for v, lay in zip(op.outputs, outs_l)]
        return ins, outs, assign

    # -- the decision ------------------------------------------------------------------------------
    def _merges(self, v: Value, t: ShardingType) -> bool:
        """Whether ``v``'s pending sum will merge into another one already pending: its one
        consumer adds it (linearly) to an operand with the same pending axes, so reducing it
        costs nothing extra here (the sum is reduced once, after the add)."""
        if not t.unreduced or self.uses.get(v.id, 0) != 1 or v.id not in self.consumer:
            return False
        op = self.consumer[v.id]
        rule = self.rules[op.index] if not op.bodies else None
        if rule is None or rule.linearity != Linearity.ALL:
            return False
        lin = [a for i, a in enumerate(op.inputs) if i in rule.linear and isinstance(a, Value)]
        return v in lin and any(
            a.id != v.id and a.id in self.avail and self.avail[a.id][0].unreduced == t.unreduced for a in lin)

    def _best_src(self, v: Value, dst: ShardingType) -> tuple[ShardingType, float]:
        return min(((t, _cost(t, dst)) for t in self.avail[v.id]), key=lambda tc: tc[1])

    def _t(self, a: Atom) -> ShardingType:
        lay = self.layouts[a.id] if isinstance(a, Value) else ()
        return _type(a, lay, self.mesh)

    def _sub(self, body: Program, ins: Sequence[ShardingType], outs: Sequence[ShardingType]) -> Lowered:
        return lower(body, self.mesh, self.rules, self.layouts, [_layout(t) for t in ins], [_layout(t) for t in outs])

    def _scan(self, op: Op) -> tuple[list[ShardingType], list[ShardingType], list[Lowered]]:
        c, k = int(op.params["num_consts"]), int(op.params["num_carry"])
        body = op.bodies[0]
        inner = [self._t(v) for v in body.inputs]
        outer = [_stack(t, op.inputs[i].shape[0]) if i >= c + k else t for i, t in enumerate(inner)]
        ys = [self._t(v) for v in body.outputs[k:]]
        low = self._sub(body, inner, inner[c:c + k] + ys)
        return outer, inner[c:c + k] + [_stack(t, int(op.params["length"])) for t in ys], [low]

    def _while(self, op: Op) -> tuple[list[ShardingType], list[ShardingType], list[Lowered]]:
        cn, bn = int(op.params["cond_nconsts"]), int(op.params["body_nconsts"])
        cond, body = op.bodies
        carry = [self._t(v) for v in body.inputs[bn:]]
        cconsts = [self._t(v) for v in cond.inputs[:cn]]
        bconsts = [self._t(v) for v in body.inputs[:bn]]
        lows = [self._sub(cond, cconsts + carry, [self._t(cond.outputs[0])]),
                self._sub(body, bconsts + carry, carry)]
        return cconsts + bconsts + carry, carry, lows

    def _cond(self, op: Op) -> tuple[list[ShardingType], list[ShardingType], list[Lowered]]:
        ins = [self._t(a) for a in op.inputs]
        outs = [self._t(v) for v in op.outputs]
        return ins, outs, [self._sub(b, ins[1:], outs) for b in op.bodies]

    def _structured(self, op: Op) -> OpDecision:
        ins, outs, bodies = {"scan": self._scan, "while": self._while, "cond": self._cond}[op.name](op)
        typed: list[ShardingType | None] = [t if isinstance(a, Value) else None for a, t in zip(op.inputs, ins)]
        moves, cost = self._moves(op, typed)
        for v, t in zip(op.outputs, outs):
            self.avail[v.id] = [t]
        return OpDecision(op, self.rules[op.index], (), tuple(typed), tuple(outs), tuple(moves), op.name,
                          cost, tuple(bodies))

    def _moves(self, op: Op, ins: Sequence[ShardingType | None]) -> tuple[list[Move], float]:
        moves = []
        for i, (a, t) in enumerate(zip(op.inputs, ins)):
            if isinstance(a, Value) and t is not None and t not in self.avail[a.id]:
                src, _ = self._best_src(a, t)
                moves.append(Move(a.id, src, t, plan_move(src, t), f"op #{op.index} {op.name} operand {i}"))
                self.avail[a.id].append(t)
        return moves, sum(m.plan.time_s for m in moves)

    def step(self, op: Op) -> OpDecision:
        if op.bodies:
            return self._structured(op)
        rule = self.rules[op.index]
        produced = [self.avail[a.id][0] if isinstance(a, Value) else None for a in op.inputs]
        best: tuple[float, int] | None = None
        chosen: Any = None
        for k, (name, assign) in enumerate(self._candidates(op, rule, produced)):
            ins, outs, assign = self._materialise(op, rule, assign, produced)
            cost = 0.0
            for a, t in zip(op.inputs, ins):
                if isinstance(a, Value) and t is not None and t not in self.avail[a.id]:
                    cost += self._best_src(a, t)[1]
            for v, t in zip(op.outputs, outs):
                if not self._merges(v, t):
                    cost += _cost(t, _type(v, self.layouts[v.id], self.mesh))
            comb = _combine(op, rule, assign, outs)
            if comb[1] is not None:
                cost += comb[1].time_s * _combine_rounds(op)
            if best is None or (cost, k) < best:
                best, chosen = (cost, k), (name, ins, outs, assign, comb)
        assert chosen is not None and best is not None
        name, ins, outs, assign, (comb_axes, comb_plan) = chosen
        moves, _ = self._moves(op, ins)
        for v, t in zip(op.outputs, outs):
            self.avail[v.id] = [t]
        return OpDecision(op, rule, tuple(assign.get(f, ()) for f in range(len(rule.factors))),
                          tuple(ins), tuple(outs), tuple(moves), name, best[0], (), comb_axes, comb_plan)


def _combine(op: Op, rule: Rule, assign: dict[int, tuple[Axis, ...]], outs: Sequence[ShardingType]
             ) -> tuple[tuple[str, ...], Plan | None]:
    """Axes of the op's sharded max/min factors, and the all-reduce that finishes it, priced as
    redist prices a sum over the same axes (same bytes and rounds; only the combiner differs).
    They are whole axes (``_gather_assign`` gives these factors no sub-axis)."""
    axes = tuple(a for f, k in enumerate(rule.factors) if k.kind == COMBINE for a in assign.get(f, ())
                 if isinstance(a, str))
    if not axes:
        return (), None
    t = outs[0]
    return axes, plan_move(ShardingType(t.shape, t.dtype, t.dims, t.mesh, sorted(axes, key=str)), t)


def _combine_rounds(op: Op) -> int:
    """All-reduces a combine takes: arg* reduce the value, then the index among the winners."""
    return 2 if op.name in ("argmax", "argmin") else 1


def lower(program: Program, mesh: Mesh, rules: Sequence[Rule], layouts: dict[int, Layout],
          in_layouts: Sequence[Layout] | None = None, out_layouts: Sequence[Layout] | None = None) -> Lowered:
    """Decide every op's local types and every redistribution (no JAX tracing here).

    Inputs and outputs take their propagated layouts unless given (a body's are its loop's)."""
    pl = _Planner(program, mesh, rules, layouts)
    in_lays = in_layouts if in_layouts is not None else [whole_axes(layouts[v.id]) for v in program.inputs]
    out_lays = out_layouts if out_layouts is not None else [
        whole_axes(layouts[o.id]) if isinstance(o, Value) else () for o in program.outputs]
    in_types = tuple(_type(v, lay, mesh) for v, lay in zip(program.inputs, in_lays))
    for v, t in zip(program.inputs, in_types):
        pl.avail[v.id] = [t]
    const_types = {}
    for cid, arr in program.consts.items():
        t = ShardingType(arr.shape, arr.dtype.name, ((),) * arr.ndim, mesh)
        const_types[cid] = t
        pl.avail[cid] = [t]
    steps = tuple(pl.step(op) for op in program.ops)
    out_moves, out_types = [], []
    for o, path, lay in zip(program.outputs, program.output_paths, out_lays):
        if not isinstance(o, Value):
            if program.in_tree is None:  # a body returning a literal (its loop broadcasts it)
                out_types.append(_type(o, (), mesh))
                continue
            raise PartitionError(f"output {path} is the literal {o}; return an array instead")
        v = o
        dst = _type(v, lay, mesh)
        if dst not in pl.avail[v.id]:
            src, _ = pl._best_src(v, dst)
            out_moves.append(Move(v.id, src, dst, plan_move(src, dst), f"output {path}"))
            pl.avail[v.id].append(dst)
        out_types.append(dst)
    return Lowered(program, mesh, dict(layouts), in_types, const_types, steps, tuple(out_moves),
                   tuple(out_types))


__all__ = ["PARTITIONER_COST_MODEL", "Lowered", "Move", "OpDecision", "lower", "plan_move", "whole_axes"]
