"""One link of a proof chain: "after this step, the data is what the next type says"."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import z3

from proofs.errors import VerificationError
from proofs.model import Arr, Space, cells
from proofs.p2p import AtomTable, Verdict, compare, run_moves
from proofs.steps_semantics import apply_step, device_coords, schedule_moves
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
    NOT_CHECKED = "not checked"
    """A property the certificate did not try to prove (``Certificate.unchecked``): never counted as proved."""


@dataclass(frozen=True)
class Outcome:
    """``status`` is proved, refuted or undecided (z3 gave up: ``reason`` says why); a refuted
    outcome's ``counterexample`` gives concrete sizes (global shape, local shapes, coordinates).
    ``prove_link`` returns one.

    Examples:
        >>> from proofs import prove_link
        >>> from redist import redistribute
        >>> plan = redistribute("f32[8@x]", "f32[8]", "x=2")
        >>> outcome = prove_link(plan.steps[0], plan.src, plan.dst)
        >>> outcome.status.value, outcome.counterexample
        ('proved', {})
    """

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
    shape both types allow, hence inside any plan. Cached: links recur across plans.

    Example:

    ```pycon
    >>> from proofs import prove_link
    >>> from spmd_types import Mesh, parse
    >>> from redist import AllGather
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> gather = AllGather(0, ("x",))
    >>> prove_link(gather, parse("f32[8@x,8@y]", mesh), parse("f32[8,8@y]", mesh)).status
    <Status.PROVED: 'proved'>
    >>> wrong = prove_link(gather, parse("f32[8@x,8@y]", mesh), parse("f32[8,8]", mesh))
    >>> wrong.status, wrong.counterexample["global_shape"]
    (<Status.REFUTED: 'refuted'>, [2, 4])

    ```

    A refutation is returned, not raised (``verify_plan`` turns it into a ``VerificationError``).
    """
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


def _p2p_cases(step: Step, before: ShardingType, after: ShardingType, sp: Space, replicas_agree: bool) -> Verdict:
    """Run the schedule on atom rows and compare every destination with NumPy (``proofs.p2p``)."""
    sp.generic(before, replicas_agree)  # registers the partials' function that the atoms name
    fi = sp.n_partials - 1 if sp.unreduced_spans(before) else None
    table = AtomTable.of(sp, before, fi, replicas_agree)
    cell, moves = schedule_moves(step, before, after, sp)
    return compare(sp, after, cell, run_moves(step, cell, moves, table, sp.ext(after)), table)


def prove_p2p(step: Step, before: ShardingType, after: ShardingType, timeout_ms: int = DEFAULT_TIMEOUT_MS,
              replicas_agree: bool = False) -> Outcome:
    """A ``Permute``/``Exchange`` instance: at every destination (device, cell) the cells the
    schedule adds there (summed over the unreduced group when ``after`` has one) are the elements
    ``after`` says; the offset inside the cell and the sizes ``m_d`` stay symbolic.

    The schedule runs on atom codes (``proofs.p2p``: NumPy rows, no Python work per device or
    cell) and every destination is compared exactly, so z3 gets a bounded number of cases
    whatever the mesh: one right destination (its atoms realised as z3 terms must mean ``after``
    for all in-cell offsets and sizes) and, for a wrong schedule, the first wrong destination,
    which z3 refutes with a concrete device, local index and shape."""
    sp = Space(before.mesh, cells([before, after]), "P")
    o = sp.index_vars("o")
    try:
        verdict = _p2p_cases(step, before, after, sp, replicas_agree)
    except VerificationError as e:
        return Outcome(Status.REFUTED, 0.0, dict(e.counterexample, global_shape=list(sp.L)), str(e), 0)
    cases = []
    for case in (verdict.bad, verdict.good):
        if case is None:
            continue
        device, off, lin = case
        at = tuple((off[k] + o[k][0], o[k][1]) for k in range(sp.rank))
        cases.append((device, off, sp.realize(lin, o) != sp.g(sp.global_index(after, device_coords(sp, device), at))))
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    s.add(*[m >= 1 for m in sp.m])
    for k in range(sp.rank):
        s.add(o[k][0] >= 0, o[k][0] < verdict.cell[k], o[k][1] >= 0, o[k][1] < sp.m[k])
    s.add(z3.Or([c for _, _, c in cases]))
    done, dt, md = _solve(s)
    if done is not None:
        if done.status is Status.PROVED and verdict.bad is not None:  # NumPy and z3 disagree: never hidden
            return Outcome(Status.UNDECIDED, dt, reason="z3 proves a destination the atom comparison rejects",
                           cases=len(cases))
        return Outcome(done.status, done.seconds, done.counterexample, done.reason, len(cases))
    ms = [_val(md, m) for m in sp.m]
    device, off, _ = next((d, f, c) for d, f, c in cases if z3.is_true(md.eval(c, model_completion=True)))
    return Outcome(Status.REFUTED, dt, {
        "global_shape": [L * m for L, m in zip(sp.L, ms)], "device": device, "coords": sp.mesh.coords(device),
        "local_index": [(off[k] + _val(md, o[k][0])) * ms[k] + _val(md, o[k][1]) for k in range(sp.rank)],
    }, "the value differs", len(cases))


__all__ = ["DEFAULT_TIMEOUT_MS", "Outcome", "Status", "check_meaning", "prove_link", "prove_p2p"]
