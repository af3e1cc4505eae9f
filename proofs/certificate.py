"""Plan certificates: ``verify(plan)`` proves, with z3, for every global shape the plan's types allow

1. ``chain``: every step maps any data meeting its input type to data meeting its output type
   (index-level semantics, ``proofs.link``), and the last type means the destination;
2. ``memory``: ``peak_bytes <= max(local_bytes(src), local_bytes(dst))``;
3. ``recv``: ``recv_bytes <= lower_bound_bytes`` (so, the bound being a bound, equal),

with the global sizes symbolic (``n_d = L_d * m_d``, ``m_d >= 1``) and the byte counts derived
symbolically by ``proofs.measures`` and cross-checked against the plan's own numbers. A refuted
property raises ``VerificationError`` naming it with a concrete counterexample; a property z3
cannot decide within the timeout is reported in the certificate (``undecided``), never hidden.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import z3

from proofs.errors import VerificationError
from proofs.link import DEFAULT_TIMEOUT_MS, Outcome, _val, prove_link
from proofs.measures import local_cells, lower_bound_cells, shares_unreduced, step_recv_cells
from proofs.model import cells, shards
from redist.errors import StepError
from redist.plan import Plan
from spmd_types import ShardingType


@dataclass(frozen=True)
class Property:
    """One proved (or undecided) claim, with its statement and the solver seconds spent on it."""

    name: str
    status: str  # "proved" or "undecided"
    statement: str
    seconds: float
    note: str = ""

    def __str__(self) -> str:
        extra = f"  [{self.note}]" if self.note else ""
        return f"{self.name:<8} {self.status:<9} {self.seconds * 1e3:8.1f} ms  {self.statement}{extra}"


@dataclass(frozen=True)
class Certificate:
    src: str
    dst: str
    mesh: str
    steps: tuple[str, ...]
    cells: tuple[int, ...]
    shapes: str
    links: tuple[Property, ...]
    properties: tuple[Property, ...]
    peak_bytes: str
    memory_bound_bytes: str
    recv_bytes: str
    lower_bound_bytes: str
    solver_seconds: float

    @property
    def ok(self) -> bool:
        """Every property proved (none undecided)."""
        return not self.undecided

    @property
    def undecided(self) -> tuple[str, ...]:
        return tuple(f"{p.name}: {p.note}" for p in self.links + self.properties if p.status == "undecided")

    @property
    def recv_at_bound(self) -> bool:
        """``recv_bytes <= lower_bound_bytes`` proved (False: above a bound known not to be tight)."""
        return all(p.status == "proved" for p in self.properties if p.name == "recv")

    def __str__(self) -> str:
        lines = [
            f"certificate {self.src} -> {self.dst} on mesh {self.mesh} ({len(self.steps)} steps)",
            f"  for all shapes {self.shapes}",
        ]
        for i, (s, p) in enumerate(zip(self.steps, self.links)):
            lines.append(f"  step {i + 1}: {s:<44} {p.status} ({p.seconds * 1e3:.1f} ms)")
        for p in self.links[len(self.steps):]:
            lines.append(f"  final type = destination: {p.status} ({p.seconds * 1e3:.1f} ms)")
        lines += [f"  {p}" for p in self.properties]
        lines += [
            f"  peak      = {self.peak_bytes}",
            f"  mem bound = {self.memory_bound_bytes}",
            f"  recv      = {self.recv_bytes}",
            f"  lower bnd = {self.lower_bound_bytes}",
            f"  solver time {self.solver_seconds * 1e3:.1f} ms; "
            + ("all properties proved" if self.ok else f"UNDECIDED: {'; '.join(self.undecided)}"),
        ]
        return "\n".join(lines)


def _mono(coef: Fraction, itemsize: int, rank: int) -> str:
    ms = "*".join(f"m{d}" for d in range(rank))
    c = coef * itemsize
    return f"{c}{'*' + ms if ms else ''} B"


class _Sizes:
    """The symbols ``m_d >= 1`` and their product for the inequality proofs."""

    def __init__(self, rank: int) -> None:
        self.m = [z3.Int(f"m{d}") for d in range(rank)]
        self.M = z3.IntVal(1)
        for m in self.m:
            self.M = self.M * m


def prove_inequality(name: str, rank: int, lhs: Sequence[Fraction], rhs: Fraction, statement: str,
                     L: Sequence[int], timeout_ms: int) -> tuple[Property, dict[str, Any] | None]:
    """Prove ``max(lhs) * M <= rhs * M`` for ``M = m_0*...*m_{r-1}``, all ``m_d >= 1``.

    The polynomial form is given to z3 as is (nonlinear integer arithmetic); if z3 cannot decide it,
    the monomial ``M`` is replaced by one variable ``M >= 1`` - exact here, since every quantity is
    a constant times the same monomial and any ``M`` is a product (``m_0 = M``, the rest 1)."""
    den = math.lcm(*(x.denominator for x in list(lhs) + [rhs]))
    sz = _Sizes(rank)
    t0 = time.perf_counter()
    note = ""
    for attempt in ("polynomial", "monomial"):
        s = z3.Solver()
        s.set("timeout", int(timeout_ms))
        s.add(*[m >= 1 for m in sz.m])
        M = sz.M
        if attempt == "monomial":
            M = z3.Int("M")
            s.add(M >= 1)
        s.add(z3.Or([int(x * den) * M > int(rhs * den) * M for x in lhs]))
        r = s.check()
        if r == z3.unsat:
            return Property(name, "proved", statement, time.perf_counter() - t0, note), None
        if r == z3.sat:
            md = s.model()
            ms = [_val(md, m) for m in sz.m] if attempt == "polynomial" else [_val(md, M)] + [1] * (rank - 1)
            return Property(name, "refuted", statement, time.perf_counter() - t0), {
                "global_shape": [Ld * m for Ld, m in zip(L, ms)],
            }
        note = f"polynomial form undecided ({s.reason_unknown()}); proved in monomial form"
    return Property(name, "undecided", statement, time.perf_counter() - t0, f"z3: {s.reason_unknown()}"), None


def _link_property(i: int, what: str, o: Outcome) -> Property:
    return Property(f"link{i}", o.status, what, o.seconds, o.reason if o.status != "proved" else "")


def verify_plan(plan: Plan, timeout_ms: int = DEFAULT_TIMEOUT_MS, check_recv: bool = True,
                check_memory: bool = True, strict_recv: bool = False, replicas_agree: bool = False) -> Certificate:
    """Certify ``plan`` (see the module docstring); raises ``VerificationError`` on a refutation.

    Where source and destination share an unreduced axis the lower bound is documented not to be
    attainable (``redist.bounds``); there a plan above it is not an error unless ``strict_recv``:
    the certificate records the refuted inequality as ``exceeds`` with the gap instead.

    ``replicas_agree=True`` proves the chain under a narrower assumption on unreduced inputs
    (replicas hold equal partials, see ``proofs.model.Space.generic``); the certificate says so."""
    types: tuple[ShardingType, ...] = plan.all_types
    src, dst = plan.src, plan.dst
    rank, itemsize = src.rank, src.itemsize
    L = cells(list(types) + [dst])
    links: list[Property] = []
    # 1. the chain, link by link (each link a theorem for all shapes its two types allow).
    for i, step in enumerate(plan.steps):
        o = prove_link(step, types[i], types[i + 1], timeout_ms, replicas_agree)
        if o.status == "refuted":
            raise VerificationError(
                "chain", f"step {i + 1} ({step}) does not take {types[i]} to {types[i + 1]}: {o.reason}",
                dict(o.counterexample, step=i + 1),
            )
        links.append(_link_property(i + 1, f"{step}: {types[i]} -> {types[i + 1]}", o))
    if types[-1] != dst:
        o = prove_link(None, types[-1], dst, timeout_ms, replicas_agree)
        if o.status == "refuted":
            raise VerificationError(
                "chain", f"the plan ends in {types[-1]}, which does not hold the destination {dst}: {o.reason}",
                dict(o.counterexample, step=len(plan.steps)),
            )
        links.append(_link_property(len(plan.steps) + 1, f"{types[-1]} means {dst}", o))
    # The recorded types are those of the typing rules (so the chain is one of sound typing rules).
    for i, step in enumerate(plan.steps):
        try:
            ok = step.apply(types[i]) == types[i + 1]
        except StepError as e:
            raise VerificationError("typing", f"step {i + 1} ({step}): {e}", {"step": i + 1}) from None
        if not ok:
            raise VerificationError("typing", f"step {i + 1} ({step}) types {types[i]} as "
                                    f"{step.apply(types[i])}, the plan records {types[i + 1]}", {"step": i + 1})
    chain_secs = sum(p.seconds for p in links)
    chain_status = "proved" if all(p.status == "proved" for p in links) else "undecided"
    props = [Property("chain", chain_status, f"the {len(plan.steps)} steps take {src} to {dst}", chain_secs,
                      ("" if chain_status == "proved" else "a link is undecided")
                      + (" assuming replicas hold equal partials" if replicas_agree else ""))]
    unit = [n // c for n, c in zip(src.shape, L)]
    scale = math.prod(unit) * itemsize
    # 2. memory.
    peak_c = [local_cells(t, L) for t in types]
    bound_c = max(local_cells(src, L), local_cells(dst, L))
    if max(peak_c) * scale != plan.peak_bytes or bound_c * scale != plan.memory_bound_bytes:
        raise VerificationError("peak_formula", f"symbolic peak {max(peak_c) * scale} / bound {bound_c * scale} "
                                f"at the plan's shape differ from plan.peak_bytes {plan.peak_bytes} / "
                                f"memory_bound_bytes {plan.memory_bound_bytes}", {"global_shape": list(src.shape)})
    if check_memory:
        p, cex = prove_inequality(
            "memory", rank, [Fraction(c) for c in peak_c], Fraction(bound_c),
            "peak_bytes <= max(local_bytes(src), local_bytes(dst))", L, timeout_ms)
        if p.status == "refuted":
            worst = max(range(len(types)), key=lambda j: peak_c[j])
            raise VerificationError("memory", f"type {types[worst]} after step {worst} holds "
                                    f"{_mono(Fraction(peak_c[worst]), itemsize, rank)} per device, more than "
                                    f"max(src, dst) = {_mono(Fraction(bound_c), itemsize, rank)}",
                                    dict(cex or {}, peak_bytes=peak_c[worst] * itemsize,
                                         bound_bytes=bound_c * itemsize, step=worst))
        props.append(p)
    # 3. transfer.
    per_step = [step_recv_cells(s, types[i], types[i + 1], L) for i, s in enumerate(plan.steps)]
    for i, (c, m) in enumerate(zip(per_step, plan.measures)):
        if abs(float(c * scale) - m.recv_bytes) > 1e-6 * max(1.0, m.recv_bytes):
            raise VerificationError("recv_formula", f"step {i + 1} ({plan.steps[i]}): recv formula gives "
                                    f"{float(c * scale)} B, redist.measure {m.recv_bytes} B",
                                    {"global_shape": list(src.shape), "step": i + 1})
    recv_c = sum(per_step, Fraction(0))
    lb_c = lower_bound_cells(src, dst, L)
    if abs(float(lb_c * scale) - plan.lower_bound_bytes) > 1e-6 * max(1.0, plan.lower_bound_bytes):
        raise VerificationError("lower_bound", f"independent lower bound {float(lb_c * scale)} B differs from "
                                f"redist.bounds {plan.lower_bound_bytes} B", {"global_shape": list(src.shape)})
    if check_recv:
        p, cex = prove_inequality("recv", rank, [recv_c], lb_c, "recv_bytes <= lower_bound_bytes", L, timeout_ms)
        if p.status == "refuted" and shares_unreduced(src, dst) and not strict_recv:
            p = Property("recv", "exceeds", "recv_bytes <= lower_bound_bytes", p.seconds,
                         f"refuted, gap {_mono(recv_c - lb_c, itemsize, rank)}: the types share an unreduced "
                         f"axis, where the bound is not attainable (redist.bounds)")
        if p.status == "refuted":
            raise VerificationError("recv", f"the plan receives {_mono(recv_c, itemsize, rank)} per device, more "
                                    f"than the lower bound {_mono(lb_c, itemsize, rank)}",
                                    dict(cex or {}, recv_bytes=float(recv_c * itemsize),
                                         lower_bound_bytes=float(lb_c * itemsize)))
        props.append(p)
    endpoints = [math.lcm(shards(src, d), shards(dst, d)) for d in range(rank)]
    shapes = ", ".join(f"n{d} = {L[d]}*m{d}" for d in range(rank)) + (", m_d >= 1" if rank else "(scalar)")
    if list(L) != endpoints:
        shapes += f" (the plan's intermediates need multiples of {list(L)}; src/dst alone {endpoints})"
    return Certificate(
        str(src), str(dst), str(src.mesh), tuple(str(s) for s in plan.steps), tuple(L), shapes,
        tuple(links), tuple(props),
        _mono(Fraction(max(peak_c)), itemsize, rank), _mono(Fraction(bound_c), itemsize, rank),
        _mono(recv_c, itemsize, rank), _mono(lb_c, itemsize, rank),
        sum(p.seconds for p in props),
    )


__all__ = ["Certificate", "Property", "prove_inequality", "verify_plan"]
