"""Shared assertions on a plan: correct on the NumPy simulator, within the memory bound, and at the
transfer lower bound (or, where the types share an unreduced axis, at least the bound)."""

from __future__ import annotations

import numpy as np

from redist import CostModel, Exchange, Permute, Plan
from redist.atoms import unreduced_atoms
from redist.exchange_facets import routed_measure
from redist.measure import measure
from redist.simulate import check, scatter, simulate
from spmd_types import ShardingType

BYTES = CostModel(objective="bytes")
"""The objective whose guarantee is the transfer bound (``redistribute``'s default ranks by measured time)."""


def global_array(t: ShardingType, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-1000, 1000, size=t.shape).astype(np.int64)


def shares_unreduced(src: ShardingType, dst: ShardingType) -> bool:
    return bool(unreduced_atoms(src) & unreduced_atoms(dst))


def assert_plan_ok(p: Plan, seed: int = 0) -> None:
    src, dst = p.src, p.dst
    x = global_array(src, seed)
    out = simulate(p.steps, p.all_types, scatter(x, src, np.random.default_rng(seed)))
    check(out, dst, x)
    assert p.peak_bytes <= max(src.local_bytes, dst.local_bytes), str(p)
    if shares_unreduced(src, dst):
        assert p.recv_bytes >= p.lower_bound_bytes - 1e-6, str(p)
    else:
        assert abs(p.recv_bytes - p.lower_bound_bytes) < 1e-6, str(p)
    # The closed-form price of point-to-point steps equals what their schedule really moves.
    for s, a, b in zip(p.steps, p.all_types, p.types):
        if isinstance(s, (Exchange, Permute)) and not a.unreduced and not b.unreduced:
            m = measure(s, a, b, p.cost_model)
            assert abs(m.recv_bytes - routed_measure(a, b, p.cost_model).recv_bytes) < 1e-6
