"""Every pair of types (unreduced included) on small meshes and ranks 1-3, through the simulator.

The thorough profile checks every pair (18,580); the default profile a fixed seeded sample.
"""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import THOROUGH
from synth_checks import BYTES, assert_plan_ok

from redist import redistribute
from redist.enumerate import all_types
from spmd_types import Mesh

MESHES = {"x2y2": Mesh({"x": 2, "y": 2}), "x2y3": Mesh({"x": 2, "y": 3}), "x2y2z2": Mesh({"x": 2, "y": 2, "z": 2})}
SHAPES = {1: (12,), 2: (12, 6), 3: (4, 6, 2)}
CHUNKS = 4
SAMPLE = 120  # pairs per (mesh, rank, chunk) in the default profile


def _pairs(mesh_name: str, rank: int, chunk: int) -> list:  # type: ignore[type-arg]
    ts = list(all_types(MESHES[mesh_name], SHAPES[rank], "s32"))
    pairs = list(itertools.product(ts, ts))
    random.Random(f"{mesh_name}-{rank}").shuffle(pairs)
    mine = pairs[chunk::CHUNKS]
    return mine if THOROUGH else mine[:SAMPLE]


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_every_pair(mesh_name: str, rank: int, chunk: int) -> None:
    pairs = _pairs(mesh_name, rank, chunk)
    assert pairs
    for i, (s, d) in enumerate(pairs):
        assert_plan_ok(redistribute(s, d, cost_model=BYTES), seed=i)


def test_type_counts() -> None:
    """The enumeration is what we think it is (so the sweep's size in the notes is right)."""
    counts = {(m, r): sum(1 for _ in all_types(MESHES[m], SHAPES[r], "s32")) for m in MESHES for r in SHAPES}
    # each axis on dim 0, unreduced or unused (3*3), and both on dim 0 in two orders (+1)
    assert counts[("x2y2", 1)] == 10
    assert sum(c * c for c in counts.values()) == 18580
