"""Ranking of candidate plans (``Best``): the memory bound, then the cost model's order, with
tie-breaking by the fewest collective ops and steps that span processes last (``crossing_order``).
"""

from __future__ import annotations

import math

from redist.cost import CostModel
from redist.measure import p2p_axes
from redist.plan import Plan
from spmd_types import ShardingType


class Best:
    """The best plan so far that reaches ``dst`` within the memory bound."""

    def __init__(self, src: ShardingType, dst: ShardingType, keep_slower: bool = False) -> None:
        self.dst = dst
        self.keep_slower = keep_slower
        """Keep plans of as many ops as a faster feasible plan (``outranked``): ``ranked`` offers
        them to a measurement, which may rank them first (``redist.autotune``)."""
        self.bound = max(src.local_bytes, dst.local_bytes)
        self.plan: Plan | None = None
        self.feasible: list[Plan] = []
        """Every plan considered that reaches ``dst`` within the bound (for ``choice``'s ties)."""
        self.fastest_by_ops: dict[int, float] = {}
        """Least estimated time of a feasible plan per count of collective ops (``outranked``)."""
        self.threshold: tuple[float, float] = (math.inf, math.inf)
        """The key above which nothing can win (``beaten``): the best plan's, its time widened to
        the tie window; kept here because planning asks thousands of times a pair."""

    def consider(self, p: Plan) -> None:
        if p.dst == self.dst and p.peak_bytes <= self.bound:
            self.feasible.append(p)
            if self.plan is None or p.key() < self.plan.key():
                self.plan = p
                cm = p.cost_model
                self.threshold = cm.order(p.recv_bytes, cm.tie_window(p.time_s))
            t = round(p.time_s, 15)
            if t < self.fastest_by_ops.get(p.n_collectives, math.inf):
                self.fastest_by_ops[p.n_collectives] = t

    def outranked(self, time_floor: float, ops_floor: int, cm: CostModel) -> bool:
        """No plan of at least ``time_floor`` and ``ops_floor`` collective ops can be ``choice``'s,
        though it may fall in the tie window: a feasible plan with fewer ops and no more time, or
        as many ops and less time (unless ``keep_slower``), is tied with it in every window that
        holds it, and ``choice`` prefers fewer ops, then less time. So once a plan is fastest,
        nothing slower with as many ops is kept. Only under a tie tolerance (with none,
        ``beaten`` says all there is)."""
        if not cm.time_first or not cm.tie_tolerance:
            return False
        t = round(time_floor, 15)
        return any((n < ops_floor and s <= t) or (n == ops_floor and s < t and not self.keep_slower)
                   for n, s in self.fastest_by_ops.items())

    def beaten(self, floor: tuple[float, float]) -> bool:
        """No plan above ``floor`` can win: not even a tie (``CostModel.tie_tolerance``)."""
        return floor > self.threshold

    def choice(self, best: Plan) -> Plan:
        """``best`` (the best plan); under a tie tolerance, the tied plan (estimated time within
        the window of the fastest) with the fewest collective ops, then ``Plan.key`` (least time,
        then bytes: a tie on ops is no license to pick a slower plan for its bytes)."""
        window = round(best.cost_model.tie_window(best.time_s), 15)
        if window == round(best.time_s, 15):
            tied = [p for p in self.feasible if p.key() == best.key()]
        else:
            tied = [p for p in self.feasible if round(p.time_s, 15) <= window]
        return min(tied, key=lambda p: (p.n_collectives, p.key()[:2], crossing_order(p), p.key()))


def crossing_order(p: Plan) -> tuple[bool, ...]:
    """Per collective step of ``p``, whether it spans processes (``CostModel.cross_axes``, over
    the axes the model prices it by): smaller when such steps come later. Between plans of the
    same collectives, time and bytes (``_permute_last_candidates``' mirrors), the one that crosses
    processes last ran faster (XLA's order, docs/design.md 6.2), and it lets every process start
    with local work instead of waiting at a rendezvous for the slowest peer. Without cross axes
    every entry is False: no effect."""
    cm = p.cost_model
    if not cm.cross_axes:
        return ()
    ts = p.all_types
    return tuple(cm.crosses_any(s.group_axes() or p2p_axes(ts[i], ts[i + 1]))
                 for i, (s, m) in enumerate(zip(p.steps, p.measures)) if m.collectives)


def add_floor(prefix: Plan, floor: tuple[float, float], cm: CostModel) -> tuple[float, float]:
    return cm.order(prefix.recv_bytes + floor[0], prefix.time_s + floor[1])

