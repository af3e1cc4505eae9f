"""Certificates whose cost does not grow per (device, cell) in Python (tracker issue 12): the
vectorised counts agree with plain per-cell, per-device references, and a large mesh verifies."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

import redist.exchange
from benchmarks.proofs_bench import exhaustive_pairs
from benchmarks.studies.bound_optimum import CellProblem, cell_counts, cell_problems
from proofs import VerificationError, verify_plan
from proofs.link import prove_link
from proofs.measures import lower_bound_cells
from proofs.model import cells
from redist import CostModel, redistribute
from redist.exchange import Round, Schedule
from spmd_types import Mesh, ShardingType, parse


def _cell_messages(p: CellProblem) -> int:
    """The bound's count for one cell: per incomplete group its gap, plus the sends of the
    partials only it holds, minimised over groups, plus one message per other incomplete group."""
    cover = {g: {p.partial[v] for v in members if v in p.partial} for g, members in p.groups.items()}
    where: dict[int, set[tuple]] = {}  # partial -> groups of its holders
    for v, x in p.partial.items():
        where.setdefault(x, set()).add(p.group_of[v])
    incomplete = [g for g, held in cover.items() if len(held) < p.k]
    if not incomplete:
        return 0
    confined = {g: sum(1 for x in cover[g] if where[x] == {g}) if len(incomplete) > 1 else 0 for g in incomplete}
    return min(p.k - len(cover[g]) + max(confined[g] - 1, 0) for g in incomplete) + len(incomplete) - 1


def reference_bound(src: ShardingType, dst: ShardingType, L: tuple[int, ...]) -> Fraction:
    """The counting rule of ``lower_bound_cells`` cell by cell, device by device (the former code,
    with the confined partials' sends of 2026-11-24 added)."""
    cell = math.prod(n // c for n, c in zip(L, cell_counts(src, dst)))
    return Fraction(sum(_cell_messages(p) for p in cell_problems(src, dst)) * cell, src.mesh.size)


SUB = Mesh({"x": 4, "y": 6})
SUB_AXES = ["x:(1)2", "x:(2)2", "y:(1)2", "y:(2)3", "x", "y"]


def _random_type(rng: random.Random) -> ShardingType:
    while True:
        chosen = rng.sample(SUB_AXES, rng.randrange(0, 4))
        dims: list[list[str]] = [[], []]
        unreduced: list[str] = []
        for a in chosen:
            (unreduced if rng.random() < 0.3 else dims[rng.randrange(2)]).append(a)

        def at(ds: list[str]) -> str:
            return "" if not ds else "@" + (ds[0] if len(ds) == 1 else f"({','.join(ds)})")

        u = "" if not unreduced else "{U:" + (unreduced[0] if len(unreduced) == 1 else f"({','.join(unreduced)})") + "}"
        try:
            return parse(f"s32[144{at(dims[0])},72{at(dims[1])}]{u}", SUB)
        except Exception:  # overlapping sub-axes: draw again
            continue


def test_vectorised_bound_matches_the_per_cell_reference() -> None:
    rng = random.Random(12)
    pairs = rng.sample(list(exhaustive_pairs()), 300) + [(_random_type(rng), _random_type(rng)) for _ in range(300)]
    for a, b in pairs:
        L = tuple(x * rng.choice((1, 2)) for x in cells([a, b]))
        assert lower_bound_cells(a, b, L) == reference_bound(a, b, L), f"{a} -> {b}"


@pytest.mark.parametrize("src,dst", [
    ("f32[256@data,4096,8192]{U:model}", "f32[256@data,4096@model,8192]"),
    ("f32[4096@data,1024@model]", "f32[4096@model,1024@data]"),
])
def test_a_4096_device_mesh_certifies(src: str, dst: str) -> None:
    """{data=32,fsdp=16,model=8}: the former per-(cell, device) bound took 21 s here."""
    mesh = Mesh({"data": 32, "fsdp": 16, "model": 8})
    plan = redistribute(parse(src, mesh), parse(dst, mesh), cost_model=CostModel(objective="bytes"))
    cert = plan.verify()
    assert cert.ok and cert.recv_at_bound


M8 = Mesh({f"a{i}": 2 for i in range(8)})


def _refuted_with(monkeypatch: pytest.MonkeyPatch, src: str, dst: str, corrupt: object) -> VerificationError:
    """Verify the bytes plan ``src -> dst`` on 8 axes of 2 with its point-to-point schedule
    replaced by ``corrupt(schedule)``; return the refutation."""
    plan = redistribute(parse(src, M8), parse(dst, M8), cost_model=CostModel(objective="bytes"))
    real = redist.exchange.schedule
    prove_link.cache_clear()  # type: ignore[attr-defined]
    monkeypatch.setattr(redist.exchange, "schedule", lambda a, b: corrupt(real(a, b)))  # type: ignore[operator]
    try:
        with pytest.raises(VerificationError) as e:
            verify_plan(plan, check_recv=False)
    finally:
        prove_link.cache_clear()  # type: ignore[attr-defined]
    assert e.value.prop == "chain"
    return e.value


def test_a_dropped_forward_on_256_devices_is_refuted_at_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pending-sum exchange forwards completed sums (``from_output`` rounds): drop one forward
    and the device that misses it is the counterexample, with a local index and a shape."""
    dropped: list[int] = []

    def corrupt(sch: Schedule) -> Schedule:
        i = max(j for j, r in enumerate(sch.rounds) if r.from_output)
        r = sch.rounds[i]
        dropped.append(r.pairs[0][1])
        bad = Round(r.pairs[1:], r.send_offset, r.recv_offset, r.recv_valid, r.from_output)
        return Schedule(sch.cell, sch.local_copies, sch.rounds[:i] + (bad,) + sch.rounds[i + 1:], sch.recv_cells)

    e = _refuted_with(monkeypatch, "f32[4096@a0]{U:a1}", "f32[4096@a1]", corrupt)
    cex = e.counterexample
    assert cex["device"] == dropped[0] and len(cex["local_index"]) == 1 and cex["global_shape"][0] >= 1


def test_a_wrong_source_cell_on_256_devices_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read round that takes the other cell of the source's block: the sum at the destination
    holds the wrong partial."""

    def corrupt(sch: Schedule) -> Schedule:
        r = next(r for r in sch.rounds if not r.from_output)
        s = r.pairs[0][0]
        send = r.send_offset.copy()
        send[s, 0] = sch.cell[0] - send[s, 0]  # the other of the source's two cells
        bad = Round(r.pairs, send, r.recv_offset, r.recv_valid, r.from_output)
        return Schedule(sch.cell, sch.local_copies, tuple(bad if x is r else x for x in sch.rounds), sch.recv_cells)

    e = _refuted_with(monkeypatch, "f32[4096@a0,64]{U:(a1,a2)}", "f32[4096@(a1,a2),64@a0]", corrupt)
    assert "device" in e.counterexample or "local_cell" in e.counterexample


def test_a_missing_local_copy_on_256_devices_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    def corrupt(sch: Schedule) -> Schedule:
        r = sch.local_copies[0]
        valid = r.recv_valid.copy()
        valid[int(valid.nonzero()[0][-1])] = False
        bad = Round(r.pairs, r.send_offset, r.recv_offset, valid, r.from_output)
        return Schedule(sch.cell, (bad,) + sch.local_copies[1:], sch.rounds, sch.recv_cells)

    e = _refuted_with(monkeypatch, "f32[4096@a0,64]{U:(a1,a2)}", "f32[4096@(a1,a2),64@a0]", corrupt)
    assert "device" in e.counterexample and "local_index" in e.counterexample


def test_a_wide_reduction_is_linear_in_the_partials() -> None:
    """A reduce-scatter over 7 of 8 axes (128 partials): the symbolic model folds each group member's
    coordinates, so the link is a few hundred terms (it was 16 s of k^2 terms)."""
    plan = redistribute(parse("f32[4096@a0,64]{U:(a1,a2,a3,a4,a5,a6,a7)}", M8),
                        parse("f32[4096@(a0,a1,a2,a3),64@(a4,a5,a6,a7)]", M8), cost_model=CostModel(objective="bytes"))
    prove_link.cache_clear()  # type: ignore[attr-defined]
    assert verify_plan(plan).ok
