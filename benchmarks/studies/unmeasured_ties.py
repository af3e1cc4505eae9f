"""Plans the unmeasured cost model picks on a tie, timed against the typed plans they tie with.

Why: since 65b20d0 the exchange floors admit a pending-sum exchange run as one all-to-all
(``ExchangeAllToAll``), and under the unmeasured models (``CostModel(objective="bytes")``, ``CostModel(objective=
"time")``: ``redistribute``'s default on a backend without a shipped profile) it wins exact ties
with typed plans (reduce-scatter + all-to-all, reduce-scatter + pad...) by having fewer collective
ops. The model cannot tell them apart; this times them. Under the shipped CPU profile (the speed
benchmarks' objective) none of these plans is chosen. On XLA:CPU the tie-break is no license: see
the committed results (``benchmarks/studies/results/2026-11-24-unmeasured-ties.md``).

``python -m benchmarks.studies.unmeasured_ties [--reps N] [--rounds R]``: per pair (the 16 pairs of the
golden cases and 200 seeded random pairs whose unmeasured plan changed at 65b20d0), the plan
``synthesize`` returns under ``CostModel(objective="alpha-beta")`` and the typed plan it replaced, timed
interleaved on 8 simulated CPU devices (``redist.calibrate.samples``: each call paired with the
empty program), the median over ``R`` rounds of ``N`` calls each.
"""

from __future__ import annotations

import os
import statistics
from typing import NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from benchmarks.harness import at_least, geomean, suite_parser  # noqa: E402
from benchmarks.markdown import md_table  # noqa: E402
from redist import CostModel, Plan  # noqa: E402
from redist.calibrate import samples  # noqa: E402
from redist.steps import AllToAll, DynSlice, PadUnreduced, Permute, ReduceScatter, Step  # noqa: E402
from redist.synth import synthesize  # noqa: E402
from spmd_types import Mesh, parse  # noqa: E402

XYZ, X2Y4, X4Y2 = "x=2,y=2,z=2", "x=2,y=4", "x=4,y=2"

PAIRS: tuple[tuple[str, str, str, tuple[Step, ...]], ...] = (
    (XYZ, "f32[4,8@y,32,256]{U:z}", "f32[4,8,32@x,256@(z,y)]",
     (DynSlice(2, ("x",)), ReduceScatter(3, ("z",)), AllToAll(1, 3, ("y",)))),
    (X4Y2, "f32[16@x,32,32,16]{U:y}", "f32[16,32@x,32,16@y]", (ReduceScatter(3, ("y",)), AllToAll(0, 1, ("x",)))),
    (XYZ, "bf16[16,16@y,512,4]{U:(x,z)}", "bf16[16,16,512@(x,z),4]{U:y}",
     (ReduceScatter(2, ("x", "z")), PadUnreduced(1, ("y",)))),
    (XYZ, "s32[2048@(y,x),128@z]", "s32[2048,128@(x,y)]{U:z}",
     (Permute((("y", "z"), ("x",))), PadUnreduced(0, ("z",)), AllToAll(0, 1, ("y",)))),
    (X2Y4, "f32[256@x,1024]{U:y}", "f32[256,1024@(y,x)]", (ReduceScatter(1, ("y",)), AllToAll(0, 1, ("x",)))),
    (X2Y4, "bf16[32,16,16,64@y]{U:x}", "bf16[32@x,16,16@y,64]", (ReduceScatter(0, ("x",)), AllToAll(3, 2, ("y",)))),
    (XYZ, "bf16[32,8,64@z,32]{U:(x,y)}", "bf16[32,8,64,32@(x,z)]{U:y}",
     (ReduceScatter(3, ("x",)), AllToAll(2, 3, ("z",)))),
    (X2Y4, "bf16[32,8,128,16]{U:y}", "bf16[32@y,8,128,16]{U:x}",
     (DynSlice(1, ("x",)), ReduceScatter(0, ("y",)), PadUnreduced(1, ("x",)))),
    (X2Y4, "s32[8,256,128@x]{U:y}", "s32[8,256@y,128]{U:x}", (ReduceScatter(1, ("y",)), PadUnreduced(2, ("x",)))),
    (X2Y4, "bf16[256,32,64@y]{U:x}", "bf16[256@(x,y),32,64]", (ReduceScatter(0, ("x",)), AllToAll(2, 0, ("y",)))),
    (X4Y2, "bf16[2048,256@y]{U:x}", "bf16[2048@x,256]{U:y}", (ReduceScatter(0, ("x",)), PadUnreduced(1, ("y",)))),
    (X4Y2, "s32[32,8,32,32]{U:(x,y)}", "s32[32,8@y,32,32@x]", (ReduceScatter(1, ("y",)), ReduceScatter(3, ("x",)))),
    (XYZ, "s32[128,2048@(x,z)]{U:y}", "s32[128@(x,z,y),2048]", (AllToAll(1, 0, ("x", "z")), ReduceScatter(0, ("y",)))),
    (X4Y2, "s32[1024,256]{U:x}", "s32[1024,256@(y,x)]", (DynSlice(1, ("y",)), ReduceScatter(1, ("x",)))),
    (X4Y2, "s32[8,128@y,32,8]{U:x}", "s32[8,128,32@x,8@y]", (ReduceScatter(2, ("x",)), AllToAll(1, 3, ("y",)))),
    (X2Y4, "bf16[8@x,32,16,128]{U:y}", "bf16[8,32,16@y,128]{U:x}", (ReduceScatter(2, ("y",)), PadUnreduced(0, ("x",)))),
)


class Row(NamedTuple):
    mesh: Mesh
    src: str
    dst: str
    chosen: Plan
    typed: Plan
    chosen_s: float
    typed_s: float

    @property
    def ratio(self) -> float:
        """The typed plan's time over the chosen one's: below 1, the tie-break chose the slower."""
        return self.typed_s / self.chosen_s if self.chosen_s > 0 else float("nan")


def _steps(p: Plan) -> str:
    return " + ".join(type(s).__name__ for s in p.steps) or "(nothing)"


def measure(reps: int, rounds: int) -> list[Row]:
    cm = CostModel(objective="alpha-beta")
    rows = []
    for mesh_text, src, dst, typed_steps in PAIRS:
        mesh = Mesh.parse(mesh_text)
        s, d = parse(src, mesh), parse(dst, mesh)
        chosen, typed = synthesize(s, d, cm), Plan.build(s, typed_steps, cm)
        if typed.dst != d:
            raise AssertionError(f"{src} -> {dst}: the typed plan ends at {typed.dst}")
        times: list[tuple[float, float]] = []
        for _ in range(rounds):
            a, b = samples([chosen, typed], reps, warmup=3)
            times.append((a.seconds, b.seconds))
        rows.append(Row(mesh, src, dst, chosen, typed, statistics.median(t[0] for t in times),
                        statistics.median(t[1] for t in times)))
    return rows


def table(rows: list[Row]) -> list[str]:
    head = ("mesh", "move", "chosen (time model)", "typed plan it tied with", "modelled us (both)",
            "chosen us", "typed us", "typed / chosen")
    body = [(r.mesh, f"`{r.src} -> {r.dst}`", _steps(r.chosen), _steps(r.typed), f"{r.chosen.time_s * 1e6:.1f}",
             f"{r.chosen_s * 1e6:.0f}", f"{r.typed_s * 1e6:.0f}", f"{r.ratio:.2f}") for r in rows]
    geo = geomean([r.ratio for r in rows])
    return [*md_table(head, body), "", f"Geometric mean of typed / chosen: {geo:.2f} "
            f"({sum(r.ratio < 1 for r in rows)} of {len(rows)} pairs where the typed plan ran faster)."]


def main() -> None:
    ap = suite_parser("studies.unmeasured_ties", __doc__)
    ap.add_argument("--reps", type=at_least(1, int), default=60, help="timed calls per plan and round")
    ap.add_argument("--rounds", type=at_least(1, int), default=3, help="rounds; each figure is the median over them")
    args = ap.parse_args()
    print(f"Command: python -m benchmarks.studies.unmeasured_ties --reps {args.reps} --rounds {args.rounds}\n")
    print("\n".join(table(measure(args.reps, args.rounds))))


if __name__ == "__main__":
    main()
