"""Size limits of the exchange: past them planning refuses what ``schedule`` would (docs/design.md 13.3)."""

from __future__ import annotations

from redist.errors import StepError

MAX_CELLS = 1 << 22
"""Exchanges of more (device, cell, reduced partial) triples than this are neither routed nor
scheduled unless each device handles at most ``MAX_DEVICE_CELLS`` of them; devices count per class
(``redist.exchange_classes``: atoms both types use alike, and idle ones, are factored out first),
and by group where the routing tabulates one row per group (``provider_rows``).
Routing is NumPy passes over these triples, scheduling adds the edge colouring of the transfers
(Euler splits in C) and rounds of ``devices x rank`` offsets. At this size, on one core of the
2-core CI machine: routing 0.5-1.7 s and 0.25-0.35 GB for the reducing exchanges of the large-mesh
ladder (``redist bench-plan --ladder``) on 65,536 devices, about 4 s for the worst (every triple a transfer:
``f32[65536@(a0..a9)]{U:(a10..a15)} -> f32[65536@(a10..a15,a0..a9)]`` on 16 axes of 2); a
schedule 3 s for the ladder's, 20 s and 1.8 GB where every triple moves (once per plan and mesh).
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
(each an int64, sent and received: 1 GiB here). Routing by group (``provider_rows``) tabulates
few rows where many devices receive many cells: ``f32[1024@fsdp,512,128@seq,32768@data,128@model]{U:pod} ->
f32[1024,512,128@model,32768@(pod,data),128]{U:(fsdp,seq)}`` on 65,536 devices routes 1M rows in
about 4 s, but its 1,024 rounds would pack 5 GiB of offsets: it is refused, like a plain exchange
past either limit (its figures would be exact, but no plan may hold a step it cannot lower)."""


class ExchangeTooFineError(StepError):
    """An exchange would schedule more than ``MAX_CELLS`` (device, cell, partial) triples."""


EXACT_FLOAT_SUM = 1 << 53
"""Below it a float64 sum of per-device integers is exact, so the mean ``closed_form`` divides from
the exact integer total is the float NumPy's mean of the per-device table gives (one correctly
rounded division); past it (no realistic mesh) the table is summed as it always was."""


MERGED_MAX_ROWS = 1 << 12
"""(device, cell, partial) rows past which ``merges`` does not try the merging exchange, and the
exchange floors do not count it. Its routing rarely factors into classes (only aligned atoms do),
so it costs about twice the other's, both are routed for every exchange candidate, and its lower
floors open more candidates to routing: on the 4,096- and 8,192-device ladder rungs of 12 and 13
axes it took the slowest pending-sum pairs from 27-56 ms to 46-110 ms of planning, past the 50 ms
target, without bringing any of them to the bound (with a limit of ``1 << 16`` still 62 ms). The
exhaustive pairs it brings to the bound (96, design 13.2) have at most a few hundred rows. Past
the limit the partial-by-partial exchange is used, and a plan above the bound is counted as such
(``redist bench-plan``'s shared-unreduced column)."""


SAMPLED_MAX_MEMBERS = 1 << 10
"""Members of one device's group past which ``sampled_provider_cells`` counts nothing for it
(a floor of 0 is always sound): it sums their overlaps one by one, in Python."""


ROOTED_MAX_CELLS = 1 << 20
"""Cells of one new block past which ``rooted_rounds`` gives 0 rather than tabulate them."""


ROOTED_CLOSED_MAX_BLOCKS = 1 << 16
"""Old blocks along one dimension past which ``rooted_closed`` leaves the count to the tables."""

