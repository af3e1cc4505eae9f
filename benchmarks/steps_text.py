"""Plans written by their steps: ``repr(plan.steps)`` read back as the steps it names.

Why: a timing file (``studies.plan_ab``) or a measurement file (``pricing_heldout``) records plans as
text, so they can be rebuilt and timed again without the planner that made them. Only calls of step
classes (and ``SubAxis``) on literals are read: nothing is ``eval``-ed.
"""

from __future__ import annotations

import ast
from typing import Any

from redist.errors import RedistError
from redist.steps import ALL_STEPS, Step
from spmd_types import SubAxis

_NAMES: dict[str, Any] = {cls.__name__: cls for cls in ALL_STEPS} | {"SubAxis": SubAxis}


def parse_steps(text: str) -> tuple[Step, ...]:
    """The steps ``repr(plan.steps)`` printed: calls of step classes (and ``SubAxis``) on literals,
    keyword or positional, nothing else (no ``eval`` of arbitrary code). A ``RedistError`` names
    what else it met."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise RedistError(f"steps {text!r} do not parse: {e.msg}") from None
    value = _value(tree, text)
    steps = value if isinstance(value, tuple) else (value,)
    if not all(isinstance(s, ALL_STEPS) for s in steps):
        raise RedistError(f"steps {text!r}: expected a tuple of steps, got {value!r}")
    return steps


def _value(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NAMES:
        args = [_value(a, text) for a in node.args]
        kwargs = {k.arg: _value(k.value, text) for k in node.keywords if k.arg is not None}
        try:
            return _NAMES[node.func.id](*args, **kwargs)
        except (TypeError, ValueError) as e:  # a wrong or missing argument: say which call
            raise RedistError(f"steps {text!r}: {ast.unparse(node)!r}: {e}") from None
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e, text) for e in node.elts)
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (int, str))):
        return node.value
    raise RedistError(f"steps {text!r}: {ast.unparse(node)!r} is not a step, a sub-axis or a literal; "
                      f"steps are written as repr(plan.steps) prints them")
