"""``plan.verify()`` seconds on meshes of 3-8 axes of size 2 (tracker issue 12: <= 1 s per plan).

Pairs per mesh of ``n`` axes ``a0..a{n-1}`` (each of size 2):

* the issue's pending-sum pair ``f32[4096@a0]{U:a1} -> f32[4096@a1]``;
* a full-reversal permute ``f32[1024@(a0..a{n-1}),256] -> f32[1024,256@(a{n-1}..a0)]``;
* ``--random`` (default 4) seeded random pending-sum pairs of rank 2-3: every axis of the source
  gets a dimension, the unreduced set or nothing; the destination drops the unreduced set.

Each plan is verified with the link cache cleared, so every proof is rebuilt (the worst case a
new plan meets). Wall seconds of ``verify_plan``, mean and max per mesh.

    python -m benchmarks.proofs_ladder                 # 3..8 axes
    python -m benchmarks.proofs_ladder --axes 3 5 8 --random 2
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from spmd_types import Mesh, ShardingType, parse


def _fmt(size: int, axes: list[str]) -> str:
    if not axes:
        return str(size)
    return f"{size}@{axes[0]}" if len(axes) == 1 else f"{size}@({','.join(axes)})"


def _random_pair(rng: random.Random, names: list[str], mesh: Mesh) -> tuple[ShardingType, ShardingType]:
    rank = rng.choice((2, 3))
    src: list[list[str]] = [[] for _ in range(rank)]
    dst: list[list[str]] = [[] for _ in range(rank)]
    unreduced: list[str] = []
    for name in rng.sample(names, len(names)):
        r = rng.random()
        if r < 0.25:
            unreduced.append(name)
        elif r < 0.85:
            src[rng.randrange(rank)].append(name)
        if rng.random() < 0.8:
            dst[rng.randrange(rank)].append(name)
    if not unreduced:
        unreduced.append(names[-1])
        for dims in src:
            if names[-1] in dims:
                dims.remove(names[-1])
    sizes = [2 ** len(names) * 4] * rank
    u = "{U:" + (unreduced[0] if len(unreduced) == 1 else f"({','.join(unreduced)})") + "}"
    a = "f32[" + ",".join(_fmt(s, d) for s, d in zip(sizes, src)) + "]" + u
    b = "f32[" + ",".join(_fmt(s, d) for s, d in zip(sizes, dst)) + "]"
    return parse(a, mesh), parse(b, mesh)


def ladder_pairs(n: int, n_random: int, seed: int = 0) -> list[tuple[ShardingType, ShardingType]]:
    names = [f"a{i}" for i in range(n)]
    mesh = Mesh({a: 2 for a in names})
    pairs = [
        (parse("f32[4096@a0]{U:a1}", mesh), parse("f32[4096@a1]", mesh)),
        (parse(f"f32[{_fmt(1024, names)},256]", mesh), parse(f"f32[1024,{_fmt(256, names[::-1])}]", mesh)),
    ]
    rng = random.Random(seed * 1000 + n)
    while len(pairs) < 2 + n_random:
        pairs.append(_random_pair(rng, names, mesh))
    return pairs


def time_verify(src: ShardingType, dst: ShardingType) -> tuple[float, int]:
    from proofs.certificate import verify_plan
    from proofs.link import prove_link
    from redist import redistribute

    plan = redistribute(src, dst)
    prove_link.cache_clear()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    verify_plan(plan)
    return time.perf_counter() - t0, len(plan.steps)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--axes", type=int, nargs="*", default=[3, 4, 5, 6, 7, 8])
    ap.add_argument("--random", type=int, default=4, help="random pending-sum pairs per mesh")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="one line per pair")
    args = ap.parse_args(argv)
    print(f"{'axes':>4} {'devices':>7} {'pairs':>5} {'mean s':>8} {'max s':>8}")
    for n in args.axes:
        secs = []
        for src, dst in ladder_pairs(n, args.random, args.seed):
            s, k = time_verify(src, dst)
            secs.append(s)
            if args.verbose:
                print(f"     {s:8.3f} s  {k} steps  {src} -> {dst}", flush=True)
        print(f"{n:>4} {2 ** n:>7} {len(secs):>5} {statistics.mean(secs):>8.3f} {max(secs):>8.3f}", flush=True)


if __name__ == "__main__":
    main()
