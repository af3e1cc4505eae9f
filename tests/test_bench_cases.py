"""The benchmark's case list and the random-pair generator produce valid, deterministic pairs."""

from __future__ import annotations

from benchmarks.cases import NAMED_CASES, QUICK_CASES, select_cases
from benchmarks.random_pairs import RANDOM_MESHES, PairSpec, random_pairs
from spmd_types import parse


def test_named_cases_cover_the_issue() -> None:
    assert len(NAMED_CASES) >= 30
    names = [c.name for c in NAMED_CASES]
    assert len(set(names)) == len(names)
    families = {c.family for c in NAMED_CASES}
    assert {"megatron", "fsdp", "tp2d", "moe", "fsdp_tp", "size3"} <= families
    ranks = {c.src_type.rank for c in NAMED_CASES}
    assert ranks == {1, 2, 3, 4}
    assert any(3 in dict(c.mesh_axes).values() for c in NAMED_CASES)
    assert any(len(c.mesh_axes) == 3 for c in NAMED_CASES)
    assert sum(bool(c.src_type.unreduced) for c in NAMED_CASES) >= 5
    assert set(QUICK_CASES) <= set(names)


def test_named_cases_are_valid_pairs() -> None:
    for c in NAMED_CASES:
        src, dst = c.src_type, c.dst_type
        assert src != dst, c.name
        assert (src.shape, src.dtype, src.mesh) == (dst.shape, dst.dtype, dst.mesh), c.name
        assert not dst.unreduced, c.name
        # "a few MB per array": keeps the full run within minutes on 2 cores
        assert src.global_bytes <= 4 << 20, c.name
        assert parse(c.src, c.mesh) == src


def test_select_cases_by_name_and_family() -> None:
    assert [c.name for c in select_cases(NAMED_CASES, ["moe_dispatch"])] == ["moe_dispatch"]
    assert all(c.family == "size3" for c in select_cases(NAMED_CASES, ["size3"]))
    assert select_cases(NAMED_CASES, None) == NAMED_CASES


def test_random_pairs_are_valid_and_deterministic() -> None:
    spec = PairSpec()
    pairs = random_pairs(spec)
    assert len(pairs) == spec.count >= 200
    assert pairs == random_pairs(PairSpec())
    assert random_pairs(PairSpec(seed=1, count=20)) != pairs[:20]
    meshes, ranks, dtypes = set(), set(), set()
    for c in pairs:
        src, dst = c.src_type, c.dst_type
        assert c.mesh.size == 8
        assert src != dst
        assert (src.shape, src.dtype) == (dst.shape, dst.dtype)
        assert not dst.unreduced
        assert src.global_bytes <= spec.max_bytes
        assert parse(c.src, c.mesh) == src and parse(c.dst, c.mesh) == dst
        meshes.add(c.mesh_axes)
        ranks.add(src.rank)
        dtypes.add(src.dtype)
    assert meshes == set(RANDOM_MESHES)
    assert ranks == {1, 2, 3, 4}
    assert len(dtypes) >= 2
    assert any(c.src_type.unreduced for c in pairs)
    assert len({c.name for c in pairs}) == len(pairs)
