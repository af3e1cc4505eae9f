"""The search: typed candidates, then exchanges after their prefixes, then variants of the best;
``synthesize`` returns the model's choice, ``ranked`` the near-ties it kept.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from redist.cost import DEFAULT_COST_MODEL, CostModel
from redist.errors import RedistError
from redist.plan import Plan, measure_step
from redist.steps import (
    Step,
)
from redist.synth.exchanges import exchange_plans
from redist.synth.families import typed_candidates
from redist.synth.ranking import Best
from redist.synth.variants import step_variants, variant_heads, variant_measures, with_variants
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo


def typed_plans(src: ShardingType, dst: ShardingType, cm: CostModel, best: Best, every: bool = False) -> list[Plan]:
    """Consider every typed candidate; return their distinct proper prefixes (exchange starts).
    Candidates the best plan so far beats are cut short (``unbeaten``), unless ``every``: ``ranked``
    offers plans outside the tie window too (``redist.autotune`` measures them)."""
    prefixes: list[Plan] = [Plan(src, src, (), (), cm)]  # an exchange straight from the source
    seen: set[tuple[Step, ...]] = {()}
    for steps in dict.fromkeys(typed_candidates(src, dst, cm)):  # distinct, in order
        full = Plan.build(src, steps, cm)
        head = full if every else unbeaten(full, best)
        if head is full:
            best.consider(full)
            step_variants(full, best)
        for k in range(len(head.steps) + 1):
            if (head.types[k - 1] if k else src) == dst:
                continue
            for start in variant_heads(head.prefix(k)):
                if start.steps in seen:
                    continue
                seen.add(start.steps)
                prefixes.append(start)
    return prefixes


def unbeaten(full: Plan, best: Best) -> Plan:
    """``full``, measured step by step, or its first proper prefix that the best plan so far
    beats (or outranks, ``Best.outranked``) with each step at the least of its own and its
    variants' bytes, times and ops (``variant_heads`` runs a prefix with one step run another
    way): every longer prefix, and every plan through one, costs at least as much, so their steps
    are not measured and they start no exchange (docs/design.md 13.3, "Planning time")."""
    cm = full.cost_model
    ts = full.all_types
    recv = time = 0.0
    ops = 0
    for i, s in enumerate(full.steps[:-1]):
        least = [measure_step(s, ts[i], ts[i + 1], cm), *variant_measures(s, ts[i], ts[i + 1], cm)]
        recv += min(x.recv_bytes for x in least)
        time += min(x.time_s for x in least)
        ops += min(x.collectives for x in least)
        key = cm.order(recv, time)
        if best.beaten(key) or best.outranked(cm.key_time(key), ops, cm):
            return full.prefix(i + 1)  # its measures are memoised (``measure_step``)
    _ = full.measures  # measured once here; every prefix shares them
    return full


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was before, after it). Planning
    allocates many short-lived objects, which reference counting frees, and each allocation burst
    may start a collection that walks every live object: the memo tables of a large mesh make
    that tens of milliseconds, charged to whichever plan happened to trigger it (docs/design.md
    13.3, "Planning time")."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def synthesize(src: ShardingType, dst: ShardingType, cm: CostModel = DEFAULT_COST_MODEL) -> Plan:
    """The best candidate plan (see the module docstring for the order of preference)."""
    if src == dst:
        return Plan(src, dst, (), (), cm)
    best = search_plans(src, dst, cm)
    assert best.plan is not None  # search_plans raises otherwise
    return best.choice(best.plan)


def search_plans(src: ShardingType, dst: ShardingType, cm: CostModel, every: bool = False) -> Best:
    best = Best(src, dst, keep_slower=every)
    with gc_paused():
        exchange_plans(src, dst, cm, typed_plans(src, dst, cm, best, every), best)
        if best.plan is None:
            src.mesh.check_enumerable("an exchange's per-device table")  # where only an exchange keeps within it
            raise RedistError(f"no plan within the memory bound for {src} -> {dst}")  # pragma: no cover
        with_variants(best.plan, best)
    return best


def ranked(src: ShardingType, dst: ShardingType, cm: CostModel, top: int) -> tuple[Plan, ...]:
    """``synthesize``'s plan, then the other plans the search kept that reach ``dst`` within the
    memory bound, by ``Plan.key`` (distinct steps), ``top`` in all: the near-ties a measurement
    may rank better than the model (``redist.autotune``). Under the bytes objective only plans
    receiving as little as the best, so a choice among them keeps the transfer guarantee. Pruned
    candidates are not here: the model could not choose them (``Best.beaten``, ``Best.outranked``;
    a plan of as many ops as a faster one is kept, ``keep_slower``)."""
    if src == dst:
        return (Plan(src, dst, (), (), cm),)
    best = search_plans(src, dst, cm, every=True)
    assert best.plan is not None
    chosen = best.choice(best.plan)
    out = {chosen.steps: chosen}
    for p in sorted(best.feasible, key=Plan.key):
        if len(out) >= top:
            break
        if cm.objective == "bytes" and round(p.recv_bytes, 6) > round(chosen.recv_bytes, 6):
            continue
        out.setdefault(p.steps, p)
    return tuple(out.values())


@memo(Scope.TYPE)
def cached_synthesize(src: ShardingType, dst: ShardingType, cm: CostModel) -> Plan:
    return synthesize(src, dst, cm)

