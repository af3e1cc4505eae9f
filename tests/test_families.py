"""``benchmarks.studies.families``: dropping a family of typed candidates drops exactly its candidates, is
undone on exit, and its plan-quality figures are right on a move whose plan only that family finds."""

from __future__ import annotations

import pytest

from benchmarks.studies.families import ALL, MIRRORS, ONLY_GREEDY, Case, dropped, families, quality
from redist import synth
from redist.cost import CostModel
from redist.errors import RedistError
from redist.synth.families import greedy_candidates, typed_candidates
from spmd_types import Mesh, parse

XYZ = Mesh({"x": 2, "y": 2, "z": 2})


def test_families_are_the_builders_and_the_mirrors() -> None:
    assert families() == (*synth.BUILDERS, MIRRORS)
    assert synth.BUILDERS["greedy"] is greedy_candidates


def test_dropping_a_family_removes_its_candidates_until_exit() -> None:
    src, dst = parse("s32[12]{U:(x,y,z)}", XYZ), parse("s32[12]{U:x}", XYZ)
    cm = CostModel(objective="bytes")
    every = typed_candidates(src, dst, cm)
    early = synth.BUILDERS["reduce_early"](src, dst, cm)
    assert early and set(early) <= set(every)
    with dropped("reduce_early"):
        without = typed_candidates(src, dst, cm)
    assert without == [c for name, build in synth.BUILDERS.items() if name != "reduce_early" for c in build(src, dst, cm)]
    assert typed_candidates(src, dst, cm) == every
    with dropped(ONLY_GREEDY):
        assert typed_candidates(src, dst, cm) == greedy_candidates(src, dst, cm)


def test_quality_counts_the_plan_only_reduce_early_finds() -> None:
    """A move of the family benchmark's corpus (shapes shrunk): reduce-scatter ``z`` first, then
    one exchange, at the transfer bound; no other family reduces first, and every plan without it
    receives more."""
    mesh = Mesh({"x": 16, "y": 16, "z": 16})
    src, dst = parse("f32[256,256@x,8,256@y]{U:z}", mesh), parse("f32[256@(y,x),256,8,256]", mesh)
    case = Case("bytes", src, dst, CostModel(objective="bytes"))
    with dropped(ALL):
        best = synth.synthesize(src, dst, case.cm)
    assert best.recv_bytes == best.lower_bound_bytes == 4_062_720
    with dropped("reduce_early"):
        other = synth.synthesize(src, dst, case.cm)
    q = quality([case], "reduce_early")["bytes"]
    assert (q.changed, q.worse, q.failed, q.bound_lost) == (1, 1, 0, 1)
    assert q.worst == pytest.approx(other.recv_bytes / best.recv_bytes) and q.worst > 1.4
    assert quality([case], "spelled")["bytes"] == (0, 0, 1.0, 0, 0)


def test_an_unknown_family_is_a_typed_error() -> None:
    with pytest.raises(RedistError, match="unknown candidate family 'gready'.*greedy"):
        with dropped("gready"):
            pass
