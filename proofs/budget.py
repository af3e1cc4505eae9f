"""Memory budgets: prove that a plan fits in a given per-device memory for a range of shapes, or
refute it with the shape (and the step) that does not fit.

Live memory per device follows docs/design.md section 4 (``peak_bytes``: the largest local array of any
type along the plan); ``transient=True`` counts a step's input and output as alive together, the
stricter view of a runtime that cannot free the input before the output exists.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from proofs.errors import VerificationError, VerifyArgumentError
from proofs.link import DEFAULT_TIMEOUT_MS, _val
from proofs.measures import local_cells
from proofs.model import cells
from redist.plan import Plan


@dataclass(frozen=True)
class BudgetResult:
    """What ``check_budget`` decided: ``status`` is ``"fits"`` (proved for every shape in range),
    ``"exceeds"`` (``counterexample`` gives a global shape and the step that overflows) or
    ``"undecided"`` (z3 gave up: ``note`` says why); ``live_bytes`` are the per-device formulas
    that were checked.

    Example:

    ```pycon
    >>> import proofs
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> r = proofs.check_budget(redistribute("f32[64@x]", "f32[64]", Mesh({"x": 2})), 256)
    >>> r.status, r.fits, r.live_bytes
    ('fits', True, ('source f32[64@x]: 4*m0 B', 'after step 1 f32[64]: 8*m0 B'))

    ```
    """

    status: str  # "fits", "exceeds" or "undecided"
    budget_bytes: int
    shapes: str
    live_bytes: tuple[str, ...]
    seconds: float
    counterexample: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    def __str__(self) -> str:
        head = {"fits": "FITS", "exceeds": "DOES NOT FIT", "undecided": "UNDECIDED"}[self.status]
        lines = [f"budget {self.budget_bytes:,} B/device: {head} for all shapes {self.shapes} "
                 f"({self.seconds * 1e3:.1f} ms)"]
        lines += [f"  {x}" for x in self.live_bytes]
        if self.counterexample:
            lines.append("  counterexample: " + ", ".join(f"{k}={v}" for k, v in self.counterexample.items()))
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)


def check_budget(plan: Plan, budget_bytes: int, max_shape: Sequence[int | None] | None = None,
                 transient: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> BudgetResult:
    """Does ``plan`` fit in ``budget_bytes`` per device for every global shape its types allow with
    ``n_d <= max_shape[d]`` (default: the plan's own shape; ``None``: unbounded)? ``transient=True``
    counts a step's input and output as live together. Example:

    ```pycon
    >>> from proofs import check_budget; from redist import redistribute
    >>> plan = redistribute("f32[64@x]", "f32[64]", "x=2")  # 128 B, then 256 B per device
    >>> check_budget(plan, 256).fits, check_budget(plan, 128).status
    (True, 'exceeds')

    ```
    :raises VerificationError: (property ``budget``) when ``max_shape`` does not have the plan's rank."""
    types = plan.all_types
    rank, itemsize = plan.src.rank, plan.src.itemsize
    budget_bytes = _check_arguments(plan, budget_bytes, max_shape, transient, timeout_ms)
    L = cells(list(types) + [plan.dst])
    bounds = list(plan.src.shape) if max_shape is None else list(max_shape)
    ms = [z3.Int(f"m{d}") for d in range(rank)]
    M: Any = z3.IntVal(1)
    for m in ms:
        M = M * m
    live: list[tuple[str, int]] = []  # (what, cells)
    if transient and plan.steps:
        for i, s in enumerate(plan.steps):
            live.append((f"step {i + 1} ({s}): input + output",
                         local_cells(types[i], L) + local_cells(types[i + 1], L)))
    else:
        live += [(f"{'source' if i == 0 else f'after step {i}'} {t}", local_cells(t, L)) for i, t in enumerate(types)]
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    for d, m in enumerate(ms):
        s.add(m >= 1)
        b = bounds[d]
        if b is not None:
            s.add(m <= int(b) // L[d])
    s.add(z3.Or([c * itemsize * M > int(budget_bytes) for _, c in live]))
    dom = ", ".join(f"n{d} = {L[d]}*m{d}" + ("" if bounds[d] is None else f" <= {bounds[d]}") for d in range(rank))
    mono = "*".join(f"m{d}" for d in range(rank))
    texts = tuple(f"{w}: {c * itemsize}{'*' + mono if mono else ''} B" for w, c in live)
    t0 = time.perf_counter()
    r = s.check()
    dt = time.perf_counter() - t0
    if any(b is not None and int(b) < L[d] for d, b in enumerate(bounds)):
        return BudgetResult("fits", budget_bytes, dom, texts, dt, note="no shape in range: trivially fits")
    if r == z3.unsat:
        return BudgetResult("fits", budget_bytes, dom, texts, dt)
    if r == z3.unknown:
        return BudgetResult("undecided", budget_bytes, dom, texts, dt, note=f"z3: {s.reason_unknown()}")
    md = s.model()
    vals = [_val(md, m) for m in ms]
    prod = math.prod(vals)
    worst = max(live, key=lambda x: x[1])
    over = [w for w, c in live if c * itemsize * prod > budget_bytes]
    return BudgetResult("exceeds", budget_bytes, dom, texts, dt, {
        "global_shape": [Ld * m for Ld, m in zip(L, vals)],
        "bytes": worst[1] * itemsize * prod, "at": over[0] if over else worst[0],
    })


def _check_arguments(plan: Plan, budget_bytes: object, max_shape: object, transient: object,
                     timeout_ms: object) -> int:
    """``check_budget``'s arguments, or ``VerifyArgumentError`` naming the one that is wrong; the
    budget as an int (a float such as ``16e9`` is accepted when it is a whole number)."""
    whole = isinstance(budget_bytes, float) and budget_bytes.is_integer()
    if isinstance(budget_bytes, bool) or not (isinstance(budget_bytes, int) or whole) or budget_bytes < 0:  # type: ignore[operator]
        raise VerifyArgumentError(f"budget_bytes must be a whole number of bytes >= 0 (e.g. 16 * 2**30), got {budget_bytes!r}")
    if max_shape is not None:
        dims = list(max_shape) if isinstance(max_shape, (list, tuple)) else None
        if dims is None or len(dims) != plan.src.rank or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 1) for d in dims):
            raise VerifyArgumentError(f"max_shape must be a list of {plan.src.rank} sizes >= 1 or None (unbounded), "
                                      f"one per dimension of {plan.src}, got {max_shape!r}")
    if not isinstance(transient, bool):
        raise VerifyArgumentError(f"transient must be True or False, got {transient!r}")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise VerifyArgumentError(f"timeout_ms must be a positive int (milliseconds for z3), got {timeout_ms!r}")
    return int(budget_bytes)  # type: ignore[call-overload]


def require_budget(plan: Plan, budget_bytes: int, **kwargs: Any) -> BudgetResult:
    """``check_budget`` that raises ``VerificationError('budget')`` unless the fit is proved.

    Example:

    ```pycon
    >>> from proofs.budget import require_budget
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> plan = redistribute("f32[2048@x,2048@y]", "f32[2048@y,2048@x]", Mesh({"x": 2, "y": 4}))
    >>> require_budget(plan, 1 << 20)
    Traceback (most recent call last):
    proofs.errors.VerificationError: property 'budget' violated: plan does not provably fit in 1,048,576 B/device (exceeds)...

    ```

    :raises VerificationError: unless the fit is proved (``exceeds`` or ``undecided``).
    """
    r = check_budget(plan, budget_bytes, **kwargs)
    if r.status != "fits":
        raise VerificationError("budget", f"plan does not provably fit in {budget_bytes:,} B/device ({r.status})",
                                r.counterexample)
    return r


__all__ = ["BudgetResult", "check_budget", "require_budget"]
