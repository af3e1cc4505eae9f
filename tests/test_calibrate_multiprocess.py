"""``redist calibrate`` across processes (issue 11): every process times the same samples under
``jax.distributed`` (Gloo over 127.0.0.1), process 0 writes a profile with an in-process and a
cross-process fit per kind; the planner charges the cross fit to axes whose groups span processes.
Exact facts only (what was timed, where, what was written), never timings."""

from __future__ import annotations

import sys
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from redist.cost import CostModel, KindCost, crosses
from redist.profile import Profile, Sample, load_profile, process_crossing_axes
from spmd_types import Axis, SubAxis


def test_calibrate_across_two_processes_writes_both_fits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    out = tmp_path / "gloo.json"
    r = subprocess.run(
        [sys.executable, "-m", "redist_cli", "calibrate", "--local-processes", "2", "--devices", "4", "--reps", "2",
         "--kinds", "all_to_all,exchange", "--sizes-kib", "64", "--out", str(out)],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    prof = load_profile(out)
    assert dict(prof.kinds).keys() == dict(prof.cross_kinds).keys() == {"all_to_all", "exchange"}
    # 2 devices per process: groups of 2 as the major axis (across) and the minor (inside), of 4 across;
    # each with whole rows, with rows of 3 lengths written short and read short (``redist.measure.written``),
    # and with cells that are boxes (``calibrate._box_cell_moves``)
    where = Counter((s.kind, s.cross) for s in prof.samples)
    assert where == {("all_to_all", True): 16, ("all_to_all", False): 8, ("exchange", True): 16, ("exchange", False): 8}
    assert {s.strided_bytes > 0 for s in prof.samples} == {True, False}
    assert prof.copy_Bps > 0


def _fake_mesh(procs: list[list[int]], names: tuple[str, ...]) -> SimpleNamespace:
    devices = np.vectorize(lambda p: SimpleNamespace(process_index=p), otypes=[object])(np.array(procs))
    jm = SimpleNamespace(devices=devices, axis_names=names)
    return SimpleNamespace(to_jax=lambda: jm)


@pytest.mark.parametrize("procs, crossing", [
    ([[0, 0, 0, 0], [1, 1, 1, 1]], ("x",)),   # 2 processes x 4 devices on {x=2, y=4}
    ([[0, 0, 1, 1], [2, 2, 3, 3]], ("x", SubAxis("y", 1, 2))),  # 4 x 2: y's major half spans processes too
    ([[0, 1, 2, 3], [4, 5, 6, 7]], ("x", "y")),  # one device per process
    ([[0, 0, 0, 0], [0, 0, 0, 0]], ()),       # one process
])
def test_process_crossing_axes(procs: list[list[int]], crossing: tuple[Axis, ...]) -> None:
    assert process_crossing_axes(_fake_mesh(procs, ("x", "y"))) == crossing


def test_crossing_factors_of_a_longer_axis() -> None:
    # {x=8} over 2 processes of 4: only the top factor crosses; over 4 of 2, the top two (one run)
    assert process_crossing_axes(_fake_mesh([[0] * 4 + [1] * 4], ("w", "x"))) == (SubAxis("x", 1, 2),)
    assert process_crossing_axes(_fake_mesh([[0, 0, 1, 1, 2, 2, 3, 3]], ("w", "x"))) == (SubAxis("x", 1, 4),)


def test_a_sub_axis_inside_processes_is_charged_inside() -> None:
    """On 4 processes of 2 devices ``y:(2)2`` of {x=2, y=4} stays in a process: an all-to-all over
    it costs the in-process fit; over ``y:(1)2``, ``y`` or ``x`` the cross one."""
    inside, across = KindCost(1e-4, 0.0, 1e9), KindCost(1e-3, 0.0, 1e8)
    cm = CostModel(objective="measured", kind_costs=(("all_to_all", inside),), cross_axes=("x", SubAxis("y", 1, 2)),
                   cross_kind_costs=(("all_to_all", across),))
    assert cm.measured_kind("all_to_all", {SubAxis("y", 2, 2)}) == inside
    for axes in ({SubAxis("y", 1, 2)}, {"y"}, {"x"}, {SubAxis("y", 1, 4)}, {SubAxis("y", 2, 2), "x"}):
        assert cm.measured_kind("all_to_all", axes) == across, axes
    assert crosses([SubAxis("y", 1, 2)], ["y"]) and not crosses([SubAxis("y", 1, 2)], ["x", SubAxis("y", 2, 2)])


def test_cross_costs_charge_only_crossing_axes() -> None:
    inside, across = KindCost(1e-4, 0.0, 1e9), KindCost(1e-3, 0.0, 1e8)
    prof = Profile("cpu", "cpu", (("all_to_all", inside),), 1e9,
                   (Sample("all_to_all", 1, 0, 1e-4), Sample("all_to_all", 1, 0, 1e-3, True)),
                   (("all_to_all", across),))
    cm = prof.cost_model("measured", ["x"])
    assert cm.kind_time("all_to_all", {"y"}, 1, 1e6) == pytest.approx(1e-4 + 1e-3)
    assert cm.kind_time("all_to_all", {"x", "y"}, 1, 1e6) == pytest.approx(1e-3 + 1e-2)
    assert cm.kind_time("all_to_all:2", {"x"}, 1, 1e6) == pytest.approx(1e-3 + 1e-2)  # the plain kind's
    # without the mesh's crossing axes every axis is charged as crossing
    assert prof.cost_model("measured").kind_time("all_to_all", {"y"}, 1, 1e6) == pytest.approx(1e-3 + 1e-2)
    assert Profile.from_json(prof.to_json()) == prof
    assert CostModel(objective="bytes").measured_kind("all_to_all") is None


def test_a_kind_timed_only_across_processes_is_charged_inside_too() -> None:
    across = KindCost(1e-3, 0.0, 1e8)
    cm = CostModel(objective="measured", cross_axes=("x",), cross_kind_costs=(("permute", across),))
    assert cm.measured_kind("permute", {"y"}) == cm.measured_kind("permute", {"x"}) == across


TYPED = {"all_gather", "all_to_all", "reduce_scatter", "all_reduce", "all_reduce_slice"}


@pytest.mark.parametrize("name", ["cpu-gloo", "cpu-gloo-4"])
def test_shipped_gloo_profiles_cover_every_kind_both_ways(name: str) -> None:
    from redist.calibrate import _own_key, _p2p, _typed
    from redist.measure import profile_kind
    from redist.profile import PROFILE_DIR

    prof = load_profile(PROFILE_DIR / f"{name}.json")
    # exactly the keys today's calibration writes (a profile made before 16-bit moves ran on bit
    # patterns had all_gather:2 and an exchange:2 that meant moves, not sums: regenerate it)
    current = {profile_kind(p.steps[0], p.src) for p in (*_typed(8, 4, (64,)), *_p2p(8, 4, (64,))) if _own_key(p)}
    assert TYPED | {"exchange", "exchange:2", "permute", "all_to_all:2"} <= current
    assert dict(prof.cross_kinds).keys() == current
    # inside a process: no 2-axis permute fits there, and the summing all-to-all's layouts span processes
    assert dict(prof.kinds).keys() == current - {"permute", "all_to_all:2"}
    assert {s.cross for s in prof.samples} == {True, False}


def test_one_process_uses_the_one_process_profile() -> None:
    from redist.profile import default_cost_model, packaged_profile, runtime_profile, runtime_profile_name

    assert runtime_profile_name() == "cpu"
    assert runtime_profile() == packaged_profile("cpu")
    assert default_cost_model(None).cross_kind_costs == ()
