"""``Plan``: a sequence of typed steps from a source to a destination type, with its measures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from redist.bounds import lower_bound_bytes
from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.measure import StepMeasure, measure
from redist.steps import Step
from spmd_types import ShardingType

_VERIFIER: list[Callable[..., Any]] = []


@lru_cache(maxsize=1 << 16)
def apply_step(step: Step, t: ShardingType) -> ShardingType:
    """``step.apply(t)``, memoised: the planner's candidate plans share most of their steps."""
    return step.apply(t)


@lru_cache(maxsize=1 << 16)
def measure_step(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """``measure``, memoised for the same reason."""
    return measure(step, before, after, cm)


def register_verifier(fn: Callable[..., Any]) -> None:
    """Installed by ``proofs`` (a higher layer) so ``Plan.verify`` works without redist importing it."""
    _VERIFIER[:] = [fn]


@dataclass(frozen=True)
class Plan:
    src: ShardingType
    dst: ShardingType
    steps: tuple[Step, ...]
    types: tuple[ShardingType, ...]  # the type after each step
    cost_model: CostModel = field(default=DEFAULT_COST_MODEL, compare=False)

    @staticmethod
    def build(src: ShardingType, steps: tuple[Step, ...], cost_model: CostModel = DEFAULT_COST_MODEL) -> Plan:
        """Apply the typing rules of ``steps`` from ``src`` (raises ``StepError`` on misuse)."""
        types = []
        cur = src
        for s in steps:
            cur = apply_step(s, cur)
            types.append(cur)
        return Plan(src, cur, tuple(steps), tuple(types), cost_model)

    @property
    def all_types(self) -> tuple[ShardingType, ...]:
        return (self.src,) + self.types

    @cached_property
    def measures(self) -> tuple[StepMeasure, ...]:
        ts = self.all_types
        return tuple(measure_step(s, ts[i], ts[i + 1], self.cost_model) for i, s in enumerate(self.steps))

    @property
    def peak_bytes(self) -> int:
        return max(t.local_bytes for t in self.all_types)

    @property
    def memory_bound_bytes(self) -> int:
        return max(self.src.local_bytes, self.dst.local_bytes)

    @property
    def recv_bytes(self) -> float:
        return float(sum(m.recv_bytes for m in self.measures))

    @property
    def time_s(self) -> float:
        return float(sum(m.time_s for m in self.measures))

    @cached_property
    def lower_bound_bytes(self) -> float:
        return lower_bound_bytes(self.src, self.dst)

    @property
    def n_collectives(self) -> int:
        """Collective ops the plan runs: one per typed collective, one per round of a point-to-point
        step (each round is a ``collective-permute``), so typed collectives win honest ties."""
        n = 0
        for s, m in zip(self.steps, self.measures):
            if s.is_collective and m.rounds > 0:
                n += m.rounds if s.kind in ("exchange", "permute") else 1
        return n

    def collectives(self) -> list[tuple[str, float, float]]:
        """(kind, recv_bytes, time_s) of every step that communicates."""
        return [(s.kind, m.recv_bytes, m.time_s) for s, m in zip(self.steps, self.measures) if m.rounds > 0]

    def __call__(self, x: Any) -> Any:
        """Run on ``x`` laid out as ``src``: eagerly one compiled program; a tracer (under jit, grad,
        vmap...) goes through ``redist.reshard``'s primitive."""
        import jax

        if isinstance(x, jax.core.Tracer):
            from redist.reshard import run_traced

            return run_traced(self, x)
        from redist.executor import run_plan

        return run_plan(self, x)

    def verify(self, **kwargs: Any) -> Any:
        """A z3 certificate of correctness and of the memory and transfer bounds (see ``proofs``)."""
        if not _VERIFIER:
            import importlib

            importlib.import_module("proofs")  # registers itself; a plug-in, not a layer dependency
        return _VERIFIER[0](self, **kwargs)

    def __str__(self) -> str:
        lines = [f"plan {self.src} -> {self.dst}  ({len(self.steps)} steps, mesh {self.src.mesh})"]
        for i, (s, t, m) in enumerate(zip(self.steps, self.types, self.measures)):
            lines.append(
                f"  {i + 1}. {str(s):<48} -> {str(t):<28} recv {m.recv_bytes:>12,.1f} B"
                f"  local {t.local_bytes:,} B"
            )
        lines.append(
            f"  recv {self.recv_bytes:,.1f} B/device (lower bound {self.lower_bound_bytes:,.1f}), "
            f"peak {self.peak_bytes:,} B (bound {self.memory_bound_bytes:,}), "
            f"time {self.time_s * 1e6:.2f} us, {self.n_collectives} collectives"
        )
        return "\n".join(lines)
