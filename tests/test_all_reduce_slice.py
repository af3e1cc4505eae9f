"""``AllReduceSlice``, the step added through the facet tables (issue 10): it has every facet,
the synthesizer offers it as a variant of ``ReduceScatter`` and keeps it only where the cost model
says it is faster, and z3 certifies plans that use it. (Its JAX lowering is checked against the
simulator with the other steps in ``tests/test_executor.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

import proofs  # noqa: F401  (registers plan.verify())
from proofs import VerificationError
from redist import AllReduceSlice, CostModel, Plan, ReduceScatter, redistribute
from redist.measure import measure
from redist.simulate import check, scatter, simulate
from spmd_types import Mesh, parse

MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "f32[64@x,32]{U:y}", "f32[64@(x,y),32]"


def test_same_typing_twice_the_ring_traffic() -> None:
    src = parse(SRC, MESH)
    rs, ars = ReduceScatter(0, ("y",)), AllReduceSlice(0, ("y",))
    assert rs.apply(src) == ars.apply(src) == parse(DST, MESH)
    cm = CostModel(objective="bytes")
    m_rs, m_ars = measure(rs, src, rs.apply(src), cm), measure(ars, src, ars.apply(src), cm)
    assert m_ars.recv_bytes == 2 * m_rs.recv_bytes == 2 * 3 / 4 * src.local_bytes
    assert m_rs.collectives == m_ars.collectives == 1


def test_never_chosen_for_bytes_chosen_where_reduce_scatter_is_slow() -> None:
    assert [s.kind for s in redistribute(SRC, DST, MESH, cost_model=CostModel(objective="bytes")).steps] == [
        "reduce_scatter"]
    # e.g. a calibrated CPU profile: reduce-scatter, point-to-point rounds and all-to-alls (an
    # exchange run as one prices as all_to_all) slower than the model
    slow_rs = CostModel.make(objective="alpha-beta", kind_time_factor={"reduce_scatter": 4.0, "exchange": 4.0, "all_to_all": 4.0})
    plan = redistribute(SRC, DST, MESH, cost_model=slow_rs)
    assert [s.kind for s in plan.steps] == ["all_reduce_slice"]
    # the bytes objective keeps its transfer guarantee whatever the per-kind factors say
    by_bytes = CostModel.make(objective="bytes", kind_time_factor={"reduce_scatter": 4.0})
    assert redistribute(SRC, DST, MESH, cost_model=by_bytes).recv_bytes == plan.recv_bytes / 2


def test_simulated_values_and_certificate() -> None:
    plan = Plan.build(parse(SRC, MESH), (AllReduceSlice(0, ("y",)),))
    g = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    xs = scatter(g, plan.src, np.random.default_rng(0))
    check(simulate(plan.steps, plan.all_types, xs), plan.dst, g)
    cert = plan.verify(check_recv=False)
    assert cert.ok and [p.name for p in cert.properties] == ["chain", "memory"]
    with pytest.raises(VerificationError) as e:  # twice the lower bound: refuted, not hidden
        plan.verify()
    assert e.value.prop == "recv"


def test_bad_kind_time_factor_is_refused() -> None:
    with pytest.raises(ValueError, match="kind_time_factor for 'reduce_scatter' must be > 0"):
        CostModel.make(objective="bytes", kind_time_factor={"reduce_scatter": 0.0})
