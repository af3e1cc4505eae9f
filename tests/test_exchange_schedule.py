"""``redist.exchange.schedule`` pinned on a handful of moves: any change to who sends which cell
in which round shows here as a readable diff (the simulator and executor tests check that the
schedules are *correct*; this checks they stay the *same*)."""

from __future__ import annotations

import numpy as np
import pytest
from synth_checks import global_array

from redist import Exchange, Plan
from redist.exchange import Schedule, schedule
from redist.simulate import check, simulate
from spmd_types import Mesh, ShardingType, SubAxis, parse
from spmd_types.layout import axis_coords


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


def canonical(lines: list[str]) -> list[str]:
    """Messages of a round in sorted order: their order inside one ``ppermute`` means nothing."""
    def one(line: str) -> str:
        head, _, body = line.partition(" ")
        return f"{head} {' '.join(sorted(body.split()))}" if head in ("round", "forward") else line
    return [one(x) for x in lines]


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
        # the merging exchange (18 cells; the partial-by-partial one took 20 in 5 rounds): per
        # cell the root (0 or 4) sums all four partials, then forwards to the other y-group
        "cell (2, 3)",
        "local 0: 0:(0, 0)->(0, 0) 4:(0, 3)->(2, 0)",
        "round 1>0:(0, 0)->(0, 0) 5>4:(0, 3)->(2, 0)",
        "round 2>0:(0, 0)->(0, 0) 6>4:(0, 3)->(2, 0)",
        "round 3>0:(0, 0)->(0, 0) 7>4:(0, 3)->(2, 0)",
        "round 4>0:(0, 0)->(2, 0) 0>4:(0, 3)->(0, 0)",
        "round 5>0:(0, 0)->(2, 0) 1>4:(0, 3)->(0, 0)",
        "round 6>0:(0, 0)->(2, 0) 2>4:(0, 3)->(0, 0)",
        "round 7>0:(0, 0)->(2, 0) 3>4:(0, 3)->(0, 0)",
        "forward 0>1:(0, 0)->(0, 0) 4>5:(0, 0)->(0, 0)",
        "forward 0>1:(2, 0)->(2, 0) 4>5:(2, 0)->(2, 0)",
        "recv [7, 2, 0, 0, 7, 2, 0, 0]",
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
    assert canonical(render(sch)) == canonical(expected)
    assert sch.n_transfers == sum(len(r.pairs) for r in sch.rounds)




# sources on {x=6} spelled with x:(1)3 / x:(3)2 (3 major, 2 minor; the prime atoms are 2 major,
# 3 minor), each with the sub-axis it leaves free (its replicas), written out by hand
X6_SOURCES = [("s32[12@(x:(1)3)]{U:(x:(3)2)}", None), ("s32[12@(x:(3)2)]{U:(x:(1)3)}", None),
              ("s32[12]{U:(x:(1)3)}", SubAxis("x", 3, 2)), ("s32[12]{U:(x:(3)2)}", SubAxis("x", 1, 3)),
              ("s32[6,4@(x:(3)2)]{U:(x:(1)3)}", None), ("s32[6@(x:(1)3),4]{U:(x:(3)2)}", None)]
X6_TARGETS = {1: ["s32[12@x]", "s32[12]", "s32[12@(x:(1)2)]{U:(x:(2)3)}", "s32[12@(x:(3)2,x:(1)3)]",
                  "s32[12]{U:(x:(1)3)}", "s32[12@(x:(1)3)]", "s32[12]{U:x}"],
              2: ["s32[6@x,4]", "s32[6,4@(x:(3)2)]", "s32[6@(x:(1)3),4@(x:(3)2)]", "s32[6,4]{U:(x:(1)2)}"]}


def _scatter(x: np.ndarray, t: ShardingType, free: SubAxis | None, seed: int) -> list[np.ndarray]:
    """Locals of ``x`` as ``t`` (one unreduced sub-axis), each replica (coordinate along ``free``)
    with its own random partials: coordinates from ``axis_coords``, independent of prime atoms."""
    mesh, rng = t.mesh, np.random.default_rng(seed)
    (red,) = t.unreduced
    part = axis_coords(mesh, red)
    rep = axis_coords(mesh, free) if free else part * 0
    decomps = []
    for _ in range(int(rep.max()) + 1):
        parts = [rng.integers(-50, 50, size=x.shape).astype(x.dtype) for _ in range(mesh.axis_size(red) - 1)]
        decomps.append([*parts, x - sum(parts)])
    return [decomps[rep[v]][part[v]][tuple(slice(a, b) for a, b in t.block(v))].copy() for v in range(mesh.size)]


@pytest.mark.parametrize("src,free", X6_SOURCES)
def test_subaxes_off_the_prime_order(src: str, free: SubAxis | None) -> None:
    """``x:(1)3`` on ``x=6`` splits x into factors that are not its prime atoms (2 then 3): the
    replicas of such a source were once indexed by those atoms, found no holder and crashed
    planning with a bare ValueError. A one-step exchange now moves the right values, with
    replicas that hold different decompositions of the partial sums."""
    mesh = Mesh({"x": 6})
    s = parse(src, mesh)
    for i, dst in enumerate(X6_TARGETS[s.rank]):
        d = parse(dst, mesh)
        p = Plan.build(s, (Exchange(d.dims, tuple(d.unreduced)),))
        assert p.dst == d
        x = global_array(s, seed=i)
        check(simulate(p.steps, p.all_types, _scatter(x, s, free, seed=i)), d, x)


def test_too_fine_exchange_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_CELLS`` the schedule is refused with ``ExchangeTooFineError`` (a ``StepError``,
    so the synthesizer skips that candidate) naming the sizes and the limit."""
    from redist import exchange
    from redist.caches import clear_caches
    from redist.errors import StepError
    from redist.exchange import limits

    mesh = Mesh({"x": 2, "y": 2})
    src, dst = parse("s32[12@x]{U:y}", mesh), parse("s32[12@y]", mesh)
    monkeypatch.setattr(limits, "MAX_CELLS", 7)  # 1 cell x 2 partials x 4 devices = 8
    monkeypatch.setattr(limits, "MAX_DEVICE_CELLS", 1)
    clear_caches("plans")
    with pytest.raises(exchange.ExchangeTooFineError, match=r"= 2 > MAX_DEVICE_CELLS = 1, x 4 devices = 8 > MAX_CELLS = 7"):
        schedule(src, dst)
    assert issubclass(exchange.ExchangeTooFineError, StepError)
    monkeypatch.setattr(limits, "MAX_DEVICE_CELLS", 2)  # either limit met: scheduled
    clear_caches("plans")
    assert schedule(src, dst).n_transfers == 4
    clear_caches("plans")


def test_issue12_pair_on_4096_devices_meets_the_bound() -> None:
    """``f32[4096@a0]{U:a1} -> f32[4096@a1]`` on 12 axes of 2: an exchange at the transfer bound
    (the mesh-offset colouring keeps its schedule cheap enough to plan)."""
    from redist.synth import synthesize

    mesh = Mesh({f"a{i}": 2 for i in range(12)})
    plan = synthesize(parse("f32[4096@a0]{U:a1}", mesh), parse("f32[4096@a1]", mesh))
    assert plan.recv_bytes == plan.lower_bound_bytes == 8192
