"""Issue 12: sizes and meshes past what int64 tables hold give a typed error, never a wrapped figure.

Independent reference for the figures: every byte count the planner reports is linear in each
dimension's size (blocks, cells and collectives all scale with it), so a pair planned at a huge
shape must report exactly ``scale`` times the figures of the same pair at a small shape, which
int64 math computes without risk.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import proofs
from redist import CostModel, redistribute
from redist.bounds import lower_bound_bytes
from redist.exchange import group_missing_total, reduced_cells, schedule
from redist.plan import Plan
from redist.steps import Exchange
from redist.synth import synthesize
from redist.synth.floors import exchange_floor
from redist_cli.main import main
from spmd_types import Mesh, MeshTooLargeError, ShardingType, ShardingTypeError, SizeLimitError
from spmd_types.mesh import MAX_ENUMERATED_DEVICES


@st.composite
def scale_cases(draw: st.DrawFn) -> tuple[Mesh, list[list[str]], list[list[str]], list[str], list[str], list[int], list[int]]:
    """A mesh of 1-64 axes (mostly of size 1, so small meshes reach 64 axes; or with enough axes of
    size 2 to pass the enumeration limit), a random assignment of its axes to the dimensions and
    pending sums of two types, per-dimension base factors and power-of-two scales up to ``2**80``."""
    n_axes = draw(st.integers(1, 64))
    huge = draw(st.booleans()) and n_axes > 23
    sizes = [draw(st.sampled_from([1, 1, 1, 2, 3, 4])) for _ in range(n_axes)]
    if huge:
        sizes = [2 if i < 23 else s for i, s in enumerate(sizes)]
    else:  # at most 64 devices: the slow, per-device work stays in milliseconds
        budget = 64
        for i, s in enumerate(sizes):
            sizes[i] = s if s <= budget else 1
            budget //= sizes[i]
    mesh = Mesh({f"a{i}": s for i, s in enumerate(sizes)})
    rank = draw(st.integers(1, 3))
    placed = []
    for _ in range(2):
        dims: list[list[str]] = [[] for _ in range(rank)]
        unred: list[str] = []
        for name in mesh.names:
            r = draw(st.integers(0, rank + 1))
            (dims[r] if r < rank else unred if r == rank else []).append(name)
        placed.append((dims, unred))
    base = [draw(st.integers(1, 3)) for _ in range(rank)]
    exps = [draw(st.one_of(st.integers(0, 20), st.integers(20, 60), st.integers(60, 80))) for _ in range(rank)]
    return mesh, placed[0][0], placed[1][0], placed[0][1], placed[1][1], base, exps


def _types(mesh: Mesh, ds: list[list[str]], dd: list[list[str]], us: list[str], ud: list[str],
           shape: list[int]) -> tuple[ShardingType, ShardingType]:
    return (ShardingType(shape, "f32", [tuple(d) for d in ds], mesh, us),
            ShardingType(shape, "f32", [tuple(d) for d in dd], mesh, ud))


@given(scale_cases())
def test_every_size_plans_exactly_or_raises_a_typed_error(case) -> None:  # type: ignore[no-untyped-def]
    mesh, ds, dd, us, ud, base, exps = case
    unit = [math.lcm(math.prod(mesh.axis_size(a) for a in x), math.prod(mesh.axis_size(a) for a in y)) * b
            for x, y, b in zip(ds, dd, base)]
    big = [u << e for u, e in zip(unit, exps)]
    try:
        plan = synthesize(*_types(mesh, ds, dd, us, ud, big))
    except ShardingTypeError as e:  # typed: past int64 or too many devices to enumerate
        assert isinstance(e, (SizeLimitError, MeshTooLargeError)), e
        if isinstance(e, MeshTooLargeError):
            assert mesh.size > MAX_ENUMERATED_DEVICES
        else:
            assert max(big) > 2**63 - 1 or any(n * 4 > 2**63 for n in big) or "elements" in str(e)
        return
    small = synthesize(*_types(mesh, ds, dd, us, ud, unit))
    scale = 1 << sum(exps)
    assert plan.recv_bytes == pytest.approx(small.recv_bytes * scale, rel=1e-9)
    assert plan.lower_bound_bytes == pytest.approx(small.lower_bound_bytes * scale, rel=1e-9)
    assert plan.lower_bound_bytes >= 0
    assert plan.recv_bytes >= plan.lower_bound_bytes * (1 - 1e-9)
    assert plan.peak_bytes <= plan.memory_bound_bytes


def test_a_dimension_past_int64_is_a_typed_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    mesh = Mesh({"x": 2, "y": 4})
    with pytest.raises(SizeLimitError, match="dimension 1 "):
        redistribute(f"f32[8@x,{2**63}]", f"f32[8@y,{2**63}]", mesh)
    rc = main(["plan", f"f32[{2**63}@x]", f"f32[{2**63}@y]", "--mesh", "x=2,y=4"])
    assert rc != 0 and "2**63" in capsys.readouterr().err
    by_bytes = CostModel(objective="bytes")  # the same plan at every size: figures scale exactly
    ok = redistribute(f"f32[{2**62}@x]", f"f32[{2**62}@y]", mesh, cost_model=by_bytes)
    ref = redistribute("f32[8@x]", "f32[8@y]", mesh, cost_model=by_bytes)
    assert ok.recv_bytes == ref.recv_bytes * 2**59 and ok.lower_bound_bytes == ref.lower_bound_bytes * 2**59


def test_a_local_block_past_int64_is_a_typed_error() -> None:
    with pytest.raises(SizeLimitError, match="local block"):
        redistribute(f"f32[{2**62}@x,8]", f"f32[{2**62}@y,8]", Mesh({"x": 2, "y": 4}))


def test_meshes_too_large_to_enumerate_are_a_typed_error() -> None:
    mesh = Mesh({f"a{i}": 2 for i in range(40)})
    with pytest.raises(MeshTooLargeError, match="1,099,511,627,776 devices"):
        mesh.coord_table()
    # planning a move whose cuts nest reads no per-device table (``bounds._nested_figures``):
    # exact figures at any size; what needs every device (its schedule, its proof) is refused, typed
    plan = redistribute("f32[1024@a0]", "f32[1024@a1]", mesh)
    assert plan.recv_bytes == plan.lower_bound_bytes == 1024.0
    with pytest.raises(MeshTooLargeError):
        schedule(plan.src, plan.dst)
    with pytest.raises(MeshTooLargeError):
        proofs.verify_plan(plan)
    small = Mesh({"x": 3, "y": 1, "z": 2})
    assert small.coord_table().tolist() == [list(c) for c in np.ndindex(3, 1, 2)]


@pytest.mark.parametrize("src,dst,mesh", [
    ("f32[256@data,4096,8192]{U:model}", "f32[256@data,4096@model,8192]", {"data": 32, "fsdp": 16, "model": 8}),
    ("f32[4096@a0]{U:a1}", "f32[4096@a1]", {f"a{i}": 2 for i in range(6)}),
    ("f32[64@x,48]{U:y}", "f32[64,48@x]{U:z}", {"x": 2, "y": 3, "z": 2}),
    ("f32[24@y,12]{U:(x,z)}", "f32[24,12]{U:x}", {"x": 2, "y": 3, "z": 2}),
])
def test_pending_sum_exchange_floor_bounds_the_exchange(src: str, dst: str, mesh: dict[str, int]) -> None:
    """The synthesizer prunes exchanges by this floor, so it must never exceed what the exchange
    really measures (else a better plan could be pruned)."""
    m = Mesh(mesh)
    s, d = ShardingType.parse(src, m), ShardingType.parse(dst, m)
    for cm in (CostModel(objective="bytes"), CostModel(objective="alpha-beta"), CostModel.with_slow_axes([m.names[0]])):
        ex = Plan.build(s, (Exchange(d.dims, d.sorted_unreduced() if d.unreduced != s.unreduced else None),), cm)
        floor = exchange_floor(s, d, cm)
        assert 0 < floor[0] <= ex.recv_bytes and 0 < floor[1] <= ex.time_s
        # the transfer bound, or the cells some group of devices lacks, or the cells the merge and
        # forwarding phases receive, where that is more (a shared unreduced axis: the bound is not
        # tight there, docs/design.md 13.2)
        cell = math.prod(math.gcd(a, b) for a, b in zip(s.local_shape, d.local_shape))
        cells = max(group_missing_total(s, d) // cell, reduced_cells(s, d))
        assert floor[0] == max(lower_bound_bytes(s, d), cells * cell * s.itemsize / m.size)


def test_a_pending_sum_exchange_past_int64_is_a_typed_error() -> None:
    """Found by the property above: an exchange between pending sums on size-1 axes built int64
    tables of a 2**63 block (``OverflowError``) before anything checked the sizes."""
    m = Mesh({"a0": 1, "a1": 1, "a2": 1, "a3": 1})
    n = 1 << 63
    src = ShardingType((n,), "f32", [("a0", "a2", "a3")], m, ("a1",))
    dst = ShardingType((n,), "f32", [("a0", "a1", "a3")], m, ("a2",))
    with pytest.raises(SizeLimitError, match="dimension 0 "):
        synthesize(src, dst)


def test_a_64_axis_mesh_plans_like_its_two_used_axes() -> None:
    """``np.ravel_multi_index`` takes at most 63 dimensions: device ids of a 64-axis mesh are
    computed without it (``spmd_types.layout.flat_index``), so the exchange's colouring and the
    all-to-all form of an exchange run there (was a bare ``ValueError``)."""
    wide = Mesh({f"a{i}": 2 if i in (19, 20) else 1 for i in range(64)})
    two = Mesh({"a19": 2, "a20": 2})
    for src, dst in (("f32[8@(a19,a20),4]", "f32[8,4@(a20,a19)]"), ("f32[8@a19,4]{U:a20}", "f32[8@a20,4]")):
        for cm in (CostModel(objective="bytes"), CostModel(objective="alpha-beta")):
            got, ref = redistribute(src, dst, wide, cost_model=cm), redistribute(src, dst, two, cost_model=cm)
            assert (got.recv_bytes, got.lower_bound_bytes) == (ref.recv_bytes, ref.lower_bound_bytes)


def test_an_identity_move_past_int64_has_its_figures() -> None:
    """No index math is needed to move nothing: 0 B received against a bound of 0 B."""
    plan = redistribute(f"f32[{2**63}@x]", f"f32[{2**63}@x]", Mesh({"x": 2}))
    assert (plan.steps, plan.recv_bytes, plan.lower_bound_bytes) == ((), 0.0, 0.0)
