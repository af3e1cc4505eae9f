"""One link of a proof chain: "after this step, the data is what the next type says"."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import z3

from proofs.errors import VerificationError
from proofs.model import Arr, Atom, Lin, Space, Span, cells, lin_add, set_mixed_int, size_of
from proofs.steps_semantics import Cell, apply_step, device_coords, p2p_atoms
from redist.steps import Comm, Step
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo

DEFAULT_TIMEOUT_MS = 20_000


class Status(StrEnum):
    """The outcome of one proof (a ``str`` enum, so it compares equal to its value)."""

    PROVED = "proved"
    REFUTED = "refuted"
    UNDECIDED = "undecided"
    """z3 gave up (timeout or an undecidable fragment): reported, never hidden."""
    EXCEEDS = "exceeds"
    """``recv <= bound`` refuted where the bound is documented not tight (shared unreduced axes)."""


@dataclass(frozen=True)
class Outcome:
    """``status`` is proved, refuted or undecided (z3 gave up: ``reason`` says why)."""

    status: Status
    seconds: float
    counterexample: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    cases: int = 1
    """How many z3 cases the proof solved (one per class of destinations for point-to-point steps)."""


def _val(model: z3.ModelRef, x: Any) -> int:
    v = model.eval(x, model_completion=True)
    return v.as_long() if z3.is_int_value(v) else int(str(v))


def check_meaning(sp: Space, arr: Arr, t: ShardingType, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Outcome:
    """Prove that ``arr`` holds what ``t`` says on every device, at every local index, for every
    ``m_d >= 1`` (global sizes ``L_d * m_d``); or find where it does not."""
    want = sp.ext(t)
    if tuple(arr.ext) != want:
        return Outcome(Status.REFUTED, 0.0, {
            "global_shape": list(sp.L), "local_shape_after_step": list(arr.ext), "local_shape_of_type": list(want),
        }, "the local shape differs")
    dev, idx = sp.device_vars(), sp.index_vars()
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*sp.bounds(dev, idx, want))
    s.add(sp.meaning_violation(arr, t, dev, idx))
    done, dt, md = _solve(s)
    if done is not None:
        return done
    ms = [_val(md, m) for m in sp.m]
    coords = {n: _val(md, c) for n, c in zip(sp.mesh.names, dev)}
    local = [_val(md, q) * m + _val(md, r) for (q, r), m in zip(idx, ms)]
    return Outcome(Status.REFUTED, dt, {
        "global_shape": [L * m for L, m in zip(sp.L, ms)],
        "device": sp.mesh.device_id(coords), "coords": coords, "local_index": local,
    }, "the value differs")


def _solve(s: z3.Solver) -> tuple[Outcome | None, float, Any]:
    """Check ``s`` (which asserts a violation): an Outcome when proved or undecided, else the
    model of the counterexample for the caller to describe."""
    t0 = time.perf_counter()
    r = s.check()
    dt = time.perf_counter() - t0
    if r == z3.unsat:
        return Outcome(Status.PROVED, dt), dt, None
    if r == z3.unknown:
        return Outcome(Status.UNDECIDED, dt, reason=s.reason_unknown()), dt, None
    return None, dt, s.model()


@memo(Scope.TYPE, maxsize=1 << 16)
def prove_link(step: Step | None, before: ShardingType, after: ShardingType,
               timeout_ms: int = DEFAULT_TIMEOUT_MS, replicas_agree: bool = False) -> Outcome:
    """Sound step instance: every state meeting ``before`` becomes, by ``step``'s semantics, one
    meeting ``after`` (``step=None``: the identity, i.e. ``before`` and ``after`` mean the same).

    Proved with its own cell counts ``lcm(shards(before), shards(after))``: it then holds for every
    shape both types allow, hence inside any plan. Cached: links recur across plans."""
    if step is not None and step.comm is Comm.POINT_TO_POINT:
        return prove_p2p(step, before, after, timeout_ms, replicas_agree)
    sp = Space(before.mesh, cells([before, after]), "L")
    arr = sp.generic(before, replicas_agree)
    if step is not None:
        try:
            arr = apply_step(step, arr, before, after, sp)
        except VerificationError as e:
            return Outcome(Status.REFUTED, 0.0, dict(e.counterexample, global_shape=list(sp.L)), str(e))
    return check_meaning(sp, arr, after, timeout_ms)


def _group(sp: Space, v: int, spans: Sequence[Span]) -> list[int]:
    """Device ids of ``v``'s group along ``spans`` (digits set to ``0..k-1``), in order."""
    base = device_coords(sp, v)
    return [sp.mesh.device_id(dict(zip(sp.mesh.names, set_mixed_int(sp.mesh, base, spans, j))))
            for j in range(size_of(spans))]


Shape = frozenset[tuple[Atom, int]]


def _shape(diff: Lin, anchor: tuple[int, ...], dev: tuple[int, ...], sizes: tuple[int, ...]) -> Shape:
    """``diff`` up to renaming: ``G``'s cells relative to ``anchor``, partials' device arguments
    relative to ``dev`` (per axis, mod its size). Two cases of one shape are instances of each
    other: substituting ``G(x) := G(x + a' - a)`` and ``F(c, l) := F((c + dev' - dev) mod N, l)`` (both
    functions, since ``G`` and ``F`` are arbitrary) maps the one's formula onto the other's."""
    out: list[tuple[Atom, int]] = []
    for atom, c in diff.items():
        if atom[0] == -1:
            out.append(((-1, tuple(q - a for q, a in zip(atom[1], anchor))), c))
        else:
            out.append(((atom[0], tuple((x - y) % n for x, y, n in zip(atom[1], dev, sizes)), atom[2]), c))
    return frozenset(out)


class _Case(NamedTuple):
    """One representative destination: a device (with its unreduced group) and a cell."""

    device: int
    members: tuple[int, ...]
    off: tuple[int, ...]


def _classes(sp: Space, after: ShardingType, cell: tuple[int, ...], state: dict[Cell, Lin]) -> dict[Shape, _Case]:
    """Every destination (unreduced group of ``after``, cell), grouped by the shape of "what the
    schedule adds there minus what ``after`` says": one representative per shape."""
    ext, uspans = sp.ext(after), sp.unreduced_spans(after)
    sizes = tuple(n for _, n in sp.mesh.axes)
    grid = list(itertools.product(*[range(0, ext[k], cell[k]) for k in range(sp.rank)]))
    out: dict[Shape, _Case] = {}
    seen: set[tuple[int, ...]] = set()
    for v in range(sp.mesh.size):
        members = tuple(_group(sp, v, uspans))
        if members in seen:
            continue
        seen.add(members)
        dv = device_coords(sp, v)
        base = sp.block_cells(after, dv)
        for off in grid:
            anchor = tuple(b + q for b, q in zip(base, off))
            diff: Lin = {(-1, anchor): -1}
            for w in members:
                lin_add(diff, state.get((w, off), {}))
            out.setdefault(_shape(diff, anchor, dv, sizes), _Case(v, members, off))
    return out


def prove_p2p(step: Step, before: ShardingType, after: ShardingType, timeout_ms: int = DEFAULT_TIMEOUT_MS,
              replicas_agree: bool = False) -> Outcome:
    """A ``Permute``/``Exchange`` instance: at every destination (device, cell) the cells the
    schedule adds there (summed over the unreduced group when ``after`` has one) are the elements
    ``after`` says; the offset inside the cell and the sizes ``m_d`` stay symbolic.

    The schedule runs on atoms (``p2p_atoms``); destinations whose difference has one shape
    (``_shape``) are instances of one case, so z3 proves one representative per shape - a correct
    schedule gives a few shapes whatever the mesh, a wrong one a shape z3 refutes at its device."""
    sp = Space(before.mesh, cells([before, after]), "P")
    o = sp.index_vars("o")
    try:
        cell, state = p2p_atoms(step, sp.generic(before, replicas_agree), before, after, sp)
    except VerificationError as e:
        return Outcome(Status.REFUTED, 0.0, dict(e.counterexample, global_shape=list(sp.L)), str(e), 0)
    cases = []
    for case in _classes(sp, after, cell, state).values():
        lhs = z3.Sum([sp.realize(state.get((w, case.off), {}), o) for w in case.members])
        at = tuple((case.off[k] + o[k][0], o[k][1]) for k in range(sp.rank))
        cases.append((case, lhs != sp.g(sp.global_index(after, device_coords(sp, case.device), at))))
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*[m >= 1 for m in sp.m])
    for k in range(sp.rank):
        s.add(o[k][0] >= 0, o[k][0] < cell[k], o[k][1] >= 0, o[k][1] < sp.m[k])
    s.add(z3.Or([c for _, c in cases]))
    done, dt, md = _solve(s)
    if done is not None:
        return Outcome(done.status, done.seconds, done.counterexample, done.reason, len(cases))
    ms = [_val(md, m) for m in sp.m]
    bad = next(case for case, c in cases if z3.is_true(md.eval(c, model_completion=True)))
    return Outcome(Status.REFUTED, dt, {
        "global_shape": [L * m for L, m in zip(sp.L, ms)], "device": bad.device, "coords": sp.mesh.coords(bad.device),
        "local_index": [(bad.off[k] + _val(md, o[k][0])) * ms[k] + _val(md, o[k][1]) for k in range(sp.rank)],
    }, "the value differs", len(cases))


__all__ = ["DEFAULT_TIMEOUT_MS", "Outcome", "Status", "check_meaning", "prove_link", "prove_p2p"]
