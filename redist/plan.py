"""``Plan``: plain data, a sequence of typed steps from a source to a destination type, with its
measures.

Running a plan is the executor's job (``redist.executor.run_plan``) and certifying it the proofs
layer's (``proofs.verify_plan``), and writing it in words the renderer's (``redist.render``).
``plan(x)``, ``plan.verify()`` and ``str(plan)`` remain as conveniences through an explicit
registration, each made once by the module above that owns it: ``redist.jax_reshard`` registers
the runner (eager arrays and tracers alike), ``redist.render`` the formatter (``import redist``
imports both) and ``proofs`` the verifier. So this vocabulary imports no executor, renderer or
prover, and ``redist`` never imports ``proofs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redist.bounds import lower_bound_bytes
from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.device_recv import lower_bound_bytes_max, step_recv_max
from redist.errors import RedistError
from redist.facets import FacetTable
from redist.measure import StepMeasure, measure
from redist.objective import Objective
from redist.steps import ALL_STEPS, Exchange, Step
from spmd_types import ShardingType
from spmd_types.memo import Scope, cached_property, memo

_HOOKS: dict[str, Callable[..., Any]] = {}


def _register(hook: str, fn: Callable[..., Any]) -> None:
    """One owner per hook: a second, different registration is a ``RedistError`` (it would
    silently replace the first)."""
    if _HOOKS.get(hook, fn) is not fn:
        raise RedistError(f"the plan's {hook} hook is registered already (by {_HOOKS[hook].__module__}); "
                          f"one module owns it")
    _HOOKS[hook] = fn


def register_runner(fn: Callable[[Plan, Any], Any]) -> None:
    """``plan(x)`` calls ``fn(plan, x)`` (``redist.jax_reshard`` registers itself)."""
    _register("run", fn)


def register_verifier(fn: Callable[..., Any]) -> None:
    """``plan.verify(**kw)`` calls ``fn(plan, **kw)`` (``import proofs`` registers it)."""
    _register("verify", fn)


def register_formatter(fn: Callable[[Plan], str]) -> None:
    """``str(plan)`` returns ``fn(plan)`` (``redist.render`` registers ``format_plan``)."""
    _register("format", fn)


EXCHANGES: FacetTable[int] = FacetTable("exchanges counted", "redist.plan.EXCHANGES")
"""How many generic exchanges a step counts as in ``Plan.key``'s tie-break: 1 for ``Exchange``,
0 for typed steps, ``ExchangeAllToAll`` included (it runs as one typed all-to-all)."""
EXCHANGES.register(Exchange)(1)
EXCHANGES.register(*(c for c in ALL_STEPS if c is not Exchange))(0)


@memo(Scope.TYPE, maxsize=1 << 16)
def apply_step(step: Step, t: ShardingType) -> ShardingType:
    """``step.apply(t)``, memoised: the planner's candidate plans share most of their steps."""
    return step.apply(t)


@memo(Scope.TYPE, maxsize=1 << 16)
def measure_step(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> StepMeasure:
    """``measure``, memoised for the same reason."""
    return measure(step, before, after, cm)


@dataclass(frozen=True)
class Plan:
    """A redistribution: ``steps`` take ``src`` to ``dst`` through ``types`` (the type after each
    step), ranked under ``cost_model`` (its ``objective``). Call it on a ``jax.Array`` laid out as
    ``src``; its measures are per device: ``recv_bytes`` the mean over devices, ``recv_bytes_max``
    the busiest device's.

    Example:
        >>> from redist import redistribute
        >>> from spmd_types import Mesh
        >>> plan = redistribute("f32[1024@x,1024@y]", "f32[1024@y,1024@x]", Mesh({"x": 2, "y": 4}), objective="bytes")
        >>> [s.kind for s in plan.steps], plan.recv_bytes == plan.lower_bound_bytes, plan.peak_bytes
        (['exchange'], True, 524288)
    """

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

    def prefix(self, k: int) -> Plan:
        """The first ``k`` steps as a plan, sharing this plan's measures where they are computed
        already (the synthesizer reads the cost of every prefix of every candidate)."""
        p = Plan(self.src, self.types[k - 1] if k else self.src, self.steps[:k], self.types[:k], self.cost_model)
        if "measures" in self.__dict__:
            p.__dict__["measures"] = self.measures[:k]
        return p

    def with_step(self, i: int, step: Step) -> Plan:
        """This plan with step ``i`` run as ``step``, which must type the same (a variant: the
        same types, so only step ``i`` is measured again)."""
        p = Plan(self.src, self.dst, self.steps[:i] + (step,) + self.steps[i + 1:], self.types, self.cost_model)
        if "measures" in self.__dict__:
            ts = self.all_types
            m = measure_step(step, ts[i], ts[i + 1], self.cost_model)
            p.__dict__["measures"] = self.measures[:i] + (m,) + self.measures[i + 1:]
        return p

    @property
    def objective(self) -> Objective:
        """The objective the plan was ranked by: its ``cost_model``'s (``redist.Objective``)."""
        return Objective(self.cost_model.objective)

    @property
    def all_types(self) -> tuple[ShardingType, ...]:
        return (self.src,) + self.types

    @cached_property
    def measures(self) -> tuple[StepMeasure, ...]:
        ts = self.all_types
        return tuple(measure_step(s, ts[i], ts[i + 1], self.cost_model) for i, s in enumerate(self.steps))

    @cached_property
    def peak_bytes(self) -> int:
        """The largest local array of any type along the plan (bytes per device)."""
        return max(t.local_bytes for t in self.all_types)

    @property
    def memory_bound_bytes(self) -> int:
        """``max(local bytes of src, local bytes of dst)``: what ``peak_bytes`` never exceeds."""
        return max(self.src.local_bytes, self.dst.local_bytes)

    @cached_property
    def recv_bytes(self) -> float:
        """Bytes received per device over the whole plan, the mean over devices (docs/design.md
        section 4): what the objectives and the transfer bound count. ``recv_bytes_max`` is the
        busiest device's."""
        return float(sum(m.recv_bytes for m in self.measures))

    @property
    def recv_bytes_mean(self) -> float:
        """``recv_bytes``, named for what it is beside ``recv_bytes_max``."""
        return self.recv_bytes

    @property
    def step_recv_bytes_mean(self) -> tuple[float, ...]:
        """Per step, the bytes received per device, the mean over devices (``measures``)."""
        return tuple(m.recv_bytes for m in self.measures)

    @cached_property
    def step_recv_bytes_max(self) -> tuple[float, ...]:
        """Per step, the bytes the busiest device receives (``redist.device_recv``); where it
        equals the step's mean every device receives alike."""
        ts = self.all_types
        return tuple(step_recv_max(s, ts[i], ts[i + 1], m) for i, (s, m) in enumerate(zip(self.steps, self.measures)))

    @cached_property
    def recv_bytes_max(self) -> float:
        """The busiest device's bytes of each step, summed over the steps (each step lasts as long
        as its busiest device): at least what any one device receives over the plan."""
        return float(sum(self.step_recv_bytes_max))

    @cached_property
    def lower_bound_bytes_max(self) -> float:
        """What the busiest device must receive at least (``redist.device_recv.lower_bound_bytes_max``):
        the per-device bound ``recv_bytes_max`` is compared with."""
        return lower_bound_bytes_max(self.src, self.dst)

    @cached_property
    def time_s(self) -> float:
        """Estimated seconds under the plan's ``cost_model`` (alpha-beta, per-axis)."""
        return float(sum(m.time_s for m in self.measures))

    @cached_property
    def lower_bound_bytes(self) -> float:
        """What a device must receive because it does not hold it, the mean over devices (``redist.bounds``)."""
        return lower_bound_bytes(self.src, self.dst)

    @cached_property
    def n_collectives(self) -> int:
        """Collective ops the plan runs: one per typed collective, one per round of a point-to-point
        step (each round is a ``collective-permute``), so typed collectives win honest ties."""
        return sum(m.collectives for m in self.measures)

    def collectives(self) -> list[tuple[str, float, float]]:
        """(kind, recv_bytes, time_s) of every step that communicates."""
        return [(s.kind, m.recv_bytes, m.time_s) for s, m in zip(self.steps, self.measures) if m.rounds > 0]

    def key(self) -> tuple[float, float, int, int, int]:
        """The order of preference between plans of one move, shared by the synthesizer, the
        reference search and the tests: under the bytes objective least bytes, then least time
        (the time objectives, ``measured`` and ``alpha-beta``, swap them), then fewest collectives;
        typed steps win the remaining ties (fewest exchanges, then fewest steps)."""
        return self._key

    @cached_property
    def _key(self) -> tuple[float, float, int, int, int]:
        """``key``, computed once: the synthesizer compares candidates many times (plans are immutable)."""
        n_exchanges = sum(EXCHANGES[type(s)] for s in self.steps)
        return (*self.cost_model.order(self.recv_bytes, self.time_s), self.n_collectives, n_exchanges,
                len(self.steps))

    def __call__(self, x: Any) -> Any:
        """Run on a ``jax.Array`` laid out as ``src`` (``redist.executor.run_plan``)."""
        if "run" not in _HOOKS:  # pragma: no cover - `import redist` registers it
            raise RedistError("no plan runner is registered: `import redist` registers the JAX executor "
                              "(redist.jax_reshard), or call redist.executor.run_plan(plan, x)")
        return _HOOKS["run"](self, x)

    def verify(self, *args: Any, **kwargs: Any) -> Any:
        """A z3 certificate of correctness and the memory bound, and of the transfer bound where
        the plan's objective promises it or ``check_recv=True`` (``proofs.verify_plan``)."""
        if "verify" not in _HOOKS:
            raise RedistError("plan.verify() needs the proofs layer: `import proofs` registers it "
                              "(or call proofs.verify_plan(plan))")
        return _HOOKS["verify"](self, *args, **kwargs)

    def __str__(self) -> str:
        """Each step in words with its bytes and collectives, then the totals (``redist.render``)."""
        if "format" not in _HOOKS:  # pragma: no cover - `import redist` registers it
            raise RedistError("no plan formatter is registered: `import redist` registers redist.render")
        return str(_HOOKS["format"](self))
