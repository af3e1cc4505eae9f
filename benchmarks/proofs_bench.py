"""Certify every plan of the exhaustive small-mesh pairs and report the solver time.

Pairs: every (source, destination) of ``redist.enumerate.all_types`` (unreduced included) on the
meshes ``{x=2,y=2}``, ``{x=2,y=3}``, ``{x=2,y=2,z=2}``, ranks 1-3, with the synthesizer tests'
shapes ``s32[12]``, ``s32[12,6]``, ``s32[4,6,2]``. For each pair ``redistribute`` builds the plan and ``proofs.verify_plan`` certifies it.

    python -m benchmarks.proofs_bench                 # all 18,580 pairs
    python -m benchmarks.proofs_bench --sample 500    # a deterministic sample

Solver time per plan is the z3 ``check`` time of its obligations (chain links, memory, recv); a
link shared by several plans is solved once (cached) but counted in every plan that uses it.
Wall time per plan includes building the terms and the cache benefit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from spmd_types import Mesh, ShardingType

MESHES: tuple[dict[str, int], ...] = ({"x": 2, "y": 2}, {"x": 2, "y": 3}, {"x": 2, "y": 2, "z": 2})
RANKS: tuple[int, ...] = (1, 2, 3)
SHAPES: dict[int, tuple[int, ...]] = {1: (12,), 2: (12, 6), 3: (4, 6, 2)}
"""The shapes of the synthesizer's exhaustive tests (tests/test_synth_exhaustive.py): 18,580 pairs."""


def exhaustive_pairs(meshes: Sequence[dict[str, int]] = MESHES, ranks: Sequence[int] = RANKS
                     ) -> Iterator[tuple[ShardingType, ShardingType]]:
    from redist.enumerate import all_types

    for axes in meshes:
        mesh = Mesh(axes)
        for rank in ranks:
            ts = list(all_types(mesh, SHAPES[rank], "s32", unreduced=True))
            for a in ts:
                for b in ts:
                    yield a, b


def sample_pairs(n: int | None, seed: int = 0, **kw: object) -> list[tuple[ShardingType, ShardingType]]:
    pairs = list(exhaustive_pairs(**kw))  # type: ignore[arg-type]
    if n is None or n >= len(pairs):
        return pairs
    return [pairs[i] for i in sorted(random.Random(seed).sample(range(len(pairs)), n))]


@dataclass
class BenchResult:
    pairs: int = 0
    certified: int = 0
    steps: int = 0
    solver_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    above_bound: list[str] = field(default_factory=list)
    ok_if_replicas_agree: int = 0
    worst: str = ""

    def summary(self) -> str:
        def ms(xs: list[float], f: object) -> str:
            return f"{f(xs) * 1e3:.1f} ms" if xs else "n/a"  # type: ignore[operator]

        lines = [
            f"pairs {self.pairs}, certified {self.certified} (all properties proved), "
            f"undecided {len(self.undecided)}, failed {len(self.failures)}; {self.steps} steps; "
            f"recv above a non-tight bound (shared unreduced axis) in {len(self.above_bound)}",
            f"solver time per plan: median {ms(self.solver_s, statistics.median)}, max {ms(self.solver_s, max)}"
            f" ({self.worst}), total {sum(self.solver_s):.1f} s",
            f"wall time per plan:   median {ms(self.wall_s, statistics.median)}, max {ms(self.wall_s, max)}, "
            f"total {sum(self.wall_s):.1f} s",
        ]
        if self.failures:
            lines.append(f"of the failed, {self.ok_if_replicas_agree} are certified when replicas of an unreduced "
                         f"source hold equal partials (replicas_agree=True)")
        lines += [f"  FAILED {f}" for f in self.failures[:20]]
        lines += [f"  undecided {u}" for u in self.undecided[:20]]
        return "\n".join(lines)


def certify_all(pairs: Sequence[tuple[ShardingType, ShardingType]], timeout_ms: int = 20_000,
                progress: bool = False, objective: str = "measured") -> BenchResult:
    """Plans under ``objective``: ``"measured"`` is ``redistribute``'s default (the measured profile;
    its certificates do not claim the transfer bound), ``"bytes"`` certifies the bound too."""
    import proofs
    from redist import CostModel, redistribute
    from redist.profile import default_cost_model

    cm = CostModel(objective="bytes") if objective == "bytes" else default_cost_model()

    res = BenchResult()
    worst = -1.0
    t_start = time.perf_counter()
    for i, (a, b) in enumerate(pairs):
        res.pairs += 1
        t0 = time.perf_counter()
        try:
            plan = redistribute(a, b, cost_model=cm)
            cert = proofs.verify_plan(plan, timeout_ms=timeout_ms)
        except proofs.VerificationError as e:
            res.failures.append(f"{a} -> {b} on {a.mesh}: {e}")
            try:  # is it the replicated-partials schedule bug? (correct if replicas agree)
                proofs.verify_plan(plan, timeout_ms=timeout_ms, replicas_agree=True)
                res.ok_if_replicas_agree += 1
            except proofs.VerificationError:
                pass
            continue
        res.wall_s.append(time.perf_counter() - t0)
        res.solver_s.append(cert.solver_seconds)
        res.steps += len(plan.steps)
        if cert.solver_seconds > worst:
            worst, res.worst = cert.solver_seconds, f"{a} -> {b} on {a.mesh}"
        if not cert.recv_at_bound:
            res.above_bound.append(f"{a} -> {b} on {a.mesh}")
        if cert.ok:
            res.certified += 1
        else:
            res.undecided.append(f"{a} -> {b} on {a.mesh}: {'; '.join(cert.undecided)}")
        if progress and (i + 1) % 1000 == 0:
            print(f"  {i + 1}/{len(pairs)} pairs, {time.perf_counter() - t_start:.0f} s", file=sys.stderr, flush=True)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None, help="certify a deterministic sample of this many pairs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, nargs="*", default=list(RANKS))
    ap.add_argument("--timeout-ms", type=int, default=20_000)
    ap.add_argument("--objective", choices=("measured", "bytes"), default="measured",
                    help="plan objective; 'bytes' also certifies received bytes against the transfer bound")
    args = ap.parse_args(argv)
    pairs = sample_pairs(args.sample, args.seed, ranks=tuple(args.ranks))
    t0 = time.perf_counter()
    res = certify_all(pairs, args.timeout_ms, progress=True, objective=args.objective)
    cmd = "python -m benchmarks.proofs_bench" + (f" --sample {args.sample}" if args.sample else "")
    if args.objective != "measured":
        cmd += f" --objective {args.objective}"
    if tuple(args.ranks) != RANKS:
        cmd += " --ranks " + " ".join(map(str, args.ranks))
    print(f"$ {cmd}")
    print(res.summary())
    print(f"elapsed {time.perf_counter() - t0:.1f} s")
    return 1 if res.failures else 0


if __name__ == "__main__":
    sys.exit(main())
