"""Enumerate every valid type of a shape on a mesh: the exhaustive tests and random benchmarks use it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from spmd_types import Mesh, ShardingType


def all_types(
    mesh: Mesh, shape: tuple[int, ...], dtype: str = "f32", unreduced: bool = True
) -> Iterator[ShardingType]:
    """Every type: each mesh axis goes to one dimension (at any position), unreduced, or nowhere."""
    names = [n for n, _ in mesh.axes]
    rank = len(shape)
    places = list(range(rank)) + (["U"] if unreduced else []) + [None]
    seen: set[ShardingType] = set()
    for choice in itertools.product(places, repeat=len(names)):
        groups: dict[object, list[str]] = {}
        for n, c in zip(names, choice):
            groups.setdefault(c, []).append(n)
        per_dim = [groups.get(d, []) for d in range(rank)]
        if any(shape[d] % math.prod(mesh.axis_size(a) for a in per_dim[d]) for d in range(rank)):
            continue
        for orders in itertools.product(*(itertools.permutations(p) for p in per_dim)):
            t = ShardingType(shape, dtype, [tuple(o) for o in orders], mesh, groups.get("U", []))
            if t not in seen:
                seen.add(t)
                yield t
