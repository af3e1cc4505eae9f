"""The partitioner benchmark's own arithmetic: collectives per executed step (a loop body once per
iteration) and the rank correlation it reports."""

from __future__ import annotations

import pytest

from benchmarks.partitioner import executed_collectives
from redist.profile import spearman

HLO = """HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (p: (s32[], f32[16])) -> pred[] {
  %p = (s32[], f32[16]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (p: (s32[], f32[16])) -> (s32[], f32[16]) {
  %p = (s32[], f32[16]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[16] get-tuple-element(%p), index=1
  %r = f32[16] all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[16]) tuple(%i, %r)
}

ENTRY %main (x: f32[16]) -> f32[64] {
  %x = f32[16] parameter(0)
  %z = s32[] constant(0)
  %t = (s32[], f32[16]) tuple(%z, %x)
  %w = (s32[], f32[16]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %y = f32[16] get-tuple-element(%w), index=1
  ROOT %g = f32[64] all-gather(%y), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true
}
"""


def test_loop_body_collectives_count_once_per_iteration() -> None:
    counts, recv = executed_collectives(HLO, 8)
    assert counts == {"all-reduce": 3, "all-gather": 1}
    # all-reduce of 64 B over 4: 2 * 3/4 * 64 = 96 B, three times; all-gather: 3 * 64 B
    assert recv == 3 * 96 + 192


def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
