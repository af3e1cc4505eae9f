"""The merging exchange (``redist.exchange.routes``): where both types keep an unreduced
atom pending it sums every partial per cell at one root and sends the sum to one member of each
destination group lacking it, complete groups keeping theirs (the "exchange slack" programs of
``redist.bounds``). Forced on every shared-unreduced pair of two small meshes, its values are
checked against NumPy, per destination group (replicas holding their own decompositions), and
its routing, schedule and floors agree; where ``schedule`` picks it, the JAX executor agrees."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_executor import agree

import redist.exchange as E
import redist.simulate as S
from benchmarks.proofs_bench import exhaustive_pairs
from redist import Exchange, Plan
from redist.atoms import unreduced_atoms
from redist.bounds import lower_bound_bytes
from redist.exchange.figures import mode_routing
from redist.exchange.runnable import mode_schedule
from spmd_types import Mesh, ShardingType, parse

MESHES = ({"x": 2, "y": 2, "z": 2}, {"x": 2, "y": 3})


def _shared(mesh: dict[str, int]) -> list[tuple[ShardingType, ShardingType]]:
    return [(a, b) for a, b in exhaustive_pairs(meshes=(mesh,)) if unreduced_atoms(a) & unreduced_atoms(b)]


@pytest.mark.parametrize("mesh", MESHES, ids=str)
def test_forced_merging_exchange_moves_the_right_values(mesh: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "schedule", lambda old, new: mode_schedule(old, new, True))
    pairs = _shared(mesh)
    assert len(pairs) > 50
    for i, (a, b) in enumerate(pairs):
        sch = mode_schedule(a, b, True)
        r = mode_routing(a, b, True)
        assert (r.cells, r.rounds) == (sch.n_transfers, len(sch.rounds)), (a, b)
        cell = math.prod(r.cell)
        assert E.group_missing_total(a, b) // cell <= r.cells and E.reduced_cells(a, b) <= r.cells, (a, b)
        assert E.provider_cells(a, b) <= r.rounds, (a, b)
        p = Plan.build(a, (Exchange(b.dims, tuple(b.unreduced)),))
        x = np.random.default_rng(i).integers(-1000, 1000, size=a.shape).astype(np.int64)
        S.check(S.simulate(p.steps, p.all_types, S.scatter(x, a, np.random.default_rng(i))), b, x)


def test_schedule_picks_the_merging_exchange_only_where_it_receives_less() -> None:
    for a, b in _shared(MESHES[0]):
        direct, merged = mode_routing(a, b, False), mode_routing(a, b, True)
        assert E.routing(a, b) == (merged if E.merges(a, b) else direct)
        assert E.routing(a, b).cells <= direct.cells
        assert not E.merges(a, b) or (merged.cells, merged.rounds) < (direct.cells, direct.rounds)


@pytest.mark.parametrize("src,dst,cells", [
    ("s32[12@(x,y)]{U:z}", "s32[12@y]{U:z}", 10),  # a complete group beside an empty one: 15 B
    ("s32[12@x]{U:y}", "s32[12]{U:y}", 6),         # replicated complete groups: 18 B
    ("s32[12@(x,y)]{U:z}", "s32[12]{U:z}", 16),    # 24 B, was 30 B through an all-reduce
])
def test_merging_exchange_on_the_witness_pairs(src: str, dst: str, cells: int) -> None:
    """The exchange meets the bound on the witnesses of ``tests/test_bounds_witness.py``, and the
    JAX executor agrees with the simulator and NumPy."""
    mesh = Mesh(MESHES[0])
    a, b = parse(src, mesh), parse(dst, mesh)
    assert E.merges(a, b) and E.routing(a, b).cells == cells
    p = Plan.build(a, (Exchange(b.dims, tuple(b.unreduced)),))
    assert p.recv_bytes == lower_bound_bytes(a, b)
    agree(p)
