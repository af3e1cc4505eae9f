"""One analysis of a function for one input signature: trace, rules, tactics with propagation,
lowering. Kept apart from ``api`` so ``explain`` can read it without importing the front end."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partir_core.decide import Lowered, lower
from partir_core.ir import Program, trace
from partir_core.propagate import Conflict, Propagator
from partir_core.rules import Rule, rules_for
from partir_core.tactics import Tactic, TacticRecord, apply_schedule
from spmd_types import Mesh


@dataclass(frozen=True, eq=False)
class Analysis:
    """Everything the partitioner decided for one input signature: the traced ``program``, the
    sharding ``rules`` used, one record per tactic, the propagation ``conflicts`` and the
    ``lowered`` program (its input and output types, and the moves ``redist`` plans).

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, analyze
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> schedule = [Shard("x", dim=0, axis="data"), Shard("w", dim=1, axis="model")]
        >>> a = analyze(f, Mesh({"data": 2, "model": 4}), schedule, (x, w))
        >>> [str(t) for t in a.lowered.out_types], len(a.records), a.conflicts
        (['f32[8@data,32@model]'], 2, ())
    """

    program: Program
    rules: tuple[Rule, ...]
    records: tuple[TacticRecord, ...]
    conflicts: tuple[Conflict, ...]
    lowered: Lowered


def analyze(fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic], args: Sequence[Any],
            unknown: str = "error") -> Analysis:
    """What ``partition(fn, mesh, schedule)`` decides for ``args`` (arrays or
    ``jax.ShapeDtypeStruct`` s), without compiling or running anything: trace, apply the tactics
    with propagation after each, lower. ``unknown`` as in ``partition``.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from partir_core import Shard, analyze
        >>> from spmd_types import Mesh
        >>> args = (jax.ShapeDtypeStruct((8, 16), jnp.float32), jax.ShapeDtypeStruct((16, 32), jnp.float32))
        >>> a = analyze(lambda x, w: x @ w, Mesh({"data": 2}), [Shard("x", dim=0, axis="data")], args)
        >>> [str(t) for t in a.lowered.in_types + a.lowered.out_types]
        ['f32[8@data,16]', 'f32[16,32]', 'f32[8@data,32]']

    Raises:
        PartitionError: a tactic the program refuses (the subclass names the input, axis or
            dimension), or a primitive without a sharding rule under ``unknown="error"``.
    """
    program = trace(fn, *args)
    rules = rules_for(program, unknown)
    prop = Propagator(program, mesh, rules)
    records = apply_schedule(program, mesh, prop, schedule)
    low = lower(program, mesh, rules, prop.layouts)
    return Analysis(program, rules, tuple(records), tuple(prop.conflicts.values()), low)
