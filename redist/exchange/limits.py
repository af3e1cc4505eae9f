"""Size limits of the exchange: past them planning refuses what ``schedule`` would (docs/design.md 13.3)."""

from __future__ import annotations

from redist.errors import StepError

MAX_CELLS = 1 << 22
"""Exchanges of more (device, cell, reduced partial) triples than this are neither routed nor
scheduled unless each device handles at most ``MAX_DEVICE_CELLS`` of them; devices count per class
(``redist.exchange_classes``: atoms both types use alike, and idle ones, are factored out first),
and by group where the routing tabulates one row per group (``provider_rows``). Why this size:
routing and scheduling at it take seconds and GB on 65,536 devices (docs/design.md 13.3).
A refusal is ``ExchangeTooFineError``, a ``StepError``: planning refuses what ``schedule`` would
(``check_schedule``), though a plain exchange's figures are known in closed form at any size, so
no plan holds an exchange it cannot lower, simulate or prove; the synthesizer uses the best other
candidate and ``redist bench-plan --ladder`` counts the plans above the bound because of it
(docs/design.md 13.3)."""


MAX_DEVICE_CELLS = 16
"""(cell, reduced partial) pairs per device always allowed, whatever the mesh size: 65,536 devices
moving one to sixteen cells each are scheduled."""


MAX_PACKED = 1 << 26
"""Offsets a schedule's packed rounds may hold, ``rounds x devices x rank`` over the whole mesh,
where a device handles more than ``MAX_DEVICE_CELLS`` (cell, partial) pairs
(each an int64, sent and received: 1 GiB here). Routing by group (``provider_rows``) can route
moves whose rounds would pack far more (docs/design.md 13.3: 5 GiB on 65,536 devices): they are
refused, like a plain exchange past either limit (no plan may hold a step it cannot lower)."""


class ExchangeTooFineError(StepError):
    """An exchange would schedule more than ``MAX_CELLS`` (device, cell, partial) triples."""


EXACT_FLOAT_SUM = 1 << 53
"""Below it a float64 sum of per-device integers is exact, so the mean ``closed_form`` divides from
the exact integer total is the float NumPy's mean of the per-device table gives (one correctly
rounded division); past it (no realistic mesh) the table is summed as it always was."""


MERGED_MAX_ROWS = 1 << 12
"""(device, cell, partial) rows past which ``merges`` does not try the merging exchange, and the
exchange floors do not count it. Its routing rarely factors into classes (only aligned atoms do),
so it costs about twice the other's, and past this size it slowed planning on large meshes past
the target without bringing any pair to the bound; the pairs it does bring there are small
(docs/design.md 13.2). Past the limit the partial-by-partial exchange is used, and a plan above
the bound is counted as such (``redist bench-plan``'s shared-unreduced column)."""


SAMPLED_MAX_MEMBERS = 1 << 10
"""Members of one device's group past which ``sampled_provider_cells`` counts nothing for it
(a floor of 0 is always sound): it sums their overlaps one by one, in Python."""


ROOTED_MAX_CELLS = 1 << 20
"""Cells of one new block past which ``rooted_rounds`` gives 0 rather than tabulate them."""


ROOTED_CLOSED_MAX_BLOCKS = 1 << 16
"""Old blocks along one dimension past which ``rooted_closed`` leaves the count to the tables."""

