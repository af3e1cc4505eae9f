"""One analysis of a function for one input signature: trace, rules, tactics with propagation,
lowering. Kept apart from ``api`` so ``explain`` can read it without importing the front end."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partir_core.ir import Program, trace
from partir_core.lower import Lowered, lower
from partir_core.propagate import Conflict, Propagator
from partir_core.rules import Rule, rules_for
from partir_core.tactics import Tactic, TacticRecord, apply_schedule
from spmd_types import Mesh


@dataclass(frozen=True, eq=False)
class Analysis:
    """Everything the partitioner decided for one input signature."""

    program: Program
    rules: tuple[Rule, ...]
    records: tuple[TacticRecord, ...]
    conflicts: tuple[Conflict, ...]
    lowered: Lowered


def analyze(fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic], args: Sequence[Any],
            unknown: str = "error") -> Analysis:
    program = trace(fn, *args)
    rules = rules_for(program, unknown)
    prop = Propagator(program, mesh, rules)
    records = apply_schedule(program, mesh, prop, schedule)
    low = lower(program, mesh, rules, prop.layouts)
    return Analysis(program, rules, tuple(records), tuple(prop.conflicts.values()), low)
