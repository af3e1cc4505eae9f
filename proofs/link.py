"""One link of a proof chain: "after this step, the data is what the next type says"."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import z3

from proofs.errors import VerificationError
from proofs.model import Arr, Space, Span, cells, size_of
from proofs.steps_semantics import apply_step, device_coords, p2p_cells
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
    mesh = sp.mesh
    base = mesh.coords(v)
    out = []
    for j in range(size_of(spans)):
        c = dict(base)
        rest = j
        for name, pre, size in reversed(spans):
            stride = mesh.axis_size(name) // (pre * size)
            c[name] += (rest % size - (c[name] // stride) % size) * stride
            rest //= size
        out.append(mesh.device_id(c))
    return out


def prove_p2p(step: Step, before: ShardingType, after: ShardingType, timeout_ms: int = DEFAULT_TIMEOUT_MS,
              replicas_agree: bool = False) -> Outcome:
    """A ``Permute``/``Exchange`` instance, per concrete device and destination cell: the cells the
    schedule adds there (summed over the unreduced group when ``after`` has one) are the elements
    ``after`` says; the offset inside the cell and the sizes ``m_d`` stay symbolic."""
    sp = Space(before.mesh, cells([before, after]), "P")
    o = sp.index_vars("o")
    try:
        cell, state = p2p_cells(step, sp.generic(before, replicas_agree), before, after, sp, o)
    except VerificationError as e:
        return Outcome(Status.REFUTED, 0.0, dict(e.counterexample, global_shape=list(sp.L)), str(e))
    ext = sp.ext(after)
    uspans = sp.unreduced_spans(after)
    grid = [range(0, ext[k], cell[k]) for k in range(sp.rank)]
    cases: list[tuple[int, tuple[int, ...], z3.BoolRef]] = []
    seen: set[tuple[int, ...]] = set()
    for v in range(sp.mesh.size):
        members = _group(sp, v, uspans)
        if tuple(members) in seen:
            continue
        seen.add(tuple(members))
        dv = device_coords(sp, v)
        for off in itertools.product(*grid):
            terms = [state[(w, off)] for w in members if (w, off) in state]
            lhs = z3.Sum(terms) if terms else z3.IntVal(0)
            rhs = sp.g(sp.global_index(after, dv, tuple((off[k] + o[k][0], o[k][1]) for k in range(sp.rank))))
            cases.append((v, off, lhs != rhs))
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*[m >= 1 for m in sp.m])
    for k in range(sp.rank):
        s.add(o[k][0] >= 0, o[k][0] < cell[k], o[k][1] >= 0, o[k][1] < sp.m[k])
    s.add(z3.Or([c for _, _, c in cases]))
    done, dt, md = _solve(s)
    if done is not None:
        return done
    ms = [_val(md, m) for m in sp.m]
    bad = next((v, off) for v, off, c in cases if z3.is_true(md.eval(c, model_completion=True)))
    v, off = bad
    return Outcome(Status.REFUTED, dt, {
        "global_shape": [L * m for L, m in zip(sp.L, ms)], "device": v, "coords": sp.mesh.coords(v),
        "local_index": [(off[k] + _val(md, o[k][0])) * ms[k] + _val(md, o[k][1]) for k in range(sp.rank)],
    }, "the value differs")


__all__ = ["DEFAULT_TIMEOUT_MS", "Outcome", "Status", "check_meaning", "prove_link", "prove_p2p"]
