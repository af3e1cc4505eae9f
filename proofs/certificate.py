"""Plan certificates: ``verify(plan)`` proves, with z3, for every global shape the plan's types allow

1. ``chain``: every step maps any data meeting its input type to data meeting its output type
   (index-level semantics, ``proofs.link``), and the last type means the destination;
2. ``memory``: ``peak_bytes <= max(local_bytes(src), local_bytes(dst))``;
3. ``recv``: ``recv_bytes <= lower_bound_bytes`` (so, the bound being a bound, equal), checked
   by default only for plans of the bytes objective (the one that promises it),

with the global sizes symbolic (``n_d = L_d * m_d``, ``m_d >= 1``) and the byte counts derived
symbolically by ``proofs.measures`` and cross-checked against the plan's own numbers. A refuted
property raises ``VerificationError`` naming it with a concrete counterexample; a property z3
cannot decide within the timeout is reported in the certificate (``undecided``), never hidden;
a property not checked is listed as such (``Certificate.unchecked``), never counted as proved.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import z3

from proofs.errors import VerificationError, VerifyArgumentError
from proofs.link import DEFAULT_TIMEOUT_MS, Outcome, Status, _val, prove_link
from proofs.measures import local_cells, lower_bound_cells, shares_unreduced, step_recv_cells
from proofs.model import cells, shards
from redist.bounds import on_prime_atoms
from redist.errors import StepError
from redist.plan import Plan


@dataclass(frozen=True)
class Property:
    """One claim of a certificate: its ``status`` (proved, undecided, exceeds a bound known not
    tight, or not checked, with ``note`` saying why), its statement and the solver seconds spent.

    Examples:
        >>> from proofs import verify_plan
        >>> from redist import redistribute
        >>> cert = verify_plan(redistribute("f32[64@x]", "f32[64]", "x=2", objective="bytes"))
        >>> [(p.name, p.status.value) for p in cert.properties]
        [('chain', 'proved'), ('memory', 'proved'), ('recv', 'proved')]
        >>> cert.properties[2].statement
        'recv_bytes <= lower_bound_bytes'
    """

    name: str
    status: Status
    statement: str
    seconds: float
    note: str = ""

    def __str__(self) -> str:
        extra = f"  [{self.note}]" if self.note else ""
        return f"{self.name:<8} {self.status:<11} {self.seconds * 1e3:8.1f} ms  {self.statement}{extra}"


TRANSFER_STATEMENT = "recv_bytes <= lower_bound_bytes"
MEMORY_STATEMENT = "peak_bytes <= max(local_bytes(src), local_bytes(dst))"


@dataclass(frozen=True)
class Certificate:
    """What z3 proved of one plan: ``properties`` are the properties checked (each proved,
    undecided, or ``exceeds`` a bound known not tight), ``unchecked`` those not checked, with why.
    ``recv_bytes`` and ``lower_bound_bytes`` are means over devices (docs/design.md section 4).

    Examples:
        >>> from redist import redistribute
        >>> plan = redistribute("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4", objective="bytes")
        >>> cert = plan.verify()
        >>> cert.ok, cert.proved, cert.recv_at_bound, cert.recv_bytes
        (True, ('chain', 'memory', 'recv'), True, '6*m0*m1 B')
        >>> timed = redistribute("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4", objective="alpha-beta").verify()
        >>> timed.proved, timed.recv_at_bound, [p.name for p in timed.unchecked]  # time promises no bound
        (('chain', 'memory'), None, ['recv'])
    """

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
    unchecked: tuple[Property, ...] = ()
    objective: str = ""
    """The objective the plan was ranked by (``redist.Objective``'s value)."""

    @property
    def ok(self) -> bool:
        """Every property checked is proved or above a bound known not tight (none undecided).
        Says nothing of ``unchecked`` properties: ask ``recv_at_bound`` for the transfer bound."""
        return not self.undecided

    @property
    def undecided(self) -> tuple[str, ...]:
        return tuple(f"{p.name}: {p.note}" for p in self.links + self.properties if p.status is Status.UNDECIDED)

    @property
    def proved(self) -> tuple[str, ...]:
        """The names of the properties proved."""
        return tuple(p.name for p in self.properties if p.status is Status.PROVED)

    @property
    def recv_at_bound(self) -> bool | None:
        """The transfer property: ``True`` where ``recv_bytes <= lower_bound_bytes`` was proved,
        ``False`` where it was refuted (above a bound known not tight, ``exceeds``), ``None`` where
        it was not checked or z3 could not decide it. Test it with ``is True``; ``None`` is falsy."""
        for p in self.properties:
            if p.name == "recv":
                return {Status.PROVED: True, Status.EXCEEDS: False}.get(p.status)
        return None

    def _verdict(self) -> str:
        if not self.ok:
            return f"UNDECIDED: {'; '.join(self.undecided)}"
        parts = [f"proved: {', '.join(self.proved) or 'nothing'}"]
        exceeds = [p.name for p in self.properties if p.status is Status.EXCEEDS]
        if exceeds:
            parts.append(f"above a bound known not to be tight: {', '.join(exceeds)}")
        if self.unchecked:
            parts.append(f"not checked: {', '.join(p.name for p in self.unchecked)}")
        return "; ".join(parts)

    def __str__(self) -> str:
        lines = [
            f"certificate {self.src} -> {self.dst} on mesh {self.mesh} ({len(self.steps)} steps)",
            f"  for all shapes {self.shapes}",
        ]
        for i, (s, p) in enumerate(zip(self.steps, self.links)):
            lines.append(f"  step {i + 1}: {s:<44} {p.status} ({p.seconds * 1e3:.1f} ms)")
        for p in self.links[len(self.steps):]:
            lines.append(f"  final type = destination: {p.status} ({p.seconds * 1e3:.1f} ms)")
        lines += [f"  {p}" for p in self.properties + self.unchecked]
        lines += [
            f"  peak      = {self.peak_bytes} per device",
            f"  mem bound = {self.memory_bound_bytes} per device",
            f"  recv      = {self.recv_bytes} (mean per device)",
            f"  lower bnd = {self.lower_bound_bytes} (mean per device)",
            f"  solver time {self.solver_seconds * 1e3:.1f} ms; "
            + self._verdict(),
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
            return Property(name, Status.PROVED, statement, time.perf_counter() - t0, note), None
        if r == z3.sat:
            md = s.model()
            ms = [_val(md, m) for m in sz.m] if attempt == "polynomial" else [_val(md, M)] + [1] * (rank - 1)
            return Property(name, Status.REFUTED, statement, time.perf_counter() - t0), {
                "global_shape": [Ld * m for Ld, m in zip(L, ms)],
            }
        note = f"polynomial form undecided ({s.reason_unknown()}); proved in monomial form"
    return Property(name, Status.UNDECIDED, statement, time.perf_counter() - t0, f"z3: {s.reason_unknown()}"), None


def _link_property(i: int, what: str, o: Outcome) -> Property:
    return Property(f"link{i}", o.status, what, o.seconds, o.reason if o.status is not Status.PROVED else "")


class _Scale(NamedTuple):
    """The plan's symbolic sizes: cell counts ``L`` and the bytes of one ``prod m_d`` unit at its shape."""

    L: tuple[int, ...]
    bytes_per_unit: int


def _scale(plan: Plan) -> _Scale:
    L = cells(list(plan.all_types) + [plan.dst])
    unit = [n // c for n, c in zip(plan.src.shape, L)]
    return _Scale(tuple(L), math.prod(unit) * plan.src.itemsize)


def prove_chain(plan: Plan, timeout_ms: int = DEFAULT_TIMEOUT_MS, replicas_agree: bool = False
                ) -> tuple[list[Property], Property]:
    """Each link a theorem for all shapes its two types allow (``proofs.link``), the recorded
    types those of the typing rules, and the last type means the destination. Returns the link
    properties and the chain property; raises ``VerificationError`` on a refutation."""
    types, dst = plan.all_types, plan.dst
    links: list[Property] = []
    for i, step in enumerate(plan.steps):
        o = prove_link(step, types[i], types[i + 1], timeout_ms, replicas_agree)
        if o.status is Status.REFUTED:
            raise VerificationError(
                "chain", f"step {i + 1} ({step}) does not take {types[i]} to {types[i + 1]}: {o.reason}",
                dict(o.counterexample, step=i + 1),
            )
        links.append(_link_property(i + 1, f"{step}: {types[i]} -> {types[i + 1]}", o))
    if types[-1] != dst:
        o = prove_link(None, types[-1], dst, timeout_ms, replicas_agree)
        if o.status is Status.REFUTED:
            raise VerificationError(
                "chain", f"the plan ends in {types[-1]}, which does not hold the destination {dst}: {o.reason}",
                dict(o.counterexample, step=len(plan.steps)),
            )
        links.append(_link_property(len(plan.steps) + 1, f"{types[-1]} means {dst}", o))
    _check_typing(plan)
    proved = all(p.status is Status.PROVED for p in links)
    note = ("" if proved else "a link is undecided") + (" assuming replicas hold equal partials" if replicas_agree else "")
    chain = Property("chain", Status.PROVED if proved else Status.UNDECIDED,
                     f"the {len(plan.steps)} step{'' if len(plan.steps) == 1 else 's'} take{'s' if len(plan.steps) == 1 else ''} {plan.src} to {dst}", sum(p.seconds for p in links), note)
    return links, chain


def _check_typing(plan: Plan) -> None:
    """The recorded types are those of the typing rules (so the chain is one of sound typing rules)."""
    types = plan.all_types
    for i, step in enumerate(plan.steps):
        try:
            got = step.apply(types[i])
        except StepError as e:
            raise VerificationError("typing", f"step {i + 1} ({step}): {e}", {"step": i + 1}) from None
        if got != types[i + 1]:
            raise VerificationError("typing", f"step {i + 1} ({step}) types {types[i]} as {got}, the plan "
                                    f"records {types[i + 1]}", {"step": i + 1})


def memory_cells(plan: Plan) -> tuple[list[int], int]:
    """Per type along the plan its local size, and the bound ``max(src, dst)``, in units of
    ``prod m_d`` elements, cross-checked against the plan's own figures at its shape."""
    sc = _scale(plan)
    peak_c = [local_cells(t, sc.L) for t in plan.all_types]
    bound_c = max(local_cells(plan.src, sc.L), local_cells(plan.dst, sc.L))
    if max(peak_c) * sc.bytes_per_unit != plan.peak_bytes or bound_c * sc.bytes_per_unit != plan.memory_bound_bytes:
        raise VerificationError("peak_formula", f"symbolic peak {max(peak_c) * sc.bytes_per_unit} / bound "
                                f"{bound_c * sc.bytes_per_unit} at the plan's shape differ from plan.peak_bytes "
                                f"{plan.peak_bytes} / memory_bound_bytes {plan.memory_bound_bytes}",
                                {"global_shape": list(plan.src.shape)})
    return peak_c, bound_c


def prove_memory(plan: Plan, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Property:
    """``peak_bytes <= max(local_bytes(src), local_bytes(dst))`` for every shape."""
    types, rank, itemsize = plan.all_types, plan.src.rank, plan.src.itemsize
    peak_c, bound_c = memory_cells(plan)
    p, cex = prove_inequality("memory", rank, [Fraction(c) for c in peak_c], Fraction(bound_c),
                              MEMORY_STATEMENT, _scale(plan).L, timeout_ms)
    if p.status is Status.REFUTED:
        worst = max(range(len(types)), key=lambda j: peak_c[j])
        raise VerificationError("memory", f"type {types[worst]} after step {worst} holds "
                                f"{_mono(Fraction(peak_c[worst]), itemsize, rank)} per device, more than "
                                f"max(src, dst) = {_mono(Fraction(bound_c), itemsize, rank)}",
                                dict(cex or {}, peak_bytes=peak_c[worst] * itemsize,
                                     bound_bytes=bound_c * itemsize, step=worst))
    return p


def transfer_cells(plan: Plan) -> tuple[Fraction, Fraction]:
    """(recv, lower bound) in units of ``prod m_d`` elements, each derived here independently and
    cross-checked against ``redist.measure`` / ``redist.bounds`` at the plan's shape."""
    types, src, dst = plan.all_types, plan.src, plan.dst
    sc = _scale(plan)
    per_step = [step_recv_cells(s, types[i], types[i + 1], sc.L) for i, s in enumerate(plan.steps)]
    for i, (c, m) in enumerate(zip(per_step, plan.measures)):
        if abs(float(c * sc.bytes_per_unit) - m.recv_bytes) > 1e-6 * max(1.0, m.recv_bytes):
            raise VerificationError("recv_formula", f"step {i + 1} ({plan.steps[i]}): recv formula gives "
                                    f"{float(c * sc.bytes_per_unit)} B, redist.measure {m.recv_bytes} B",
                                    {"global_shape": list(src.shape), "step": i + 1})
    lb_c = lower_bound_cells(src, dst, sc.L)
    if abs(float(lb_c * sc.bytes_per_unit) - plan.lower_bound_bytes) > 1e-6 * max(1.0, plan.lower_bound_bytes):
        raise VerificationError("lower_bound", f"independent lower bound {float(lb_c * sc.bytes_per_unit)} B "
                                f"differs from redist.bounds {plan.lower_bound_bytes} B", {"global_shape": list(src.shape)})
    return sum(per_step, Fraction(0)), lb_c


def prove_transfer(plan: Plan, timeout_ms: int = DEFAULT_TIMEOUT_MS, strict_recv: bool = False) -> Property:
    """``recv_bytes <= lower_bound_bytes`` for every shape (so, the bound being a bound, equal).
    Where the types share an unreduced axis the bound is documented not tight, and where a type
    cuts an axis off its prime atoms the planner can miss it (docs/design.md 4.3): a plan above it
    there is recorded as ``exceeds`` with the gap unless ``strict_recv``."""
    src, dst = plan.src, plan.dst
    rank, itemsize = src.rank, src.itemsize
    recv_c, lb_c = transfer_cells(plan)
    p, cex = prove_inequality("recv", rank, [recv_c], lb_c, TRANSFER_STATEMENT, _scale(plan).L, timeout_ms)
    if p.status is Status.REFUTED and not strict_recv:
        if shares_unreduced(src, dst):
            why = "the types share an unreduced axis, where the bound is not attainable (redist.bounds)"
        elif not (on_prime_atoms(src) and on_prime_atoms(dst)):
            why = ("a sub-axis is not a product of the mesh's prime atoms (x:(1)3 on x=6): the planner's steps "
                   "work within one factorisation per axis and can miss the bound; spell sub-axes with the "
                   "prime factors, smallest most major (x:(1)2, x:(2)3)")
        else:
            why = ""
        if why:
            return Property("recv", Status.EXCEEDS, TRANSFER_STATEMENT, p.seconds,
                            f"refuted, gap {_mono(recv_c - lb_c, itemsize, rank)}: {why}")
    if p.status is Status.REFUTED:
        raise VerificationError("recv", f"the plan receives {_mono(recv_c, itemsize, rank)} per device on average, "
                                f"more than the lower bound {_mono(lb_c, itemsize, rank)}",
                                dict(cex or {}, recv_bytes=float(recv_c * itemsize), lower_bound_bytes=float(lb_c * itemsize)))
    return p


def _shapes_text(plan: Plan, L: Sequence[int]) -> str:
    src, dst, rank = plan.src, plan.dst, plan.src.rank
    endpoints = [math.lcm(shards(src, d), shards(dst, d)) for d in range(rank)]
    text = ", ".join(f"n{d} = {L[d]}*m{d}" for d in range(rank)) + (", m_d >= 1" if rank else "(scalar)")
    if list(L) != endpoints:
        text += f" (the plan's intermediates need multiples of {list(L)}; src/dst alone {endpoints})"
    return text


def verify_plan(plan: Plan, timeout_ms: int = DEFAULT_TIMEOUT_MS, check_recv: bool | None = None,
                check_memory: bool = True, strict_recv: bool = False, replicas_agree: bool = False) -> Certificate:
    """Certify ``plan`` (see the module docstring): ``prove_chain``, ``prove_memory`` and
    ``prove_transfer``; raises ``VerificationError`` on a refutation.

    ``replicas_agree=True`` proves the chain under a narrower assumption on unreduced inputs
    (replicas hold equal partials, see ``proofs.model.Space.generic``); the certificate says so.
    ``check_recv`` defaults to the plan's objective: the transfer bound is the guarantee of the
    bytes objective; a plan chosen for time may move more on purpose, and then the certificate
    lists ``recv`` as not checked (``recv_at_bound`` is ``None``). ``check_recv=True`` proves it
    of any plan (a plan above the bound then raises, unless the bound is known not tight there);
    ``strict_recv=True`` also raises there and implies ``check_recv`` unless it is ``False``.

    Examples:
        >>> from proofs import verify_plan
        >>> from redist import redistribute
        >>> plan = redistribute("f32[8@x,8]{U:y}", "f32[8@(x,y),8]", "x=2,y=4", objective="bytes")
        >>> cert = verify_plan(plan, timeout_ms=5000)
        >>> cert.ok, cert.recv_at_bound, cert.shapes
        (True, True, 'n0 = 8*m0, n1 = 1*m1, m_d >= 1')

    Raises:
        VerificationError: a property refuted, with a concrete counterexample (a plan's bug).
        VerifyArgumentError: an argument of the wrong type or range (the message names it).
    """
    _check_arguments(timeout_ms, check_recv, check_memory, strict_recv, replicas_agree)
    objective = plan.objective.value
    if check_recv is None:
        check_recv = objective == "bytes" or strict_recv
    src, rank, itemsize = plan.src, plan.src.rank, plan.src.itemsize
    links, chain = prove_chain(plan, timeout_ms, replicas_agree)
    props = [chain]
    unchecked = []
    sc = _scale(plan)
    peaks, bound_c = memory_cells(plan)
    if check_memory:
        props.append(prove_memory(plan, timeout_ms))
    else:
        unchecked.append(Property("memory", Status.NOT_CHECKED, MEMORY_STATEMENT, 0.0, "check_memory=False"))
    recv_c, lb_c = transfer_cells(plan)
    if check_recv:
        props.append(prove_transfer(plan, timeout_ms, strict_recv))
    else:
        why = (f"the {objective} objective does not promise it; check it with check_recv=True "
               f"(redist verify --check-recv) or plan with objective='bytes'" if objective != "bytes"
               else "check_recv=False")
        unchecked.append(Property("recv", Status.NOT_CHECKED, TRANSFER_STATEMENT, 0.0, why))
    return Certificate(
        str(src), str(plan.dst), str(src.mesh), tuple(str(s) for s in plan.steps), sc.L, _shapes_text(plan, sc.L),
        tuple(links), tuple(props),
        _mono(Fraction(max(peaks)), itemsize, rank), _mono(Fraction(bound_c), itemsize, rank),
        _mono(recv_c, itemsize, rank), _mono(lb_c, itemsize, rank),
        sum(p.seconds for p in props), tuple(unchecked), objective,
    )


def plan_verify(plan: Plan, *args: Any, **kwargs: Any) -> Certificate:
    """``plan.verify(**kw)``: ``verify_plan`` with its keywords only; a positional argument or an
    unknown keyword is a ``VerifyArgumentError`` naming it and the keywords accepted.

    Examples:
        >>> from redist import redistribute
        >>> plan = redistribute("f32[64@x]", "f32[64]", "x=2", objective="bytes")
        >>> plan.verify(check_memory=False).proved
        ('chain', 'recv')
        >>> plan.verify(5)
        Traceback (most recent call last):
        proofs.errors.VerifyArgumentError: plan.verify() takes keyword arguments only, got 1 positional (5)...

    Raises:
        VerifyArgumentError: a positional argument, an unknown keyword, or one of the wrong type.
        VerificationError: a property refuted (see ``verify_plan``).
    """
    accepted = [n for n in inspect.signature(verify_plan).parameters if n != "plan"]
    if args:
        raise VerifyArgumentError(f"plan.verify() takes keyword arguments only, got {len(args)} positional "
                                  f"({', '.join(map(repr, args))}); it accepts {', '.join(accepted)}")
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise VerifyArgumentError(f"plan.verify() got unknown keyword(s) {', '.join(unknown)}; it accepts "
                                  f"{', '.join(accepted)}")
    return verify_plan(plan, **kwargs)


def _check_arguments(timeout_ms: object, check_recv: object, check_memory: object, strict_recv: object,
                     replicas_agree: object) -> None:
    """``verify_plan``'s arguments, each of its type and range, or ``VerifyArgumentError`` naming it."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise VerifyArgumentError(f"timeout_ms must be a positive int (milliseconds z3 may spend per query, "
                                  f"default {DEFAULT_TIMEOUT_MS}), got {timeout_ms!r}")
    if check_recv is not None and not isinstance(check_recv, bool):
        raise VerifyArgumentError(f"check_recv must be True, False or None (the plan's objective decides), "
                                  f"got {check_recv!r}")
    for name, value in (("check_memory", check_memory), ("strict_recv", strict_recv), ("replicas_agree", replicas_agree)):
        if not isinstance(value, bool):
            raise VerifyArgumentError(f"{name} must be True or False, got {value!r}")


__all__ = ["MEMORY_STATEMENT", "TRANSFER_STATEMENT", "Certificate", "Property", "prove_chain", "prove_inequality", "prove_memory", "prove_transfer",
           "memory_cells", "plan_verify", "transfer_cells", "verify_plan"]
