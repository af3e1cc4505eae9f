"""Plans and certificates say only what was checked: the transfer property of a plan whose
objective does not promise it is "not checked" (never proved), per-device figures carry the
busiest device beside the mean, the objectives have one set of names, misused arguments are
typed errors, and printing a plan costs no more than planning it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import meshes, pending_pairs, type_pairs

import proofs
import redist
from proofs import VerificationError, VerifyArgumentError
from redist import CostModel, CostModelError, Objective, Plan, cost_model_for, redistribute
from redist.visualize import recv_matrix
from redist_cli.main import main
from spmd_types import Mesh, ShardingTypeError
from spmd_types.errors import SizeLimitError

ABOVE = ("f32[2048@x,2048@y]", "f32[2048@y,2048@x]")
XY = Mesh({"x": 2, "y": 4})


def _above_plan() -> Plan:
    plan = redistribute(*ABOVE, XY)
    assert plan.objective is Objective.MEASURED and plan.recv_bytes > plan.lower_bound_bytes  # the premise
    return plan


# -- 1. certificates list exactly what they checked -------------------------------------------------


def test_a_plan_above_the_transfer_bound_is_never_reported_transfer_optimal() -> None:
    plan = _above_plan()
    cert = plan.verify()
    assert cert.recv_at_bound is None and not (cert.ok and cert.recv_at_bound)  # the how-to's old pattern
    assert cert.proved == ("chain", "memory") and [p.name for p in cert.unchecked] == ["recv"]
    text = str(cert)
    assert "recv      = 8*m0*m1 B (mean per device)" in text and "lower bnd = 6*m0*m1 B (mean per device)" in text
    assert any(line.strip().startswith("recv     not checked") for line in text.splitlines())
    assert text.endswith("proved: chain, memory; not checked: recv") and "all properties proved" not in text
    with pytest.raises(VerificationError) as e:  # asked for, it is refuted
        plan.verify(check_recv=True)
    assert e.value.prop == "recv"


def test_the_bytes_objective_proves_the_transfer_bound() -> None:
    cert = redistribute(*ABOVE, XY, objective="bytes").verify()
    assert cert.ok and cert.recv_at_bound is True and cert.proved == ("chain", "memory", "recv")
    assert cert.objective == "bytes" and not cert.unchecked


def test_exceeds_is_false_not_proved() -> None:
    """Where the bound is known not tight (types sharing a pending sum) a plan above it is
    ``exceeds``: ``recv_at_bound`` is False and the verdict says so; ``strict_recv`` refutes it."""
    from redist import AllReduce, DynSlice
    from spmd_types import parse

    src = parse("f32[8]{U:(x,y)}", Mesh({"x": 2, "y": 2}))
    plan = Plan.build(src, (AllReduce(axes=("x",)), DynSlice(0, ("x",))))  # 32 B where 16 B would do
    cert = plan.verify(check_recv=True)
    assert cert.recv_at_bound is False and cert.ok and cert.proved == ("chain", "memory")
    assert str(cert).endswith("proved: chain, memory; above a bound known not to be tight: recv")
    with pytest.raises(VerificationError):
        plan.verify(strict_recv=True)


def test_cli_verify_reports_each_property_and_exits_by_what_it_checked(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["verify", *ABOVE, "--mesh", "x=2,y=4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "not checked" in out and out.rstrip().endswith("proved: chain, memory; not checked: recv")
    assert main([*argv, "--check-recv"]) == 1
    err = capsys.readouterr().err
    assert "NOT CERTIFIED: property 'recv' violated" in err and "8*m0*m1 B per device on average" in err
    assert main([*argv, "--strict-recv"]) == 1
    capsys.readouterr()
    assert main([*argv, "--objective", "bytes"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("proved: chain, memory, recv")


def test_cli_verify_help_says_what_it_proves(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "transfer-optimal" not in out
    assert "under --objective bytes or with --check-recv" in out and "measured,bytes,alpha-beta" in out


def test_cli_budget_takes_units(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["budget", *ABOVE, "--mesh", "x=2,y=4"]
    assert main([*argv, "--bytes", "16GB"]) == 0
    assert "budget 16,000,000,000 B/device: FITS" in capsys.readouterr().out
    assert main([*argv, "--bytes", "1MiB"]) == 1
    assert "budget 1,048,576 B/device: DOES NOT FIT" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv, "--bytes", "16 parsecs"])
    assert "is not a byte count" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--bytes", "1e6", "--max-shape", "abc"])
    assert "each size must be a whole number >= 1 or '*'" in capsys.readouterr().err
    assert main([*argv, "--bytes", "1e6", "--max-shape", "*,4096,3"]) == 2
    assert "max_shape must be a list of 2 sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["verify", *ABOVE, "--mesh", "x=2,y=4", "--timeout-ms", "-1"])
    captured = capsys.readouterr()
    assert "not a whole number of milliseconds" in captured.err and captured.out == ""


def test_misused_budget_arguments_are_typed_errors() -> None:
    plan = redistribute("f32[8@x]", "f32[8]", XY)
    for args, kw in [(("x",), {}), ((-5,), {}), ((1.5,), {}), ((100,), {"max_shape": [1, 2]}),
                     ((100,), {"max_shape": [0]}), ((100,), {"transient": "yes"}), ((100,), {"timeout_ms": "x"})]:
        with pytest.raises(VerifyArgumentError):
            proofs.check_budget(plan, *args, **kw)  # type: ignore[arg-type]
    assert proofs.check_budget(plan, 16e9).fits


# -- 2. per-device figures ------------------------------------------------------------------------------


def test_the_busiest_device_is_reported_beside_the_mean() -> None:
    plan = _above_plan()
    rows = [recv_matrix(s, plan.all_types[i], plan.all_types[i + 1]).sum(axis=1) for i, s in enumerate(plan.steps)]
    assert [r.tolist() for r in rows] == [[0, 0, 2 << 20, 2 << 20, 2 << 20, 2 << 20, 0, 0], [1 << 20] * 8]
    assert plan.step_recv_bytes_max == (2 << 20, 1 << 20) and plan.recv_bytes_max == 3 << 20
    assert plan.step_recv_bytes_mean == (1 << 20, 1 << 20)
    assert plan.recv_bytes_mean == plan.recv_bytes == 2 << 20 and plan.lower_bound_bytes_max == 2 << 20
    lines = str(plan).splitlines()
    assert lines[1].endswith(": receives 1,048,576 B (1 MiB) per device on average, 2,097,152 B (2 MiB) on the "
                             "busiest device, 1 collective")
    assert lines[4].endswith(": receives 1,048,576 B (1 MiB) on every device, 1 collective")
    assert lines[-1].startswith("  receives 2,097,152 B (2 MiB) per device on average (lower bound 1,572,864 B "
                                "(1.5 MiB)), 3,145,728 B (3 MiB) on the busiest device of each step summed "
                                "(lower bound 2,097,152 B (2 MiB)); peak")


def _check_busiest(plan: Plan) -> None:
    ts = plan.all_types
    for i, step in enumerate(plan.steps):
        rows = recv_matrix(step, ts[i], ts[i + 1]).sum(axis=1)
        assert plan.step_recv_bytes_max[i] == pytest.approx(float(rows.max()), rel=1e-9, abs=1e-9), (i, step)
        assert plan.measures[i].recv_bytes == pytest.approx(float(rows.mean()), rel=1e-9, abs=1e-9)
    assert plan.recv_bytes_max >= plan.recv_bytes - 1e-9


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(list(Objective)))
def test_busiest_device_matches_the_traffic_matrix(data: st.DataObject, objective: Objective) -> None:
    """``step_recv_bytes_max`` is the largest row sum of ``redist.visualize.recv_matrix`` (an
    independent count from the schedule and the groups), with and without pending sums."""
    mesh = data.draw(meshes(max_devices=8))
    src, dst = data.draw(type_pairs(mesh, unreduced=True, max_rank=2, dtypes=("f32", "bf16")))
    _check_busiest(redistribute(src, dst, objective=objective))


@settings(max_examples=25, deadline=None)
@given(pending_pairs(max_devices=8))
def test_busiest_device_with_pending_sums_on_both_sides(pair: tuple[object, object]) -> None:
    src, dst = pair
    _check_busiest(redistribute(src, dst, objective="bytes"))  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_the_per_device_bound_is_what_the_busiest_device_lacks(data: st.DataObject) -> None:
    mesh = data.draw(meshes(max_devices=8))
    src, dst = data.draw(type_pairs(mesh, max_rank=2, dtypes=("f32",)))
    plan = redistribute(src, dst, objective="bytes")
    from spmd_types.layout import overlap_elements
    lacks = (dst.local_size - overlap_elements(src, dst)) * dst.itemsize
    assert plan.lower_bound_bytes_max == float(np.max(lacks))
    assert plan.recv_bytes_max >= plan.lower_bound_bytes_max


# -- 3. one set of objective names, typed errors ----------------------------------------------------


def test_objective_names_and_cost_models() -> None:
    assert [o.value for o in Objective] == ["measured", "bytes", "alpha-beta"]
    for o in Objective:
        for spelled in (o, o.value):
            plan = redistribute(*ABOVE, XY, objective=spelled)
            assert plan.objective is o and plan.cost_model == cost_model_for(o, XY)
    assert cost_model_for("measured").measured and not cost_model_for("alpha-beta").measured
    same = redistribute(*ABOVE, XY, objective="bytes", cost_model=CostModel(objective="bytes", latency_s=1e-5))
    assert same.objective is Objective.BYTES


@pytest.mark.parametrize("kwargs, words", [
    ({"cost_model": "bytes"}, ["cost_model='bytes' is a string", "objective='bytes'"]),
    ({"cost_model": CostModel}, ["cost_model=CostModel is a class"]),
    ({"cost_model": {"objective": "bytes"}}, ["got dict"]),
    ({"objective": "time"}, ["'time' is ambiguous", "measured, bytes, alpha-beta"]),
    ({"objective": "fastest"}, ["objective 'fastest' is not one of measured, bytes, alpha-beta"]),
    ({"objective": 3}, ["objective must be a redist.Objective", "got int"]),
    ({"objective": "bytes", "cost_model": CostModel(objective="alpha-beta")}, ["objective='bytes' conflicts"]),
])
def test_misused_objective_arguments_are_typed_errors(kwargs: dict[str, object], words: list[str]) -> None:
    with pytest.raises(CostModelError) as e:
        redistribute(*ABOVE, XY, **kwargs)  # type: ignore[arg-type]
    assert isinstance(e.value, redist.RedistError) and all(w in str(e.value) for w in words), str(e.value)


def test_cost_model_needs_an_objective() -> None:
    with pytest.raises(CostModelError, match=r"CostModel\(\) needs an objective: 'measured'.*'bytes'.*'alpha-beta'"):
        CostModel()
    with pytest.raises(CostModelError, match="needs measured kind_costs"):
        CostModel(objective="measured")
    with pytest.raises(CostModelError, match="'time' is ambiguous"):
        CostModel(objective="time")
    assert CostModel(objective=Objective.BYTES) == CostModel(objective="bytes")
    assert hash(CostModel(objective=Objective.BYTES)) == hash(CostModel(objective="bytes"))


@pytest.mark.parametrize("call, words", [
    (lambda p: p.verify(timeout_ms="x"), "timeout_ms must be a positive int"),
    (lambda p: p.verify(timeout_ms=-1), "timeout_ms must be a positive int"),
    (lambda p: p.verify(timeout_ms=True), "timeout_ms must be a positive int"),
    (lambda p: p.verify(check_recv="yes"), "check_recv must be True, False or None"),
    (lambda p: p.verify(strict_recv=1), "strict_recv must be True or False"),
    (lambda p: p.verify(timeout=5), "unknown keyword(s) timeout; it accepts timeout_ms, check_recv"),
    (lambda p: p.verify(5), "keyword arguments only"),
])
def test_misused_verify_arguments_are_typed_errors(call, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(VerifyArgumentError) as e:
        call(redistribute("f32[8@x]", "f32[8]", XY))
    assert isinstance(e.value, redist.RedistError) and words in str(e.value)
    with pytest.raises(VerifyArgumentError):
        proofs.verify_plan(redistribute("f32[8@x]", "f32[8]", XY), timeout_ms=0)


# -- 4. the two crashes ---------------------------------------------------------------------------------


def test_sizes_past_int64_are_a_typed_error(capsys: pytest.CaptureFixture[str]) -> None:
    big = "s8[9223372036854775808]"
    with pytest.raises(SizeLimitError, match="dimension 0 of s8.9223372036854775808. has size"):
        redistribute(big, big + "{U:x}", Mesh({"x": 2}))
    assert main(["plan", big, big + "{U:x}", "--mesh", "x=2"]) == 2
    err = capsys.readouterr().err
    assert "SizeLimitError: dimension 0" in err and "Traceback" not in err


def test_a_pending_sum_on_a_64_axis_mesh_plans_and_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """Axes of size 1 fill the mesh's 64 axes; the group sums once reshaped to 66 NumPy dimensions."""
    mesh = Mesh({f"a{i}": 2 if i < 3 else 1 for i in range(64)})
    plan = redistribute("f32[8@a0]", "f32[8]{U:a1}", mesh)
    assert plan.recv_bytes_max >= plan.recv_bytes and "plan f32[8@a0] -> f32[8]{U:a1}" in str(plan)
    spec = ",".join(f"a{i}={2 if i < 3 else 1}" for i in range(64))
    assert main(["plan", "f32[8@a0]", "f32[8]{U:a1}", "--mesh", spec]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_bad_type_text_stays_a_type_error() -> None:
    with pytest.raises(ShardingTypeError):
        redistribute("f32[8@q]", "f32[8]", XY)


# -- 5. printing costs no more than planning ----------------------------------------------------------


def test_printing_a_plan_on_sixteen_axes_lists_groups_without_the_mesh_table() -> None:
    mesh = Mesh({f"a{i}": 2 for i in range(16)})
    text = str(redistribute("f32[65536@a0]{U:a1}", "f32[65536@a1]", mesh))
    assert "groups of 2 devices {0,16384} {1,16385} {2,16386} {3,16387} and 32764 more" in text
    assert "receives it whole from one holder: 0->32768, 32768->16384 and 32760 more" in text  # one class's pairs
    assert "131,072 B (128 KiB) on the busiest device, 1 collective" in text


def test_printing_on_a_mesh_too_large_to_enumerate() -> None:
    mesh = Mesh({f"a{i}": 2 for i in range(23)})  # 8,388,608 devices: past MAX_ENUMERATED_DEVICES
    text = str(redistribute("f32[65536@a0]{U:a1}", "f32[65536@a1]", mesh))
    assert "0->4194304, 4194304->2097152 and 4194296 more" in text
    huge = Mesh({f"a{i}": 2 for i in range(47)})  # a plan that was built prints, whatever the mesh size
    lines = str(redistribute("f32[65536@(a0,a1)]", "f32[65536@a0]", huge)).splitlines()
    assert lines[-1].startswith("  receives 65,536 B (64 KiB) on every device (the lower bound); peak 131,072 B")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_one_class_describes_an_exchange_as_the_whole_schedule_does(data: st.DataObject) -> None:
    """Describing from one class of devices (large meshes) prints the same counts as the whole schedule."""
    import redist.render as render

    mesh = data.draw(meshes(max_devices=16))
    src, dst = data.draw(type_pairs(mesh, unreduced=True, max_rank=2, dtypes=("f32",)))
    plan = redistribute(src, dst, objective="bytes")
    whole = str(plan).splitlines()
    old = render.LIFTED_DEVICES
    render.LIFTED_DEVICES = 0
    try:
        by_class = str(plan).splitlines()
    finally:
        render.LIFTED_DEVICES = old
    for a, b in zip(whole, by_class, strict=True):
        if "receives it whole from one holder" in a:  # one class's pairs; the count of all of them
            assert a.rsplit(" and ", 1)[-1] == b.rsplit(" and ", 1)[-1] if " more" in a else len(a) >= len(b)
        else:
            assert a == b


def test_printing_group_lists_on_a_mesh_too_large_to_enumerate() -> None:
    from redist.render import groups_text
    mesh = Mesh({f"a{i}": 2 for i in range(47)})
    assert groups_text(mesh, ("a1",)) == "{0,35184372088832} {1,35184372088833} {2,35184372088834} " \
                                        "{3,35184372088835} and 70368744177660 more"
    assert groups_text(mesh, tuple(f"a{i}" for i in range(20, 47))) == (
        "{134,217,728 devices from 0} {134,217,728 devices from 134217728} {134,217,728 devices from "
        "268435456} {134,217,728 devices from 402653184} and 1048572 more")


def test_redistribute_docstring_examples_run() -> None:
    import doctest

    from redist import api
    tests = [t for t in doctest.DocTestFinder().find(api.redistribute, "redistribute") if t.examples]
    assert len(tests) == 1 and len(tests[0].examples) >= 4 and "Raises:" in (api.redistribute.__doc__ or "")
    runner = doctest.DocTestRunner()
    runner.run(tests[0])
    assert runner.summarize(verbose=False).failed == 0


def test_cli_plan_labels_the_mean_and_the_busiest_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *ABOVE, "--mesh", "x=2,y=4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "received (mean; busiest device)" in out
    assert "1,048,576 B (1 MiB) per device on average," in out and "2,097,152 B (2 MiB) on the busiest device" in out
    assert "received per device (mean) │ 2,097,152 B (2 MiB) │ lower bound 1,572,864 B (1.5 MiB): above" in out
    assert "received by the busiest device │ 3,145,728 B (3 MiB) │ lower bound 2,097,152 B (2 MiB): above" in out
    assert "objective measured, measured cost profile" in out
    assert main(["plan", "f32[8@x]", "f32[8]", "--mesh", "x=2,y=4"]) == 0
    out = capsys.readouterr().out
    assert "received per device (every device alike)" in out and "busiest device │" not in out
