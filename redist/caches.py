"""One switch for every memo table of the planner, so benchmarks can measure a cold cache."""

from __future__ import annotations

from typing import Any


def clear_caches() -> None:
    from redist import atoms, bounds, exchange, groups, steps, synth
    from spmd_types import layout

    fns: list[Any] = [
        atoms.atoms_of, atoms.dims_atoms, atoms.unreduced_atoms, bounds.lower_bound_bytes,
        exchange.schedule, groups.coords, groups.atoms_index, groups.group_key,
        synth.cached_synthesize, synth._exchange_floor, layout.block_bounds, layout._coord_table,
        layout.axis_coords, steps._validated,
    ]
    for f in fns:
        f.cache_clear()
