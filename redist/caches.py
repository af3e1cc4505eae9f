"""One switch for every memo table of the planner, so benchmarks can measure a cold cache.

``clear_caches("plans")`` forgets everything derived from particular types (plans, schedules,
bounds, block tables); per-mesh tables (device coordinates, prime factors of axes) stay, as they
would in a compiler planning many moves on one mesh. ``clear_caches("all")`` forgets those too.
"""

from __future__ import annotations

from typing import Any


def clear_caches(level: str = "all") -> None:
    if level not in ("plans", "all"):
        raise ValueError(f"level must be 'plans' or 'all', got {level!r}")
    import importlib

    from redist import atoms, bounds, exchange, groups, plan, steps, synth
    from spmd_types import layout

    reshard = importlib.import_module("redist.reshard")  # ``redist.reshard`` is also the function

    per_type: list[Any] = [
        atoms.dims_atoms, atoms.unreduced_atoms, bounds.lower_bound_bytes, exchange.schedule,
        synth.cached_synthesize, synth._exchange_floor, layout.block_bounds, steps._validated,
        plan.apply_step, plan.measure_step, reshard.plan_for,
    ]
    per_mesh: list[Any] = [
        atoms.atoms_of, groups.atoms_index, groups.group_key, layout.coord_table,
        layout.axis_coords,
    ]
    for f in per_type + (per_mesh if level == "all" else []):
        f.cache_clear()
