"""``redist.exchange.schedule`` pinned on a handful of moves: any change to who sends which cell
in which round shows here as a readable diff (the simulator and executor tests check that the
schedules are *correct*; this checks they stay the *same*)."""

from __future__ import annotations

import pytest

from redist.exchange import Schedule, schedule
from spmd_types import Mesh, parse


def render(sch: Schedule) -> list[str]:
    """``dst:src_offset->dst_offset`` per local copy, ``src>dst:...`` per message."""
    out = [f"cell {sch.cell}"]
    for i, r in enumerate(sch.local_copies):
        out.append(f"local {i}: " + " ".join(
            f"{d}:{tuple(r.send_offset[d].tolist())}->{tuple(r.recv_offset[d].tolist())}"
            for d in range(len(r.recv_valid)) if r.recv_valid[d]))
    for r in sch.rounds:
        out.append(("forward " if r.from_output else "round ") + " ".join(
            f"{s}>{d}:{tuple(r.send_offset[s].tolist())}->{tuple(r.recv_offset[d].tolist())}" for s, d in r.pairs))
    out.append(f"recv {sch.recv_cells.tolist()}")
    return out


CASES = [
    pytest.param({"x": 2, "y": 2}, "s32[12@x]{U:y}", "s32[12@y]", [
        "cell (6,)",
        "local 0: 0:(0,)->(0,) 3:(0,)->(0,)",
        "round 1>0:(0,)->(0,) 2>3:(0,)->(0,)",
        "forward 0>2:(0,)->(0,) 3>1:(0,)->(0,)",
        "recv [1, 1, 1, 1]",
    ], id="reduce-at-root-then-forward"),
    pytest.param({"x": 2, "y": 2}, "s32[12@(x,y)]", "s32[12@(y,x)]", [
        "cell (3,)",
        "local 0: 0:(0,)->(0,) 3:(0,)->(0,)",
        "round 2>1:(0,)->(0,) 1>2:(0,)->(0,)",
        "recv [0, 1, 1, 0]",
    ], id="permute"),
    pytest.param({"x": 2, "y": 2}, "s32[12@x,6]", "s32[12,6@y]{U:x}", [
        "cell (6, 3)",
        "local 0: 0:(0, 0)->(0, 0) 1:(0, 3)->(0, 0) 2:(0, 0)->(6, 0) 3:(0, 3)->(6, 0)",
        "recv [0, 0, 0, 0]",
    ], id="fresh-unreduced-one-provider-per-group"),
    pytest.param({"x": 2, "y": 2, "z": 2}, "s32[4@x,6]{U:(y,z)}", "s32[4,6@x]{U:y}", [
        "cell (2, 3)",
        "local 0: 0:(0, 0)->(0, 0) 2:(0, 0)->(0, 0) 4:(0, 3)->(2, 0) 6:(0, 3)->(2, 0)",
        "round 5>0:(0, 0)->(2, 0) 7>2:(0, 0)->(2, 0) 1>4:(0, 3)->(0, 0) 3>6:(0, 3)->(0, 0)",
        "round 1>0:(0, 0)->(0, 0) 3>2:(0, 0)->(0, 0) 5>4:(0, 3)->(2, 0) 7>6:(0, 3)->(2, 0)",
        "round 4>0:(0, 0)->(2, 0) 6>2:(0, 0)->(2, 0) 0>4:(0, 3)->(0, 0) 2>6:(0, 3)->(0, 0)",
        "forward 0>1:(0, 0)->(0, 0) 2>3:(0, 0)->(0, 0) 4>5:(0, 0)->(0, 0) 6>7:(0, 0)->(0, 0)",
        "forward 0>1:(2, 0)->(2, 0) 2>3:(2, 0)->(2, 0) 4>5:(2, 0)->(2, 0) 6>7:(2, 0)->(2, 0)",
        "recv [3, 2, 3, 2, 3, 2, 3, 2]",
    ], id="kept-and-reduced-partials"),
    pytest.param({"x": 2, "y": 3}, "s32[12@y]", "s32[12@(x,y)]", [
        "cell (2,)",
        "local 0: 0:(0,)->(0,) 5:(2,)->(0,)",
        "round 3>1:(2,)->(0,) 4>2:(0,)->(0,) 1>3:(2,)->(0,) 5>4:(0,)->(0,)",
        "recv [0, 1, 1, 1, 1, 0]",
    ], id="uneven-cells-size-3-axis"),
    pytest.param({"x": 4}, "s32[8@(x:(2)2)]{U:(x:(1)2)}", "s32[8@x]", [
        "cell (2,)",
        "local 0: 0:(0,)->(0,) 3:(2,)->(0,)",
        "round 2>0:(0,)->(0,) 0>1:(2,)->(0,) 3>2:(0,)->(0,) 1>3:(2,)->(0,)",
        "round 2>1:(2,)->(0,) 1>2:(0,)->(0,)",
        "recv [1, 2, 2, 1]",
    ], id="sub-axes"),
]


@pytest.mark.parametrize("axes,src,dst,expected", CASES)
def test_schedule_unchanged(axes: dict[str, int], src: str, dst: str, expected: list[str]) -> None:
    mesh = Mesh(axes)
    sch = schedule(parse(src, mesh), parse(dst, mesh))
    assert render(sch) == expected
    assert sch.n_transfers == sum(len(r.pairs) for r in sch.rounds)
