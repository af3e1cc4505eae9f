"""``benchmarks.studies.plan_ab``: plans written by their steps are read back as those steps, and nothing
but steps, sub-axes and literals is evaluated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.golden import golden_cases
from benchmarks.steps_text import parse_steps
from benchmarks.studies.plan_ab import gloo_cost_model, load_moves, main
from redist import redistribute
from redist.errors import RedistError
from redist.launch import without_gloo_logs

PLANS = Path(__file__).resolve().parent.parent / "benchmarks" / "studies" / "results" / "2026-11-25-gloo-rounds-rule-plans.json"


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
    moves = load_moves(str(PLANS), gloo_cost_model)
    assert len(moves) == 7
    for m in moves:
        assert all(p.dst == m.dst for p in m.plans.values()), m.src


_GOOD = {"mesh": {"x": 2, "y": 4}, "src": "f32[64@x,64]", "dst": "f32[64,64@x]",
         "a": "(AllToAll(src_dim=0, dst_dim=1, axes=('x',)),)", "b": "(Exchange(dims=((), ('x',)), unreduced=None),)"}


@pytest.mark.parametrize("content, named", [
    (None, "No such file"),
    ("[{", "is not JSON"),
    ("{}", "expected a non-empty list of moves, got dict"),
    ("[]", "expected a non-empty list of moves"),
    (json.dumps([{"mesh": {"x": 2}}]), "move 0: expected an object with keys mesh, src, dst, a, b; got ['mesh']"),
    (json.dumps([_GOOD, [1]]), "move 1: expected an object with keys"),
    (json.dumps([_GOOD | {"mesh": {"x": "2"}}]), "'mesh' must map axis names to sizes"),
    (json.dumps([_GOOD | {"a": ["AllGather"]}]), "'a' must be a string"),
    (json.dumps([_GOOD | {"b": "(DynSlice(dim=1, axes=('y',)),)"}]), "plan 'b' ends at f32[64@x,64@y]"),
    (json.dumps([_GOOD | {"a": "(AllGather(dim=1, axes=('x',)),)"}]), "plan 'a' does not type-check"),
    (json.dumps([_GOOD | {"mesh": {"x": 2, "y": 2}}]), "move 0: mesh {x=2,y=2} has 4 devices; the processes hold 8"),
    (json.dumps([_GOOD | {"src": "f32[64@z,64]"}]), "move 0: "),
    (json.dumps([_GOOD | {"mesh": {"x": 0, "y": 4}}]), "move 0: "),
])
def test_a_bad_plans_file_is_refused_naming_what_is_wrong(tmp_path: Path, content: str | None, named: str) -> None:
    path = tmp_path / "plans.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RedistError, match=re.escape(named)):
        load_moves(str(path), gloo_cost_model)


def test_the_command_refuses_a_bad_file_before_starting_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plans.json"
    path.write_text(json.dumps([_GOOD | {"a": "()"}]))
    assert main([str(path)]) == 2
    assert "plan 'a' ends at f32[64@x,64], not the destination f32[64,64@x]" in capsys.readouterr().err


@pytest.mark.parametrize("processes", ["3", "0", "16"])
def test_the_command_refuses_processes_that_do_not_split_the_devices(processes: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(PLANS), "--processes", processes]) == 2
    assert f"--processes {processes} does not split 8 devices evenly" in capsys.readouterr().err


def test_gloo_logs_are_cut_out_of_our_lines() -> None:
    """Gloo prints its connections to stdout, sometimes in the middle of a line of ours."""
    log = "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1\n"
    text = f"f32[8@x] -> f32[8@y] on {{x=2,y=2}}: O{log}K\n  a/b 1.00x\n{log}"
    assert without_gloo_logs(text) == "f32[8@x] -> f32[8@y] on {x=2,y=2}: OK\n  a/b 1.00x\n"


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
