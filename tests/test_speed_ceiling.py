"""The speed report's same-collectives marking and temp-memory section (issue 11): a case runs
XLA's collectives where XLA's compiled program runs exactly ours (kind, device groups, elements),
read off the HLO, so only local passes can differ; machine-independent, so asserted exactly."""

from __future__ import annotations

import jax
import pytest
from jax.sharding import NamedSharding

from benchmarks.cases import NAMED_CASES
from benchmarks.speed import Row, temp_section
from redist import CostModel, redistribute
from redist.arrays import make_input
from redist.executor import compile_plan
from redist.hlo import collective_signature, parse_collectives
from spmd_types.jax_interop import to_partition_spec

CASES = {c.name: c for c in NAMED_CASES}


def _signatures(name: str, objective: str = "alpha-beta") -> tuple[object, object]:
    case = CASES[name]
    jm = case.mesh.to_jax()
    x, _ = make_input(case.src_type, jm)
    plan = redistribute(case.src_type, case.dst_type, case.mesh, cost_model=CostModel(objective=objective))
    xla = jax.jit(lambda a: a, out_shardings=NamedSharding(jm, to_partition_spec(case.dst_type)))
    ours_sig = collective_signature(parse_collectives(compile_plan(plan).lower(x).compile().as_text()))
    xla_sig = collective_signature(parse_collectives(xla.lower(x).compile().as_text()))
    return ours_sig, xla_sig


@pytest.mark.parametrize("name, objective, same", [
    ("rank4_move_two_axes", "alpha-beta", True),  # one all-to-all over all 8 devices, as XLA
    ("ulysses_seq_to_heads", "bytes", True),  # the same all-to-all over model
    ("moe_dispatch", "alpha-beta", True),
    ("size3_transpose", "alpha-beta", False),  # XLA rematerializes with two all-gathers
])
def test_same_collectives_as_xla(name: str, objective: str, same: bool) -> None:
    ours, xla = _signatures(name, objective)
    assert (ours == xla) is same, (ours, xla)


def _row(speedup: float, same: bool, temp: int = 1000, block: int = 1000) -> Row:
    return Row("c", {"shardy": speedup, "gspmd": 2 * speedup, "ours": 1.0, "ours_bytes": 1.0},
               {"shardy": 900, "gspmd": 900, "ours": temp, "ours_bytes": temp},
               {"shardy": "all-to-all(p=8, 1B)", "gspmd": "", "ours": "all-to-all(p=8, 1B)", "ours_bytes": ""},
               1e-3, 1.0, 1.0, 1.0, "step", {"shardy": True, "gspmd": True, "ours": True, "ours_bytes": True},
               block, {"shardy": same, "gspmd": False}, {"ours": 2.0, "shardy": 2.0},
               {"ours": block, "shardy": block})


def test_ceiling_is_a_tie_where_the_collectives_match() -> None:
    assert _row(0.9, True).at_ceiling and _row(1.3, True).at_ceiling
    assert not _row(0.9, False).at_ceiling


def test_temp_section_names_the_widening_of_16_bit_collectives() -> None:
    from dataclasses import replace
    line = temp_section([replace(_row(1.0, True, temp=2000), itemsize=2)])[-1]
    assert "16-bit collectives in f32" in line and "(2x the bytes)" in line


def test_temp_section_lists_only_cases_above_a_shard() -> None:
    assert len(temp_section([_row(1.0, True, temp=1000)])) == 7  # heading, note and table head only
    lines = temp_section([_row(1.0, True, temp=2000)])
    assert lines[-1].startswith("| c | 0 | 1 / 0 |")
    assert "send slices and received pieces" in lines[-1] and "1 KiB more than XLA" in lines[-1]


def _tie_row(name: str, speedup: float, same: bool, in_order: bool = True, passes: float = 2.0) -> Row:
    """A synthetic row: Shardy (the faster correct XLA side) at ``speedup`` over ours."""
    from dataclasses import replace
    return replace(_row(speedup, same), case=name, same_order={"shardy": same and in_order, "gspmd": False},
                   local_passes={"ours": 2.0, "shardy": passes})


def test_structural_tie_needs_order_and_local_passes() -> None:
    assert _tie_row("a", 1.0, True).structural_tie
    assert not _tie_row("b", 1.0, False).structural_tie  # other collectives
    assert not _tie_row("c", 1.0, True, in_order=False).structural_tie  # same multiset, other order
    assert not _tie_row("d", 1.0, True, passes=3.0).structural_tie  # XLA adds a local pass
    assert _tie_row("c", 1.0, True, in_order=False).at_ceiling  # the multiset row still counts it


def test_ceiling_from_synthetic_rows() -> None:
    from benchmarks.speed import ceiling, ceiling_lines, ceiling_note
    rows = [_tie_row("t1", 0.9, True), _tie_row("t2", 1.0, True), _tie_row("t3", 1.1, True, passes=2.0),
            _tie_row("r1", 2.0, False), _tie_row("r2", 0.5, True, in_order=False),
            _tie_row("r3", 4.0, True, passes=1.0), _tie_row("r4", 1.0, False)]
    c = ceiling(rows, target=1.3)
    assert (c.ties, c.rest) == (3, 4)
    assert c.ties_geomean == pytest.approx((0.9 * 1.0 * 1.1) ** (1 / 3))
    assert c.rest_geomean == pytest.approx((2.0 * 0.5 * 4.0 * 1.0) ** (1 / 4))
    assert c.rest_needed == pytest.approx(1.3 ** (7 / 4))
    # with the ties at 1.0x and the rest at what they need, the whole geomean is the target exactly
    assert (c.rest_needed ** c.rest) ** (1 / len(rows)) == pytest.approx(1.3)
    assert "| 3 (geomean speedup there 1.00x) |" in ceiling_lines(c)[0]
    assert ceiling_lines(c)[1].endswith(f"| 1.41x (4 cases) / {1.3 ** (7 / 4):.2f}x |")
    assert "1.3^(7/4) = 1.58x" in ceiling_note(c, len(rows))[1]


def test_ceiling_without_open_cases_is_unreachable() -> None:
    import math

    from benchmarks.speed import ceiling
    assert ceiling([_tie_row("t", 1.0, True)]).rest_needed == math.inf


def test_above_bound_section_says_why_each_time_plan_moves_more() -> None:
    """Issue 11: under the time objective the report says where and why a plan moves more bytes
    than the bound (the bytes objective's plan beside it, both predictions and measurements)."""
    from dataclasses import replace

    from benchmarks.speed import above_bound, above_bound_section
    at = _row(1.0, True)
    more = replace(at, case="m", recv_bytes=2.0, bytes_recv_bytes=1.0, predicted_s=1e-3, bytes_predicted_s=1.5e-3,
                   bytes_steps="exchange(-> [(x)])", plan_collectives={"ours": 1, "ours_bytes": 3},
                   median_s={**at.median_s, "ours": 1.0, "ours_bytes": 1.2})
    assert not above_bound(at) and above_bound(more)
    assert above_bound_section([at])[-1].startswith("None")
    line = above_bound_section([at, more])[-1]
    assert line.startswith("| m | 2 / 1, 1, 1000, 1000.000 | 1, 3, 1500, 1200.000 |")
    assert "predicted 500 us faster with 2.00x the bytes; the clock agrees" in line
    assert line.endswith("| exchange(-> [(x)]) |")
