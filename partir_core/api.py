"""``partition(fn, mesh, schedule)``: trace, apply tactics with propagation, lower, run.

Tracing needs concrete shapes, so the work happens on the first call (or ``trace(*args)`` with
arrays or ``jax.ShapeDtypeStruct``s), cached per input signature like ``jax.jit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partir_core.ir import Program, trace
from partir_core.lower import Lowered, compile_lowered, lower
from partir_core.propagate import Conflict, Propagator
from partir_core.rules import Rule, rule_for
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
    rules = tuple(rule_for(op, unknown) for op in program.ops)
    prop = Propagator(program, mesh, rules)
    records = apply_schedule(program, mesh, prop, schedule)
    low = lower(program, mesh, rules, prop.layouts)
    return Analysis(program, rules, tuple(records), tuple(prop.conflicts.values()), low)


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    import jax
    import numpy as np

    leaves, tree = jax.tree_util.tree_flatten(args)
    return (tree,) + tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x)))) for x in leaves)


class Partitioned:
    """A function partitioned by a schedule; call it like the original."""

    def __init__(self, fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic], unknown: str = "error") -> None:
        if unknown not in ("error", "replicate"):
            raise ValueError(f"unknown= must be 'error' or 'replicate', got {unknown!r}")
        self.fn, self.mesh, self.schedule, self.unknown = fn, mesh, tuple(schedule), unknown
        self._cache: dict[Any, tuple[Analysis, Any]] = {}
        self._last: Analysis | None = None

    def trace(self, *args: Any) -> Analysis:
        key = _signature(args)
        if key not in self._cache:
            self._cache[key] = (analyze(self.fn, self.mesh, self.schedule, args, self.unknown), None)
        self._last = self._cache[key][0]
        return self._last

    def _compiled(self, *args: Any) -> tuple[Analysis, Any]:
        a = self.trace(*args)
        key = _signature(args)
        if self._cache[key][1] is None:
            self._cache[key] = (a, compile_lowered(a.lowered, fn_mesh(self.mesh)))
        return self._cache[key]

    def __call__(self, *args: Any) -> Any:
        import jax

        from spmd_types.jax_interop import to_named_sharding

        a, fn = self._compiled(*args)
        jmesh = fn_mesh(self.mesh)
        leaves = jax.tree_util.tree_leaves(args)
        placed = [jax.device_put(x, to_named_sharding(t, jmesh)) for x, t in zip(leaves, a.lowered.in_types)]
        outs = fn(*placed)
        return jax.tree_util.tree_unflatten(a.program.out_tree, list(outs))

    def lower_text(self, *args: Any) -> str:
        """The StableHLO text of the partitioned program (what the collective counts are read from)."""
        import jax

        from spmd_types.dtypes import numpy_dtype
        from spmd_types.jax_interop import to_named_sharding

        a, fn = self._compiled(*args)
        jmesh = fn_mesh(self.mesh)
        specs = [jax.ShapeDtypeStruct(t.shape, numpy_dtype(t.dtype), sharding=to_named_sharding(t, jmesh))  # type: ignore[arg-type]
                 for t in a.lowered.in_types]
        return str(fn.lower(*specs).as_text())

    @property
    def analysis(self) -> Analysis:
        if self._last is None:
            raise RuntimeError("call the partitioned function (or .trace(*args)) first: shapes come from the inputs")
        return self._last

    def simulate(self) -> Any:
        from partir_core.simulate import simulate

        return simulate(self.analysis.lowered)

    def explain(self) -> str:
        from partir_core.explain import explain

        return explain(self.analysis)


_JMESH: dict[Mesh, Any] = {}


def fn_mesh(mesh: Mesh) -> Any:
    """One ``jax.sharding.Mesh`` per our mesh, shared by placement and the compiled program."""
    if mesh not in _JMESH:
        _JMESH[mesh] = mesh.to_jax()
    return _JMESH[mesh]


def partition(fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic], *, unknown: str = "error") -> Partitioned:
    """Partition ``fn`` over ``mesh`` following ``schedule`` (tactics applied in order).

    ``unknown="replicate"`` runs primitives without a rule on whole (gathered) arrays instead of
    raising ``UnknownPrimitiveError``.
    """
    return Partitioned(fn, mesh, schedule, unknown)
