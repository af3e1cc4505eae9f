"""``plan.verify()`` seconds on meshes of 3-8 axes of size 2 and on 4,096-device meshes of 3 axes
(the target: <= 1 s per plan on meshes up to 8 axes).

Pairs per mesh of ``n`` axes ``a0..a{n-1}`` (each of size 2):

* the issue's pending-sum pair ``f32[4096@a0]{U:a1} -> f32[4096@a1]``;
* a full-reversal permute ``f32[1024@(a0..a{n-1}),256] -> f32[1024,256@(a{n-1}..a0)]``;
* the widest reduction ``f32[4096@a0,64]{U:(a1..a{n-1})} -> f32[4096@(a0..),64@(..a{n-1})]``
  (``2**(n-1)`` partials: the former model built ``k**2`` z3 terms for it, 16.6 s at 8 axes);
* ``--random`` (default 6) seeded random pending-sum pairs of rank 2-5: every axis of the source
  gets a dimension, the unreduced set or nothing; the destination drops the unreduced set.

``--realistic`` adds rungs on {data=32,fsdp=16,model=8}, {pod=2,data=64,model=16} and
{x=16,y=16,z=16} (4,096 devices each) with the issue's shapes. Each plan is planned with the
default objective, then verified with the link cache cleared, so every proof is rebuilt (the worst
case a new plan meets); the exchange schedule is built by verify when planning did not build it.
Wall seconds of ``verify_plan``, mean and max per rung; a plan that fails to verify is counted and
named, never timed.

    python -m benchmarks.proofs_ladder                 # 3..8 axes
    python -m benchmarks.proofs_ladder --axes 7 8 --random 12 --realistic --verbose
"""

from __future__ import annotations

import random
import statistics
import time

from benchmarks.harness import suite_parser
from spmd_types import Mesh, ShardingType, parse


def _fmt(size: int, axes: list[str]) -> str:
    if not axes:
        return str(size)
    return f"{size}@{axes[0]}" if len(axes) == 1 else f"{size}@({','.join(axes)})"


def _random_pair(rng: random.Random, names: list[str], mesh: Mesh) -> tuple[ShardingType, ShardingType]:
    rank = rng.choice((2, 3, 4, 5))
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
    sizes = [2 ** len(names) * (4 if rank <= 3 else 1)] * rank
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
        (parse(f"f32[4096@a0,64]{{U:({','.join(names[1:])})}}", mesh),
         parse(f"f32[{_fmt(4096, names[:n // 2])},{_fmt(64, names[n // 2:])}]", mesh)),
    ]
    rng = random.Random(seed * 1000 + n)
    fixed = len(pairs)
    while len(pairs) < fixed + n_random:
        pairs.append(_random_pair(rng, names, mesh))
    return pairs


REALISTIC: tuple[tuple[dict[str, int], tuple[tuple[str, str], ...]], ...] = (
    ({"data": 32, "fsdp": 16, "model": 8}, (
        ("f32[256@data,4096,8192]{U:model}", "f32[256@data,4096@model,8192]"),
        ("f32[4096@data,1024@model]", "f32[4096@model,1024@data]"),
        ("f32[512@(data,fsdp),4096@model]", "f32[512@model,4096@(fsdp,data)]"),
    )),
    ({"pod": 2, "data": 64, "model": 16}, (
        ("f32[8192@(pod,data),4096]{U:model}", "f32[8192@data,4096@(model,pod)]"),
        ("f32[8192@data,4096@model,64]", "f32[8192@model,4096,64@pod]"),
    )),
    ({"x": 16, "y": 16, "z": 16}, (
        ("f32[4096@x,4096@y]{U:z}", "f32[4096@(x,z),4096@y]"),
        ("f32[4096@(x,y),256@z]", "f32[4096@z,256@(y,x)]"),
    )),
)
"""The issue's 4,096-device meshes and shapes (pending sums included)."""


def time_verify(src: ShardingType, dst: ShardingType) -> tuple[float, int]:
    from proofs.certificate import verify_plan
    from proofs.link import prove_link
    from redist import redistribute

    plan = redistribute(src, dst)
    prove_link.cache_clear()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    verify_plan(plan)
    return time.perf_counter() - t0, len(plan.steps)


def _rung(label: str, devices: int, pairs: list[tuple[ShardingType, ShardingType]], verbose: bool) -> None:
    from proofs import VerificationError

    secs: list[float] = []
    failed: list[str] = []
    worst = ""
    for src, dst in pairs:
        try:
            s, k = time_verify(src, dst)
        except VerificationError as e:
            failed.append(f"{src} -> {dst}: {str(e).splitlines()[0][:160]}")
            continue
        if not secs or s > max(secs):
            worst = f"{src} -> {dst}"
        secs.append(s)
        if verbose:
            print(f"     {s:8.3f} s  {k} steps  {src} -> {dst}", flush=True)
    mean, top = (statistics.mean(secs), max(secs)) if secs else (float("nan"), float("nan"))
    print(f"{label:>26} {devices:>7} {len(secs):>5} {len(failed):>6} {mean:>8.3f} {top:>8.3f}  {worst}", flush=True)
    for f in failed:
        print(f"     FAILED {f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = suite_parser("proofs_ladder", __doc__, seed="seed of the random pending-sum pairs")
    ap.add_argument("--axes", type=int, nargs="*", default=[3, 4, 5, 6, 7, 8])
    ap.add_argument("--random", type=int, default=6, help="random pending-sum pairs per mesh")
    ap.add_argument("--realistic", action="store_true", help="add the 4,096-device meshes of the issue")
    ap.add_argument("--verbose", action="store_true", help="one line per pair")
    args = ap.parse_args(argv)
    print(f"{'mesh':>26} {'devices':>7} {'pairs':>5} {'failed':>6} {'mean s':>8} {'max s':>8}  slowest pair")
    for n in args.axes:
        _rung(f"{n} axes of 2", 2 ** n, ladder_pairs(n, args.random, args.seed), args.verbose)
    for axes, texts in REALISTIC if args.realistic else ():
        mesh = Mesh(axes)
        _rung(str(mesh), mesh.size, [(parse(a, mesh), parse(b, mesh)) for a, b in texts], args.verbose)


if __name__ == "__main__":
    main()
