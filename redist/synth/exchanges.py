"""The exchange pass: an ``Exchange`` to the destination after each typed prefix, pruned by the
floors, cheapest first.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from redist.bounds import lower_bound_bytes, unreduced_bound_floor
from redist.cost import CostModel
from redist.errors import StepError
from redist.exchange import (
    check_schedule,
    routing,
)
from redist.exchange_a2a import offered as a2a_offered
from redist.measure import moved_kind
from redist.plan import Plan
from redist.steps import (
    Exchange,
)
from redist.synth.floors import (
    TIME_SLACK,
    any_exchange_floor,
    bytes_floor,
    exchange_rounds_floor,
    one_all_to_all,
    or_one_all_to_all,
    rounds_time_floor,
)
from redist.synth.ranking import Best, add_floor
from redist.synth.variants import step_variants
from spmd_types import ShardingType
from spmd_types.mesh import MAX_ENUMERATED_DEVICES


def exchange_plans(src: ShardingType, dst: ShardingType, cm: CostModel, prefixes: list[Plan], best: Best) -> None:
    """An ``Exchange`` to ``dst`` after each prefix, pruned by floors, cheapest first: any plan
    receives at least the source's lower bound, and an exchange costs at least one latency; then
    the exchange's own optimistic (bytes, time), in the order of ``by_floor``. None on a mesh past
    ``MAX_ENUMERATED_DEVICES``: an exchange's floors and schedule read per-device tables."""
    if src.mesh.size > MAX_ENUMERATED_DEVICES:
        return
    floor_all = lower_bound_bytes(src, dst)
    ranked = [prefix for prefix in prefixes if _worth_an_exchange(prefix, dst, floor_all, cm, best)]
    for prefix in by_floor(ranked, dst, cm, best):
        if not exact_floor_open(prefix, dst, cm, best):
            continue
        new_u = dst.sorted_unreduced() if dst.unreduced != prefix.dst.unreduced else None
        try:
            p = Plan.build(src, prefix.steps + (Exchange(dst.dims, new_u),), cm)
            _ = p.measures
        except StepError:
            continue
        best.consider(p)
        recv = p.recv_bytes - prefix.recv_bytes  # run as one all-to-all it receives no less
        if a2a_offered(src) and not best.beaten(add_floor(prefix, (recv, one_all_to_all(prefix.dst, recv, cm)), cm)):
            step_variants(p, best)


LB_SLACK = 1 - 1e-12
"""``by_floor``'s middle key is the prefix plus the transfer bound of the rest, shrunk by this
factor: the closed-form floor of a plain exchange is a float mean of the same integers, which may
round a few ulps below the bound."""


def by_floor(prefixes: list[Plan], dst: ShardingType, cm: CostModel, best: Best) -> Iterator[Plan]:
    """``prefixes`` in order of their exchange floors (``any_exchange_floor``; ties in list
    order) until the best plan so far beats the next floor. A heap holds each prefix under the
    cheapest of six keys, each at or below the next: the prefix's own cost, plus (only with
    pending sums, where the floor costs more than the bound) a floor on the transfer bound that
    reads no per-device table (``unreduced_bound_floor``), plus the transfer bound of its exchange
    (``lower_bound_bytes``), both with the rounds that many bytes take at least (``bytes_floor``:
    under a time objective time leads the key, so a bytes-only key would send every prefix on to
    the per-device floors), then (pending sums only) also the rounds the first or last device must
    receive (``sampled_provider_cells``, no per-device table), plus its exchange floor without, then
    (only with pending sums) with ``rooted_rounds``, which routes a class quotient
    (``redist.exchange_classes``): only prefixes reaching the top pay it. A prefix at the top is
    re-keyed by its next key; one at the top under its floor is at or below every other key,
    hence every other floor, so the order and the stopping point are those of sorting every
    floor, and most floors (and bounds) are never computed: the first exchanges built beat them.
    Each key carries the ops its rounds take at least (``_exchange_ops``), so a prefix is also
    dropped at the first key ``Best.outranked`` refuses: no later key has less time or fewer ops.
    What each key spares: docs/design.md 13.3, "Planning time"."""
    heap = [(cm.order(p.recv_bytes, p.time_s), i, 0, 0, p) for i, p in enumerate(prefixes)]
    heapq.heapify(heap)
    while heap:
        key, i, tier, ops, prefix = heapq.heappop(heap)
        if best.beaten(key):
            return  # every remaining floor is at or above this key
        if best.outranked(cm.key_time(key), prefix.n_collectives + ops, cm):
            continue  # so is every later tier: no less time, no fewer ops
        pending = bool(prefix.dst.unreduced or dst.unreduced)
        if tier == 5 or (tier == 4 and not pending):
            yield prefix
            continue
        bound = unreduced_bound_floor(prefix.dst, dst) if tier == 0 and pending else None
        if bound is not None or (tier < 3 and pending):
            if bound is not None:
                recv, tier = bound * LB_SLACK, 1
            else:  # the transfer bound, then with the sampled providers' rounds
                recv, tier = lower_bound_bytes(prefix.dst, dst) * LB_SLACK, 3 if tier == 2 else 2
            floor, rounds = bytes_floor(prefix.dst, dst, recv, cm, sampled=tier == 3)
            ops = _exchange_ops(prefix.dst, rounds)
        else:  # tier 4 (without pending sums the bound's own closed form: no cheaper key), then 5
            tier = 5 if tier == 4 else 4
            floor = any_exchange_floor(prefix.dst, dst, cm, tier == 5)
            ops = _exchange_ops_floor(prefix.dst, dst, tier == 5)
        heapq.heappush(heap, (add_floor(prefix, floor, cm), i, tier, ops, prefix))


def _exchange_ops_floor(cur: ShardingType, dst: ShardingType, rooted: bool) -> int:
    """Collective ops an exchange ``cur -> dst`` runs at least: its rounds, or one where it may
    run as one all-to-all (``ExchangeAllToAll``), none where it moves nothing."""
    return _exchange_ops(cur, exchange_rounds_floor(cur, dst, rooted).rounds)


def _exchange_ops(cur: ShardingType, rounds: int) -> int:
    """Collective ops of an exchange from ``cur`` of at least ``rounds`` rounds: one where it may
    run as one all-to-all (``ExchangeAllToAll``)."""
    return min(rounds, 1) if a2a_offered(cur) else rounds


def _worth_an_exchange(prefix: Plan, dst: ShardingType, floor_all: float, cm: CostModel, best: Best) -> bool:
    """Whether an exchange after ``prefix`` may still win: the plan receives at least the
    source's transfer bound (``floor_all``), and an exchange that must receive anything runs at
    least one round (``CostModel.least_round``), unless it may run as one all-to-all (``ExchangeAllToAll``,
    whose measured latency may be below a round's). An exchange with nothing to receive has no
    round (a local pass, often cheaper than one): the bound of the rest, memoised, is read only
    where the round decides."""
    def beaten(time_s: float) -> bool:
        return best.beaten(cm.order(max(prefix.recv_bytes, floor_all), time_s))

    if beaten(prefix.time_s):
        return False
    if a2a_offered(prefix.src):
        return True
    lat = cm.least_round(moved_kind("exchange", prefix.dst))[0] * TIME_SLACK
    return not beaten(prefix.time_s + lat) or lower_bound_bytes(prefix.dst, dst) == 0


def exact_floor_open(prefix: Plan, dst: ShardingType, cm: CostModel, best: Best) -> bool:
    """With pending sums the floor of an exchange (transfer bound, fewest rounds) is not always
    met, so read its exact bytes and rounds off the routing (``redist.exchange.routing``, no rounds
    built) and skip it if the best plan so far beats that, each round at its least price
    (``CostModel.least_round``) or the whole as one all-to-all, whichever is less. False also when the exchange
    is refused (``check_schedule``)."""
    cur = prefix.dst
    if not (cur.unreduced or dst.unreduced):
        return True  # the closed-form floor is exact already
    try:
        check_schedule(cur, dst)  # what could not be lowered, by its round floor before any routing
        r = routing(cur, dst)
    except StepError:
        return False
    cell_bytes = math.prod(r.cell) * cur.itemsize
    recv = r.cells * cell_bytes / cur.mesh.size  # run as one all-to-all (a variant), no fewer bytes
    time = or_one_all_to_all(cur, recv, rounds_time_floor(cur, r.rounds, cell_bytes, cm), cm)
    return not best.beaten(add_floor(prefix, (recv, time), cm))

