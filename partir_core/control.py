"""Structured control flow (``scan``, ``while``, ``cond``) for propagation: ties.

A loop's carry has one layout across iterations, so the outer initial value, the body's carry
input and output and the loop's result are **tied**: each dimension is one factor shared by all
four. A stacked input (``xs``) is tied to the body's slice on every dimension but the stacked one,
which is never sharded (each device runs every iteration), so stacked layer parameters shard on
their other dimensions; stacked outputs (``ys``) likewise. Consts are tied to the body's inputs,
``cond`` operands and results to every branch's. Ties are ordinary (op, rule) sites for the
propagator, so sharding flows into a body, through it and back out, sweep after sweep, until
nothing changes: the fixpoint covers the body and the program around it together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from partir_core.ir import Atom, Op, Program, Value, is_key
from partir_core.rules import NOSHARD, PASS, Factor, Rule


@dataclass(frozen=True)
class TiePrim:
    """Stands in for a primitive in a tie site (only ``name`` is read, by conflict reports)."""

    name: str
    multiple_results: bool = True


Group = list[tuple[Atom, bool]]
"""Tensors tied together, each with whether it carries a leading stacked dimension."""


def _tie(op: Op, role: str, group: Group) -> tuple[Op, Rule] | None:
    seen: set[int] = set()
    tensors: list[tuple[Value, bool]] = []
    for a, stacked in group:
        if isinstance(a, Value) and a.id not in seen:
            seen.add(a.id)
            tensors.append((a, stacked))
    if len(tensors) < 2:
        return None
    v0, s0 = tensors[0]
    base = v0.shape[1:] if s0 else v0.shape
    kind = NOSHARD if any(is_key(v.dtype) for v, _ in tensors) else PASS
    factors = [Factor(n, kind) for n in base]
    dims: list[tuple[tuple[int, ...], ...]] = []
    for v, stacked in tensors:
        own: tuple[tuple[int, ...], ...] = ()
        if stacked:
            factors.append(Factor(v.shape[0], NOSHARD))
            own = ((len(factors) - 1,),)
        dims.append(own + tuple((f,) for f in range(len(base))))
    site = Op(op.index, TiePrim(f"{op.name} {role}"), tuple(v for v, _ in tensors), (), {})
    return site, Rule(tuple(factors), tuple(dims), ())


def _scan_groups(op: Op) -> list[tuple[str, Group]]:
    c, k = int(op.params["num_consts"]), int(op.params["num_carry"])
    body = op.bodies[0]
    ins, bin_, bout, out = op.inputs, body.inputs, body.outputs, op.outputs
    groups: list[tuple[str, Group]] = [(f"const {i}", [(ins[i], False), (bin_[i], False)]) for i in range(c)]
    groups += [(f"carry {j}", [(ins[c + j], False), (bin_[c + j], False), (bout[j], False), (out[j], False)])
               for j in range(k)]
    groups += [(f"xs {i}", [(ins[i], True), (bin_[i], False)]) for i in range(c + k, len(ins))]
    groups += [(f"ys {j}", [(bout[j], False), (out[j], True)]) for j in range(k, len(out))]
    return groups


def _while_groups(op: Op) -> list[tuple[str, Group]]:
    cn, bn = int(op.params["cond_nconsts"]), int(op.params["body_nconsts"])
    cond, body = op.bodies
    ins = op.inputs
    groups: list[tuple[str, Group]] = [(f"cond const {i}", [(ins[i], False), (cond.inputs[i], False)])
                                       for i in range(cn)]
    groups += [(f"body const {i}", [(ins[cn + i], False), (body.inputs[i], False)]) for i in range(bn)]
    groups += [(f"carry {j}", [(ins[cn + bn + j], False), (cond.inputs[cn + j], False),
                               (body.inputs[bn + j], False), (body.outputs[j], False), (op.outputs[j], False)])
               for j in range(len(op.outputs))]
    return groups


def _cond_groups(op: Op) -> list[tuple[str, Group]]:
    groups: list[tuple[str, Group]] = [
        (f"operand {i}", [(a, False)] + [(b.inputs[i], False) for b in op.bodies])
        for i, a in enumerate(op.inputs[1:])]
    groups += [(f"result {j}", [(v, False)] + [(b.outputs[j], False) for b in op.bodies])
               for j, v in enumerate(op.outputs)]
    return groups


_GROUPS = {"scan": _scan_groups, "while": _while_groups, "cond": _cond_groups}


def ties(op: Op) -> list[tuple[Op, Rule]]:
    """The propagation sites that tie a structured op to its bodies."""
    out = []
    for role, group in _GROUPS[op.name](op):
        site = _tie(op, role, group)
        if site is not None:
            out.append(site)
    return out


def sites(program: Program, rules: Sequence[Rule]) -> list[tuple[Op, Rule]]:
    """Every (op, rule) the propagator visits, in program order, bodies and ties included."""
    out: list[tuple[Op, Rule]] = []
    for op in program.all_ops():
        out.extend(ties(op) if op.bodies else [(op, rules[op.index])])
    return out


def stacked_inputs(program: Program) -> dict[int, set[int]]:
    """Dimensions of values that some loop reads as stacked (``scan`` xs): sharding them makes
    the loop gather them whole, so ``ShardParams`` leaves them alone."""
    out: dict[int, set[int]] = {}
    for op in program.all_ops():
        if op.name == "scan":
            c, k = int(op.params["num_consts"]), int(op.params["num_carry"])
            for a in op.inputs[c + k:]:
                if isinstance(a, Value):
                    out.setdefault(a.id, set()).add(0)
    return out
