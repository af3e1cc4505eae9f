"""``benchmarks.plan_ab``: plans written by their steps are read back as those steps, and nothing
but steps, sub-axes and literals is evaluated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.golden import golden_cases
from benchmarks.plan_ab import parse_steps
from redist import redistribute
from redist.errors import RedistError
from redist.plan import Plan
from spmd_types import Mesh, parse

PLANS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "2026-11-25-gloo-rounds-rule-plans.json"


def test_every_golden_plan_reads_back_as_its_steps() -> None:
    """Every step class and a sub-axis round-trip through ``repr``."""
    kinds, sub_axes = set(), 0
    for c in golden_cases():
        steps = redistribute(c.src_type, c.dst_type, c.mesh).steps
        assert parse_steps(repr(steps)) == steps, c.name
        kinds |= {type(s).__name__ for s in steps}
        sub_axes += "SubAxis(" in repr(steps)
    assert {"Exchange", "AllToAll", "AllGather", "ReduceScatter", "Permute", "DynSlice"} <= kinds and sub_axes


def test_the_committed_plan_pairs_reach_their_destinations() -> None:
    """The file the results cite: both plans of each move type-check to its destination."""
    entries = json.loads(PLANS.read_text())
    assert len(entries) == 7
    for e in entries:
        mesh = Mesh(e["mesh"])
        src, dst = parse(e["src"], mesh), parse(e["dst"], mesh)
        for k in ("a", "b"):
            assert Plan.build(src, parse_steps(e[k])).dst == dst, (e["src"], k)


@pytest.mark.parametrize("text, named", [
    ("__import__('os').system('true')", "__import__('os').system('true')"),
    ("(AllGather(dim=0, axes=(x,)),)", "x"),
    ("(1, 2)", "expected a tuple of steps"),
    ("(AllGather(dim=0,", "do not parse"),
    ("(AllGather(dimm=0, axes=('x',)),)", "AllGather(dimm=0, axes=('x',))\": AllGather.__init__() got an unexpected keyword argument 'dimm'"),
    ("(AllGather(0),)", "missing 1 required positional argument: 'axes'"),
])
def test_anything_else_is_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(RedistError, match=re.escape(named)):
        parse_steps(text)
