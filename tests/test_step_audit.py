"""The per-step audit (``benchmarks.studies.step_audit``): which steps it times, and how it reports them."""

from __future__ import annotations

from benchmarks.random_pairs import PairSpec
from benchmarks.studies.step_audit import Audited, _as_u16, steps_of, table
from redist.profile import packaged_profile
from redist.steps import Comm
from spmd_types.dtypes import is_16bit_float


def test_steps_are_single_communicating_steps_a_partition_spec_expresses() -> None:
    plans = steps_of(PairSpec(count=12))
    assert plans
    for p in plans:
        assert len(p.steps) == 1 and p.steps[0].comm is not Comm.LOCAL
        assert not any(":" in str(t) for t in (p.src, p.dst))


def test_u16_twin_moves_the_same_bytes_the_same_way() -> None:
    floats = [p for p in steps_of(PairSpec(count=24)) if is_16bit_float(p.src.dtype) and not p.src.unreduced]
    assert floats
    for p in floats:
        twin = _as_u16(p)
        assert twin.steps == p.steps and twin.src.dtype == "u16" and not is_16bit_float(twin.src.dtype)
        assert twin.recv_bytes == p.recv_bytes and twin.dst.local_shape == p.dst.local_shape


def test_table_reports_priced_over_measured_per_kind_and_width() -> None:
    prof = packaged_profile("cpu")
    assert prof is not None
    cm = prof.cost_model("measured")
    plans = steps_of(PairSpec(count=12))
    rows = [Audited(p, p.time_s / 2, p.time_s / 4 if is_16bit_float(p.src.dtype) else None) for p in plans]
    lines = table(rows, {"shipped": cm})
    body = [line for line in lines if line.startswith("| ") and not line.startswith("| step")]
    assert len(body) == len({(type(p.steps[0]).__name__, is_16bit_float(p.src.dtype)) for p in plans})
    assert all("2.00x (2.00-2.00)" in line for line in body)  # priced at twice each measurement
    assert all(line.endswith("2.00x (2.00-2.00) |") for line in body if "16-bit float" in line)
    assert "median error 100%" in lines[-1]
