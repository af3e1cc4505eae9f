"""A seeded random sample of (src, dst) type pairs over several 8-device meshes.

Why random pairs next to the named cases: the named cases are what models do; the random sample
catches layouts nobody thought of (odd axis orders, several axes moving at once, rank 4 with
three sharded dimensions) where either side could be surprisingly bad.

Generation: pick a mesh, a rank (1-4) and a dtype; give every mesh axis, independently for src
and dst, either no role, a dimension (at a random position in that dimension's major-to-minor
order), or -- for src only, with a small probability -- the unreduced set. Dimension sizes are
then the least multiple of everything both types shard that dimension by, scaled up by random
factors while the array stays under a byte budget. Pairs that come out equal are redrawn.
``dst`` is unreduced only when ``dst_unreduced_prob`` is set (the golden plans do; the benchmark
does not: XLA has no way to ask for a pending-sum output of an identity). Its default draws the same
random numbers as before, so the benchmark's sample is unchanged.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from benchmarks.cases import Case
from spmd_types import Mesh, ShardingType, format_type

RANDOM_MESHES: tuple[tuple[tuple[str, int], ...], ...] = (
    (("x", 8),),
    (("x", 2), ("y", 4)),
    (("x", 4), ("y", 2)),
    (("x", 2), ("y", 2), ("z", 2)),
)
RANDOM_DTYPES: tuple[str, ...] = ("f32", "bf16", "s32")


@dataclass(frozen=True)
class PairSpec:
    """Parameters of the random sample, recorded in the report so it can be regenerated."""

    seed: int = 0
    count: int = 200
    max_bytes: int = 1 << 20  # per global array: keeps 200 pairs within minutes on 2 cores
    unreduced_prob: float = 0.1
    dst_unreduced_prob: float = 0.0


def _assign(
    rng: random.Random, mesh: Mesh, rank: int, allow_unreduced: float
) -> tuple[list[list[str]], list[str]]:
    dims: list[list[str]] = [[] for _ in range(rank)]
    unreduced: list[str] = []
    names = list(mesh.names)
    rng.shuffle(names)
    for name in names:
        r = rng.random()
        if r < allow_unreduced:
            unreduced.append(name)
        elif r < allow_unreduced + (1 - allow_unreduced) * 0.25:
            continue  # replicated
        else:
            d = rng.randrange(rank)
            dims[d].insert(rng.randrange(len(dims[d]) + 1), name)
    return dims, unreduced


def random_pair(rng: random.Random, spec: PairSpec, index: int) -> Case:
    """One random pair (deterministic given the generator's state)."""
    while True:
        axes = RANDOM_MESHES[rng.randrange(len(RANDOM_MESHES))]
        mesh = Mesh(axes)
        rank = rng.randint(1, 4)
        dtype = RANDOM_DTYPES[rng.randrange(len(RANDOM_DTYPES))]
        sdims, sunred = _assign(rng, mesh, rank, spec.unreduced_prob)
        ddims, dunred = _assign(rng, mesh, rank, spec.dst_unreduced_prob)
        shape = []
        for d in range(rank):
            need = math.lcm(
                math.prod(mesh.axis_size(a) for a in sdims[d]),
                math.prod(mesh.axis_size(a) for a in ddims[d]),
            )
            shape.append(need)
        itemsize = ShardingType(shape, dtype, [()] * rank, mesh).itemsize
        budget = spec.max_bytes // itemsize
        # grow random dimensions by powers of two up to the budget (at most 2048 per dimension
        # from rank 2 on, so no shape degenerates into one long dimension and a few of length 8)
        cap = budget if rank == 1 else 2048
        for _ in range(64):
            d = rng.randrange(rank)
            if shape[d] * 2 <= cap and math.prod(shape) * 2 <= budget:
                shape[d] *= 2
        src = ShardingType(shape, dtype, sdims, mesh, sunred)
        dst = ShardingType(shape, dtype, ddims, mesh, dunred)
        if src == dst:
            continue
        mesh_name = "x".join(str(s) for _, s in axes)
        return Case(
            name=f"rand{index:03d}_{mesh_name}_r{rank}",
            family="random",
            mesh_axes=axes,
            src=format_type(src),
            dst=format_type(dst),
            why="seeded random pair",
        )


def random_pairs(spec: PairSpec = PairSpec()) -> tuple[Case, ...]:
    """``spec.count`` pairs from ``random.Random(spec.seed)``: the same list on every machine."""
    rng = random.Random(spec.seed)
    return tuple(random_pair(rng, spec, i) for i in range(spec.count))
