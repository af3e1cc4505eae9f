"""Floors of an exchange candidate, read without building its schedule: received bytes, rounds and
time at least (``redist.exchange.floors`` gives the cell counts), so the search skips exact
routing of exchanges that cannot win (docs/design.md 4).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from redist.atoms import (
    dims_atoms,
    unreduced_atoms,
)
from redist.bounds import lower_bound_bytes
from redist.cost import CostModel
from redist.exchange import (
    cell_shape,
    closed_form,
    group_missing_total,
    provider_cells,
    reduced_cells,
    rooted_rounds,
    sampled_provider_cells,
)
from redist.exchange_a2a import offered as a2a_offered
from redist.measure import moved_kind
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo

TIME_SLACK = 1 - 1e-9
"""Time floors are shrunk by this factor: they sum per-round terms in another order than the
measure does, so float rounding must not lift one above the figure it bounds. Byte floors need no
slack: bound and measure are each one correctly rounded division of an exact integer."""


class Floor(NamedTuple):
    """What an exchange ``cur -> dst`` needs at least, read without building its schedule."""
    recv: float      # bytes a device receives, averaged
    rounds: int      # rounds (one collective-permute each)
    cell_bytes: int  # bytes of the cell each round moves


@memo(Scope.TYPE)
def exchange_rounds_floor(cur: ShardingType, dst: ShardingType, rooted: bool = True) -> Floor:
    """Optimistic bytes and rounds of an exchange ``cur -> dst`` without building its schedule: it
    receives at least the lower bound, and its busiest device needs one round per missing cell
    (``pending_sum_rounds`` with pending sums). Without ``rooted``, the cheaper floor
    ``by_floor`` keys a prefix by first. No cost model: each prices it (``exchange_floor``)."""
    if not (cur.unreduced or dst.unreduced):
        cf = closed_form(cur, dst)
        return Floor(cf.mean_missing * cur.itemsize, cf.rounds, cf.cell * cur.itemsize)
    cell = math.prod(cell_shape(cur, dst))
    cells = max(group_missing_total(cur, dst) // cell, reduced_cells(cur, dst))
    recv = max(lower_bound_bytes(cur, dst), cells * (cell * cur.itemsize) / cur.mesh.size)
    rounds = pending_sum_rounds(cur, dst, cell, recv / (cell * cur.itemsize), rooted)
    return Floor(recv, rounds, cell * cur.itemsize)


@memo(Scope.TYPE)
def exchange_floor(cur: ShardingType, dst: ShardingType, cm: CostModel, rooted: bool = True) -> tuple[float, float]:
    """Optimistic (recv, time) of an exchange ``cur -> dst`` (``exchange_rounds_floor``), each
    round costing at least its least price (``rounds_time_floor``)."""
    f = exchange_rounds_floor(cur, dst, rooted)
    return (f.recv, rounds_time_floor(cur, f.rounds, f.cell_bytes, cm))


def rounds_time_floor(cur: ShardingType, rounds: int, cell_bytes: int, cm: CostModel) -> float:
    """Least time of ``rounds`` exchange rounds moving one ``cell_bytes`` cell each: every round
    at its least price (``CostModel.least_round``)."""
    lat, inv_bw = cm.least_round(moved_kind("exchange", cur))
    return rounds * (lat + cell_bytes * inv_bw) * TIME_SLACK


def or_one_all_to_all(cur: ShardingType, recv: float, time: float, cm: CostModel) -> float:
    """``time`` (the exchange in rounds) or, where the one-all-to-all form (``ExchangeAllToAll``)
    is offered, the least time of one all-to-all of ``recv``, whichever is less."""
    if not a2a_offered(cur):
        return time
    return min(time, one_all_to_all(cur, recv, cm))


def any_exchange_floor(cur: ShardingType, dst: ShardingType, cm: CostModel,
                        rooted: bool = True) -> tuple[float, float]:
    """The floor of an exchange run either way (``VARIANTS``): in rounds (``exchange_floor``) or
    as one all-to-all (``ExchangeAllToAll``), which receives at least as many bytes (its padding
    counts) and costs at least one all-to-all of them (``one_all_to_all``)."""
    recv, time = exchange_floor(cur, dst, cm, rooted)
    return recv, or_one_all_to_all(cur, recv, time, cm)


def one_all_to_all(cur: ShardingType, recv: float, cm: CostModel) -> float:
    """Least time of an all-to-all receiving ``recv`` bytes: one latency term (groups of 2 or
    more), no slow axis (they only scale costs up)."""
    return cm.kind_time(moved_kind("all_to_all", cur), (), 1, recv) * TIME_SLACK


def pending_sum_rounds(cur: ShardingType, dst: ShardingType, cell: int, mean_cells: float,
                        rooted: bool = True) -> int:
    """Rounds the exchange schedule (``redist.exchange``) needs at least, moving one cell per device
    and round: the average receipt (``mean_cells``, from the bound) and, without pending sums in
    ``dst``, every device's missing cells; where partials are summed (``k > 1`` of them per element),
    the root receives ``k - 1`` cells in the merge phase and then the sum reaches each other target
    of the element (one per group of devices that differ only along ``dst``'s unreduced axes) in a
    separately coloured phase: at least ``ceil(log2 targets)`` rounds, since the devices holding
    the sum at most double per round (the exchange forwards along a doubling tree where that
    beats a star). And at least the cells of the busiest receiver: one device per group of
    devices receives every cell the group lacks (``redist.exchange.provider_cells``), and the
    rounds of the device the routing makes root of every cell its new block's devices all lack
    (``redist.exchange.rooted_rounds``, far tighter on large binary meshes: docs/design.md 13.3;
    only with ``rooted``: it builds a class quotient, so ``by_floor`` asks for it last)."""
    rounds = math.ceil(mean_cells * TIME_SLACK)
    if not dst.unreduced:
        rounds = max(rounds, closed_form(cur, dst).rounds)  # its cell is ``cell``
    return max(rounds, provider_cells(cur, dst), rooted_rounds(cur, dst) if rooted else 0,
               _summing_rounds(cur, dst))


@memo(Scope.TYPE)
def _summing_rounds(cur: ShardingType, dst: ShardingType) -> int:
    """The rounds of summing ``k > 1`` partials and spreading the sum (``pending_sum_rounds``),
    from the types' atoms alone: ``k - 1`` into the root, then ``ceil(log2 targets)``."""
    us, ud = unreduced_atoms(cur), unreduced_atoms(dst)
    k = math.prod(a.size for a in us - ud)
    if k == 1:
        return 0
    sharded = {a for d in dims_atoms(dst) for a in d}
    targets = cur.mesh.size // math.prod(a.size for a in sharded | ud)
    return k - 1 + (targets - 1).bit_length()


def bytes_floor(cur: ShardingType, dst: ShardingType, recv: float, cm: CostModel,
                 sampled: bool = False) -> tuple[tuple[float, float], int]:
    """The floor of a pending-sum exchange ``cur -> dst`` that receives at least ``recv`` bytes
    per device on average, read off no per-device table, and its rounds: its busiest device
    receives at least that mean, one cell a round, and it sums partials in ``_summing_rounds``;
    or it runs as one all-to-all of ``recv`` (as ``any_exchange_floor``, of which this is a
    lower edition). Under a time objective the bytes alone hardly order prefixes: time leads the
    key. The rounds are at most ``exchange_rounds_floor``'s (each term is one of theirs or below
    it), so they give an ops floor at every tier of ``by_floor``."""
    cell = math.prod(cell_shape(cur, dst)) * cur.itemsize
    rounds = max(math.ceil(recv / cell * TIME_SLACK), _summing_rounds(cur, dst),
                 sampled_provider_cells(cur, dst) if sampled else 0)
    return (recv, or_one_all_to_all(cur, recv, rounds_time_floor(cur, rounds, cell, cm), cm)), rounds

