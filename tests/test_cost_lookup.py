"""``CostModel`` reads its per-axis and per-kind tables through dicts built once per model
(``CostModel._lookup``) and memoises ``least_round`` per kind. The prices must be those of the
tuples the model is made of, read directly, and a model derived with ``dataclasses.replace``
(or unpickled) must price by its own fields, never by a table cached on the model it came from."""

from __future__ import annotations

import itertools
import math
import pickle
from dataclasses import replace

import pytest

from redist import CostModel
from redist.cost import KindCost, crosses
from redist.profile import packaged_profile
from spmd_types import SubAxis, axis_name

AXES = ("x", "y", "z", SubAxis("y", 1, 2))
KINDS = ("all_gather", "all_to_all", "all_to_all:2", "exchange", "exchange:2", "permute", "reduce_scatter",
         "all_reduce", "no_such_kind")


def _entry(table: tuple[tuple[str, KindCost], ...], kind: str) -> KindCost | None:
    costs = dict(table)
    return costs.get(kind, costs.get(kind.split(":")[0]))


def _reference(cm: CostModel, kind: str, names: tuple) -> tuple[float, float, KindCost | None, tuple[float, float]]:
    """Latency, inverse bandwidth, measured kind and least round, read straight off the fields."""
    lat = max((dict(cm.axis_latency_s).get(axis_name(n), cm.latency_s) for n in names), default=cm.latency_s)
    inv = max((1.0 / dict(cm.axis_bandwidth_Bps).get(axis_name(n), cm.bandwidth_Bps) for n in names),
              default=1.0 / cm.bandwidth_Bps)
    tables = [cm.kind_costs, cm.cross_kind_costs]
    if crosses(cm.cross_axes, names):
        tables.reverse()
    measured = next((m for m in (_entry(t, kind) for t in tables) if m is not None), None)
    least_lat = min([cm.latency_s, *(v for _, v in cm.axis_latency_s)])
    least_inv = 1.0 / max([cm.bandwidth_Bps, *(v for _, v in cm.axis_bandwidth_Bps)])
    found = [m for m in (_entry(t, kind) for t in (cm.kind_costs, cm.cross_kind_costs)) if m is not None]
    if not found:
        factor = dict(cm.kind_time_factor).get(kind.split(":")[0], 1.0)
        least = (least_lat * factor, least_inv * factor)
    else:
        slow_lat, slow_bw = least_lat / cm.latency_s, least_inv * cm.bandwidth_Bps
        least = (min(m.latency_s for m in found) * slow_lat, min(1.0 / m.bandwidth_Bps for m in found) * slow_bw)
    return lat, inv, measured, least


def _models() -> list[CostModel]:
    gloo = packaged_profile("cpu-gloo")
    assert gloo is not None
    measured = gloo.cost_model("measured", ("x",))
    slow = CostModel.with_slow_axes(["y"], 10.0, CostModel.make(objective="bytes", kind_time_factor={"exchange": 2.0}))
    return [CostModel(objective="bytes"), slow, measured,
            replace(measured, kind_costs=(("all_gather", KindCost(1e-3, 2e-3, 1e8)),), axis_latency_s=(("z", 1e-4),))]


@pytest.mark.parametrize("which", range(4))
def test_cached_tables_price_as_the_fields_read_directly(which: int) -> None:
    cm = _models()[which]
    for kind in KINDS:
        for r in range(3):
            for names in itertools.combinations(AXES, r):
                lat, inv, measured, least = _reference(cm, kind, names)
                assert cm.latency(names) == lat
                assert cm.inv_bandwidth(names) == inv
                assert cm.measured_kind(kind, names) == measured
                assert cm.least_round(kind) == least
                assert cm.least_round(kind) == least  # the memoised answer, read again


def test_a_derived_model_never_reads_the_tables_of_its_origin() -> None:
    gloo = packaged_profile("cpu-gloo")
    assert gloo is not None
    cm = gloo.cost_model("measured", ("x",))
    before = (cm.least_round("all_gather"), cm.kind_time("all_gather", ("x",), 1, 1e6), cm.latency(("z",)))
    slower = KindCost(0.0, 1.0, 1.0)
    derived = replace(cm, kind_costs=(("all_gather", slower),), cross_kind_costs=(("all_gather", slower),),
                      axis_latency_s=(("z", 0.5),))
    assert derived.least_round("all_gather") == _reference(derived, "all_gather", ())[3]
    assert derived.least_round("all_gather") != before[0]
    assert derived.kind_time("all_gather", ("x",), 1, 1e6) > 1e5
    assert derived.latency(("z",)) == 0.5
    assert (cm.least_round("all_gather"), cm.kind_time("all_gather", ("x",), 1, 1e6), cm.latency(("z",))) == before
    copy = pickle.loads(pickle.dumps(cm))
    assert copy == cm and hash(copy) == hash(cm)
    assert copy.least_round("all_gather") == before[0]
    assert math.isclose(copy.kind_time("all_gather", ("x",), 1, 1e6), before[1])


def _strides(a: str | SubAxis) -> tuple[str, float, float]:
    """The factors an axis spans, as the range of the product of the factors more major than each:
    a whole axis all of them, ``x:(pre)size`` ``[pre, pre * size)``."""
    return (a, 1, math.inf) if isinstance(a, str) else (a.name, a.pre, a.pre * a.size)


def _crosses_pairwise(crossing: tuple[str | SubAxis, ...], names: tuple[str | SubAxis, ...]) -> bool:
    """The reference: some name and some crossing axis of one mesh axis whose factor ranges meet."""
    return any(n1 == n2 and max(lo1, lo2) < min(hi1, hi2)
               for n1, lo1, hi1 in map(_strides, crossing) for n2, lo2, hi2 in map(_strides, names))


def test_crosses_any_is_crosses() -> None:
    """``CostModel.crosses_any`` looks a name's crossing axes up by its mesh axis; it answers as
    ``crosses`` does, and as a pairwise test of factor ranges written here, over every set of up to
    three crossing axes and two names, whole or sub-axes."""
    pieces = ("x", "y", "z", SubAxis("y", 1, 2), SubAxis("y", 2, 2), SubAxis("z", 1, 2), SubAxis("z", 2, 2))
    for k in range(4):
        for crossing in itertools.combinations(pieces, k):
            cm = CostModel(objective="bytes", cross_axes=crossing)
            for n in range(3):
                for names in itertools.combinations(pieces, n):
                    want = _crosses_pairwise(crossing, names)
                    assert cm.crosses_any(names) == crosses(crossing, names) == want, (crossing, names)
