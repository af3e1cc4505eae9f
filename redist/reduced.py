"""Plans between types with ``reduced`` axes: the data move of ``without_reduced()``, retyped.

A reduced axis holds the value replicated (docs/design.md section 2.6): only the cotangent's type
tells it from an unnamed axis. So the plan between two types is the plan between their data
layouts, with the endpoints typed as asked: the steps and intermediate types are the data plan's
(step rules build types without ``reduced``), and the certificate proves the last intermediate
"means" the destination, which holds because the two differ only in reduced axes.
"""

from __future__ import annotations

from collections.abc import Callable

from redist.plan import Plan
from spmd_types import ShardingType

__all__ = ["plan_through_data", "with_endpoints"]


def plan_through_data(src: ShardingType, dst: ShardingType, plan_data: Callable[[ShardingType, ShardingType], Plan]) -> Plan:
    """``plan_data(src.without_reduced(), dst.without_reduced())`` with ``src`` and ``dst`` as its
    endpoints; types without reduced axes go to ``plan_data`` as they are."""
    if not (src.reduced or dst.reduced):
        return plan_data(src, dst)
    return with_endpoints(plan_data(src.without_reduced(), dst.without_reduced()), src, dst)


def with_endpoints(p: Plan, src: ShardingType, dst: ShardingType) -> Plan:
    """The data plan ``p`` typed from ``src`` to ``dst`` (which differ from its own endpoints in
    reduced axes only), sharing its measures."""
    if (p.src, p.dst) == (src, dst):
        return p
    out = Plan(src, dst, p.steps, p.types, p.cost_model)
    if "measures" in p.__dict__:
        out.__dict__["measures"] = p.measures
    return out
