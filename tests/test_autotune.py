"""``redist.autotune``: the planner's best plans timed on the backend, the fastest returned."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from redist import CostModel, autotune, redistribute
from redist.arrays import check_output, make_input
from redist.caches import clear_caches
from redist.errors import RedistError
from redist.launch import spawn_local
from redist.synth import ranked
from spmd_types import Mesh, parse
from spmd_types.jax_interop import mesh_to_jax

MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "s32[4,8@y,512,16@x]", "s32[4,8@x,512@y,16]"  # rand166: near-tied plans on the model


def test_candidates_open_with_the_models_choice_and_are_distinct_and_within_bound() -> None:
    s, d = parse(SRC, MESH), parse(DST, MESH)
    chosen = redistribute(s, d)
    plans = ranked(s, d, chosen.cost_model, 4)
    assert plans[0].steps == chosen.steps and 1 < len(plans) <= 4
    assert len({p.steps for p in plans}) == len(plans)
    assert all(p.dst == d and p.peak_bytes <= max(s.local_bytes, d.local_bytes) for p in plans)


def test_bytes_objective_candidates_all_receive_the_least() -> None:
    s, d = parse(SRC, MESH), parse(DST, MESH)
    plans = ranked(s, d, CostModel(objective="bytes"), 8)
    assert plans[0].recv_bytes == redistribute(s, d, cost_model=CostModel(objective="bytes")).recv_bytes
    assert {p.recv_bytes for p in plans} == {plans[0].recv_bytes}


def test_the_fastest_trial_is_returned_and_runs_correctly() -> None:
    clear_caches("plans")
    tuned = autotune(SRC, DST, MESH, top=3, reps=5)
    assert len(tuned.trials) == 3 and tuned.trials[0].plan.steps == redistribute(SRC, DST, MESH).steps
    fastest = min(tuned.trials, key=lambda t: t.measured_s)
    model = tuned.trials[0]
    switched = fastest.measured_s < model.measured_s * 0.9
    assert tuned.plan is (fastest.plan if switched else model.plan) and tuned.speedup >= 1.0
    s = parse(SRC, MESH)
    jm = mesh_to_jax(MESH, explicit=True)
    x, expected = make_input(s, jm)
    assert check_output(tuned.plan(x), expected, parse(DST, MESH)) is None
    assert autotune(SRC, DST, MESH, top=3, reps=5) is tuned  # cached


def test_top_one_times_nothing() -> None:
    tuned = autotune(SRC, DST, MESH, top=1)
    assert tuned.plan.steps == redistribute(SRC, DST, MESH).steps
    assert len(tuned.trials) == 1 and np.isnan(tuned.trials[0].measured_s) and tuned.speedup == 1.0


@pytest.mark.parametrize("top, reps, margin, named", [(0, 5, 0.1, "top=0"), (3, 0, 0.1, "reps=0"),
                                                     (3, 5, 1.0, "margin=1.0"), (3, 5, -0.1, "margin=-0.1")])
def test_bad_arguments_are_refused(top: int, reps: int, margin: float, named: str) -> None:
    with pytest.raises(RedistError, match=f"autotune: {named} is out of range"):
        autotune(SRC, DST, MESH, top=top, reps=reps, margin=margin)


def test_without_a_margin_the_fastest_wins() -> None:
    tuned = autotune(SRC, DST, MESH, top=3, reps=5, margin=0.0)
    assert tuned.plan is min(tuned.trials, key=lambda t: t.measured_s).plan


def test_every_process_makes_the_same_choice_from_every_process_times() -> None:
    worker = str(Path(__file__).with_name("autotune_worker.py"))
    results = spawn_local(2, 4, lambda i, port: [worker, str(i), str(port)], timeout_s=240)
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    found = [re.search(r"CHOICE (\d+) FASTEST (\d+) TRIALS (\d+) CORRECT (\w+) TIMES (\S+)", r.stdout) for r in results]
    lines = [m for m in found if m is not None]
    assert len(lines) == 2, [r.stdout for r in results]
    assert lines[0].group(1) == lines[1].group(1)  # one program on every process
    assert lines[0].group(5) == lines[1].group(5)  # from one table: per plan, the slowest process's median
    assert all(m.group(1) == m.group(2) and m.group(3) == "3" and m.group(4) == "True" for m in lines)
