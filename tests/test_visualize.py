"""The data behind plan pictures: layouts and bytes matrices, checked exactly against the plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from synth_checks import BYTES

from redist import CostModel, redistribute
from redist.plan import Plan
from redist.render import device_list, fmt_bytes, format_plan, plural
from redist.steps import Exchange, Permute
from redist.visualize import display_dims, layout, plan_frames
from spmd_types import Mesh, parse
from tests.strategies import type_pairs

MESH = Mesh({"x": 2, "y": 4})
CASES = [
    ("f32[2048@x,2048@y]", "f32[2048@y,2048@x]", MESH),
    ("f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]", MESH),
    ("f32[64@(x,y,z),32]", "f32[64@z,32@(y,x)]", Mesh({"x": 2, "y": 2, "z": 2})),
    ("f32[8@y]", "f32[8@x]", MESH),
    ("f32[64@x,32]{U:y}", "f32[64@x,32]", MESH),
    ("f32[64,32]", "f32[64@(x,y),32]", MESH),
    ("f32[16@x,8@y,32]", "f32[16,8@x,32@y]", MESH),
    ("bf16[2,4@x,1]", "bf16[2,4@y,1]", MESH),  # an exchange as one padded all-to-all: its slots, not its cells
]


def _check_frames(plan) -> None:  # type: ignore[no-untyped-def]
    n = plan.src.mesh.size
    frames = plan_frames(plan)
    assert len(frames) == len(plan.steps) + 1 and frames[0].matrix is None
    for f, step, m in zip(frames[1:], plan.steps, plan.measures):
        mat = f.matrix
        assert mat is not None and mat.shape == (n, n)
        assert np.all(np.diag(mat) == 0) and np.all(mat >= 0)
        # every device's row sums to what it receives; the whole matrix to recv_bytes * devices
        assert mat.sum() == pytest.approx(m.recv_bytes * n, rel=1e-12, abs=1e-9)
        if not step.is_collective or m.collectives == 0:
            assert not mat.any()
        if isinstance(step, Permute):
            assert ((mat > 0).sum(axis=1) <= 1).all() and ((mat > 0).sum(axis=0) <= 1).all()


@pytest.mark.parametrize("src,dst,mesh", CASES)
def test_matrices_sum_to_the_plans_bytes(src: str, dst: str, mesh: Mesh) -> None:
    _check_frames(redistribute(src, dst, mesh))


@given(st.sampled_from([MESH, Mesh({"x": 2, "y": 2, "z": 2}), Mesh({"a": 3, "b": 2})]).flatmap(
    lambda m: type_pairs(m, unreduced=True)))
def test_matrices_sum_to_the_plans_bytes_on_random_pairs(pair) -> None:  # type: ignore[no-untyped-def]
    plan = redistribute(*pair)
    _check_frames(plan)
    plan_frames(plan)  # layouts of every rank



def test_exact_matrices_of_known_steps() -> None:
    ag = redistribute("f32[64@x,32]", "f32[64,32]", MESH)  # all-gather over x: pairs {v, v+4}
    mat = plan_frames(ag)[1].matrix
    assert mat is not None
    want = np.zeros((8, 8))
    for v in range(4):
        want[v, v + 4] = want[v + 4, v] = 4096
    assert np.array_equal(mat, want)
    rs = redistribute("f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]", MESH)
    mat = plan_frames(rs)[1].matrix
    assert mat is not None
    block = np.full((4, 4), 1 << 20) - np.diag(np.full(4, 1 << 20))
    assert np.array_equal(mat, np.block([[block, np.zeros((4, 4))], [np.zeros((4, 4)), block]]))
    # permute 4->2, 5->3, 6->4, 7->5 (then a gather; the measured profile slices first)
    perm = redistribute("f32[8@y]", "f32[8@x]", MESH, cost_model=CostModel(objective="bytes"))
    mat = plan_frames(perm)[1].matrix
    assert mat is not None and {(int(d), int(s)) for d, s in zip(*np.nonzero(mat))} == {(2, 4), (3, 5), (4, 6), (5, 7)}


def test_layout_grid_lists_the_holders_of_each_block() -> None:
    lay = layout(parse("f32[8@x,4@y]", MESH))
    assert lay.grid == ((( 0,), (1,), (2,), (3,)), ((4,), (5,), (6,), (7,)))
    lay = layout(parse("f32[8@x,4]{U:y}", MESH))
    assert lay.grid == (((0, 1, 2, 3),), ((4, 5, 6, 7),)) and lay.partial
    lay = layout(parse("f32[8@y]", MESH))  # rank 1: one row, like JAX
    assert lay.row_dim is None and lay.grid == (((0, 4), (1, 5), (2, 6), (3, 7)),)
    assert layout(parse("f32[]", MESH)).grid == ((tuple(range(8)),),)
    t3 = [parse("f32[16@x,8@y,32]", MESH), parse("f32[16,8@x,32@y]", MESH)]
    assert display_dims(t3) == (1, 2)
    lay = layout(t3[0], display_dims(t3))
    assert lay.collapsed == (0,) and lay.grid == (((0, 4),), ((1, 5),), ((2, 6),), ((3, 7),))
    # every device appears exactly once in every layout
    for t in t3:
        assert sorted(d for row in layout(t, (1, 2)).grid for c in row for d in c) == list(range(8))


def test_text_helpers() -> None:
    assert fmt_bytes(28672.0) == "28,672 B (28 KiB)" and fmt_bytes(512) == "512 B"
    assert fmt_bytes(1572864.0) == "1,572,864 B (1.5 MiB)" and fmt_bytes(2.5) == "~2 B"
    assert plural(1, "step") == "1 step" and plural(7, "collective") == "7 collectives"
    assert device_list([0, 1, 2, 3, 5, 7, 8]) == "0-3,5,7,8" and device_list([0, 4]) == "0,4"


def test_format_plan_in_words() -> None:
    one = redistribute("f32[512@(x,y),128]", "f32[512,128@(y,x)]", MESH, cost_model=BYTES)
    assert [s.kind for s in one.steps] == ["exchange_all_to_all"]  # the same cells in one collective
    assert "one all-to-all replaces the exchange's collective-permute rounds" in format_plan(one)
    rounds = Plan.build(one.src, (Exchange(one.dst.dims, None),), BYTES)  # the same move in rounds
    text = format_plan(rounds)
    assert "1 step, 7 collectives" in text and "28,672 B (28 KiB)" in text and ".0 B" not in text
    assert "exchange to f32[512,128@(y,x)]" in text and "7 cells of 64x16 elements" in text
    assert "7 collective-permutes, one per round" in text and "(the lower bound)" in text
    text = format_plan(redistribute("f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]", MESH, cost_model=BYTES))
    assert "1 step, 1 collective" in text and "groups of 4 devices {0-3} {4-7}" in text
    assert "local, no communication" in format_plan(redistribute("f32[64,32]", "f32[64@x,32]", MESH))
