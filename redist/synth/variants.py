"""Variants (``VARIANTS``): other steps with the same typing effect, tried on candidate plans and on
the chosen plan under the cost model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from redist.cost import CostModel
from redist.errors import StepError
from redist.facets import FacetTable
from redist.measure import StepMeasure
from redist.plan import Plan, apply_step, measure_step
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from redist.synth.ranking import Best
from spmd_types import ShardingType


def variant_measures(step: Step, before: ShardingType, after: ShardingType, cm: CostModel) -> Iterator[StepMeasure]:
    """The measures of ``step``'s variants (``VARIANTS``) between the same types, but those that
    refuse them (``ExchangeAllToAll`` of an irregular exchange)."""
    for v in VARIANTS[type(step)](step):
        try:
            yield measure_step(v, before, after, cm)
        except StepError:
            continue


def variant_heads(head: Plan) -> Iterator[Plan]:
    """``head`` and each copy of it with one step run another way (``VARIANTS``; same types, so
    only that step is measured again). Each is an exchange start of its own: the floor that
    prunes an exchange after ``head`` counts ``head``'s own time, so it bounds neither the
    exchange after a faster variant of ``head`` nor, therefore, the variants ``step_variants``
    would try on that exchange (docs/design.md 6.2)."""
    yield head
    for i, step in enumerate(head.steps):
        for v in VARIANTS[type(step)](step):
            yield head.with_step(i, v)


Variants = Callable[[Step], tuple[Step, ...]]


VARIANTS: FacetTable[Variants] = FacetTable("variants", "redist.synth.VARIANTS")
"""Other steps with the same typing effect (other ways to run the step), tried on the chosen plan."""


@VARIANTS.register(DynSlice, AllGather, AllToAll, MultiAllToAll, AllReduce, Discard, PadUnreduced, Permute)
def _no_variants(step: Step) -> tuple[Step, ...]:
    return ()


@VARIANTS.register(ReduceScatter)
def _as_all_reduce_slice(step: Step) -> tuple[Step, ...]:
    return (AllReduceSlice(step.dim, step.axes),)  # type: ignore[attr-defined]


@VARIANTS.register(AllReduceSlice)
def _as_reduce_scatter(step: Step) -> tuple[Step, ...]:
    return (ReduceScatter(step.dim, step.axes),)  # type: ignore[attr-defined]


@VARIANTS.register(Exchange)
def _as_exchange_all_to_all(step: Step) -> tuple[Step, ...]:
    """The same cells as one all-to-all instead of ``ppermute`` rounds (``redist.exchange_a2a``)."""
    return (ExchangeAllToAll(step.dims, step.unreduced),)  # type: ignore[attr-defined]


@VARIANTS.register(ExchangeAllToAll)
def _as_exchange(step: Step) -> tuple[Step, ...]:
    """The same cells in ``ppermute`` rounds instead of one all-to-all."""
    return (Exchange(step.dims, step.unreduced),)  # type: ignore[attr-defined]


def step_variants(plan: Plan, best: Best) -> None:
    """Each candidate with one step swapped for a variant: a candidate that loses as written may
    win run another way (``unreduced_to_hidden``: reduce-scatter onto hidden loses to a
    reduce-scatter + exchange, all-reduce + slice onto hidden beats both)."""
    for i, step in enumerate(plan.steps):
        for v in VARIANTS[type(step)](step):
            _consider_variant(best, plan, i, v)


def _consider_variant(best: Best, plan: Plan, i: int, v: Step) -> None:
    """``plan`` with step ``i`` run as ``v``: where ``v`` types as the step did (a variant does),
    the other steps' types and measures are ``plan``'s own, so only ``v`` is measured. A variant
    may refuse the types it is given (``ExchangeAllToAll`` of an irregular exchange)."""
    ts = plan.all_types
    try:
        if apply_step(v, ts[i]) == ts[i + 1]:
            best.consider(plan.with_step(i, v))
        else:  # pragma: no cover - variants type alike; kept so a new variant cannot go wrong silently
            best.consider(Plan.build(plan.src, plan.steps[:i] + (v,) + plan.steps[i + 1:], plan.cost_model))
    except StepError:
        pass


def with_variants(plan: Plan, best: Best) -> None:
    """Swap each step for a variant where that is better under the cost model (same types)."""
    for i, step in enumerate(plan.steps):
        for v in VARIANTS[type(step)](step):
            _consider_variant(best, best.plan or plan, i, v)

