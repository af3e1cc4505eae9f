"""What planning refuses because ``schedule`` would: the size limits checked from floors and figures."""

from __future__ import annotations

import math

from redist.exchange import limits
from redist.exchange.cells import cell_grid, check_size, closed_form, few_cells
from redist.exchange.figures import routing
from redist.exchange.floors import provider_cells
from redist.exchange.limits import ExchangeTooFineError
from spmd_types import ShardingType


def check_schedule(old: ShardingType, new: ShardingType) -> None:
    """Raise ``ExchangeTooFineError`` if ``schedule(old, new)`` would be refused: past ``MAX_CELLS``
    (``check_size``) or ``MAX_PACKED``, unless each device handles at most ``MAX_DEVICE_CELLS``. Its rounds are the closed form's without pending sums
    (``closed_form``, the same count), else the routing's (which planning read), or
    its floor ``provider_cells`` where that alone is past the limit."""
    if few_cells(old, new):
        return
    check_size(old, new)
    per_round = old.mesh.size * max(1, old.rank)
    if old.unreduced or new.unreduced:  # the round floor refuses without routing where it can
        floor = provider_cells(old, new)
        rounds = floor if floor * per_round > limits.MAX_PACKED else routing(old, new).rounds
    elif math.prod(cell_grid(old, new).per_block) * per_round <= limits.MAX_PACKED:
        return  # a plain exchange has at most one round per cell of a new block
    else:
        rounds = closed_form(old, new).rounds
    packed = rounds * per_round
    if packed > limits.MAX_PACKED:
        raise ExchangeTooFineError(
            f"exchange {old} -> {new}: {rounds:,} rounds x {old.mesh.size} devices x rank {old.rank} "
            f"= {packed:,} offsets > MAX_PACKED = {limits.MAX_PACKED:,}; its figures are exact, but its schedule "
            f"is too large to build")

