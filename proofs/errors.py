"""The error a failed proof raises: the violated property and a concrete counterexample."""

from __future__ import annotations

from typing import Any

from redist.errors import RedistError


class VerificationError(RedistError):
    """z3 refuted a property of a plan (or of a step). ``prop`` names the property (``chain``,
    ``memory``, ``recv``, ``recv_formula``, ``lower_bound``, ``budget``, ``typing``) and
    ``counterexample`` gives concrete sizes (global shape, device coordinates, local index...).

    Example:

    ```pycon
    >>> from proofs import VerificationError
    >>> from proofs.budget import require_budget
    >>> from spmd_types import Mesh
    >>> from redist import redistribute
    >>> plan = redistribute("f32[64@x]", "f32[64]", Mesh({"x": 2}))
    >>> try:
    ...     require_budget(plan, 128)
    ... except VerificationError as e:
    ...     print(e.prop, e.counterexample["bytes"] > 128)
    budget True

    ```
    """

    def __init__(self, prop: str, message: str, counterexample: dict[str, Any] | None = None) -> None:
        self.prop = prop
        self.counterexample = dict(counterexample or {})
        detail = ", ".join(f"{k}={v}" for k, v in self.counterexample.items())
        super().__init__(f"property '{prop}' violated: {message}" + (f"\n  counterexample: {detail}" if detail else ""))


class VerifyArgumentError(RedistError):
    """``verify_plan`` (``plan.verify``) called with an argument of the wrong type or range, or an
    unknown keyword: the message names it and the accepted values.

    Example:

    ```pycon
    >>> from redist import redistribute
    >>> redistribute("f32[8@x]", "f32[8]", "x=2").verify(timeout_ms=-1)
    Traceback (most recent call last):
    proofs.errors.VerifyArgumentError: timeout_ms must be a positive int (milliseconds z3 may spend per query...

    ```
    """


__all__ = ["VerificationError", "VerifyArgumentError"]
