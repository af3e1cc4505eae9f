"""The three objectives plans are ranked by, under one set of names (Python, CLI, docs).

``measured``: least estimated time under the running backend's measured profile (the default of
``redistribute``); ``bytes``: least received bytes (the transfer lower bound first), then time
under the alpha-beta constants; ``alpha-beta``: least time under the unmeasured alpha-beta model.
What each guarantees is in docs/design.md section 4.4; ``redist.profile.cost_model_for`` builds the
model of each.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from redist.errors import CostModelError


class Objective(StrEnum):
    """What ``redistribute`` minimises. Accepted wherever an objective is: the member or its value
    (a ``str`` enum: ``Objective.BYTES == "bytes"``); any other name is a ``CostModelError``.

    Examples:
        >>> from redist import Objective, redistribute
        >>> Objective.BYTES == "bytes", Objective("alpha-beta")
        (True, <Objective.ALPHA_BETA: 'alpha-beta'>)
        >>> plan = redistribute("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4", objective="bytes")
        >>> plan.objective, plan.recv_bytes == plan.lower_bound_bytes
        (<Objective.BYTES: 'bytes'>, True)
        >>> redistribute("f32[64@x]", "f32[64]", "x=2", objective="time")
        Traceback (most recent call last):
        redist.errors.CostModelError: objective 'time' is not one of measured, bytes, alpha-beta; 'time' is ambiguous...
    """

    MEASURED = "measured"
    BYTES = "bytes"
    ALPHA_BETA = "alpha-beta"


NAMES = tuple(o.value for o in Objective)

HOW = ("'measured' (least time under the running backend's measured profile: the default; "
       "redist.cost_model_for('measured', mesh) or redist.profile.load_cost_model(path) for your own "
       "calibration), 'bytes' (least received bytes, the transfer lower bound first: "
       "redist.cost_model_for('bytes')) or 'alpha-beta' (least time under the unmeasured alpha-beta "
       "model: redist.cost_model_for('alpha-beta'))")
"""The three objectives and how to get the cost model of each, for error messages."""


def as_objective(value: Any, what: str = "objective") -> Objective:
    """``value`` as an ``Objective``, or ``CostModelError`` naming ``what`` and the accepted names."""
    if isinstance(value, Objective):
        return value
    if isinstance(value, str):
        for o in Objective:
            if value == o.value:
                return o
        hint = ""
        if value == "time":
            hint = ("; 'time' is ambiguous: least time under the measured profile is 'measured', under "
                    "the unmeasured constants 'alpha-beta'")
        raise CostModelError(f"{what} {value!r} is not one of {', '.join(NAMES)}{hint}; the objectives: {HOW}")
    raise CostModelError(f"{what} must be a redist.Objective or one of the strings {', '.join(NAMES)}, "
                         f"got {type(value).__name__}; the objectives: {HOW}")


__all__ = ["HOW", "NAMES", "Objective", "as_objective"]
