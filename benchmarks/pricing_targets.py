"""One process, 8 simulated CPU devices: the planner's best plans for the attention layout changes
and ``seq_to_hidden`` next to XLA's two programs and an A/A copy of the model's choice, interleaved.

Why: these are the moves where the model was seen choosing an exchange over an all-to-all that
ran faster; the A/A row (the model's choice compiled twice) shows how far apart two identical
programs read on the machine at the time, so a smaller difference between plans is noise.

Command: ``python -m benchmarks.pricing_targets --seconds 8`` (medians of up to 400 rounds).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from redist.calibrate import _input  # noqa: E402
from redist.executor import compile_plan  # noqa: E402
from redist.profile import default_cost_model  # noqa: E402
from redist.synth.driver import ranked  # noqa: E402
from redist.timing import interleaved_runs  # noqa: E402
from redist.xla_side import compile_with_log, xla_programs  # noqa: E402
from spmd_types import Mesh, parse_type  # noqa: E402
from spmd_types.jax_interop import mesh_to_jax  # noqa: E402

TARGETS = (
    ("attn_heads_to_seq", "data=2,model=4", "f32[8@data,16@model,256,64]", "f32[8@data,16,256@model,64]"),
    ("attn_seq_to_heads", "data=2,model=4", "f32[8@data,16,256@model,64]", "f32[8@data,16@model,256,64]"),
    ("seq_to_hidden", "data=2,model=4", "bf16[8@data,512@model,512]", "bf16[8@data,512,512@model]"),
    ("ulysses8_heads_to_seq", "data=2,model=4", "f32[8@data,256,16@model,64]", "f32[8@data,256@model,16,64]"),
)


def run(name: str, mesh_text: str, src_text: str, dst_text: str, seconds: float, top: int) -> None:
    mesh = Mesh.coerce(mesh_text, "mesh")
    src, dst = parse_type(src_text, mesh), parse_type(dst_text, mesh)
    plans = ranked(src, dst, default_cost_model(mesh), top)
    x = _input(src)
    progs = [(compile_plan(p), x) for p in plans]
    names = [("* " if i == 0 else "  ") + " + ".join(type(s).__name__ for s in p.steps) + f" (priced {p.time_s * 1e3:.2f} ms)"
             for i, p in enumerate(plans)]
    auto, explicit = mesh_to_jax(mesh, explicit=False), mesh_to_jax(mesh, explicit=True)
    for method, (fn, used) in xla_programs(src, dst, auto, explicit).items():
        arg = _input(src, used)
        progs.append((compile_with_log(fn, arg)[0], arg))
        names.append(f"  XLA {method}")
    progs.append((compile_plan(plans[0]), x))
    names.append("  A/A: the model's choice compiled again")
    times = interleaved_runs(progs, reps=15, warmup=3, budget_s=seconds, max_reps=400)
    med = [statistics.median(t) for t in times]
    xla = min(med[len(plans):len(plans) + 2])
    print(f"{name}: {src_text} -> {dst_text} on {{{mesh_text}}}, {len(times[0])} rounds; load average {os.getloadavg()[0]:.1f}")
    for n, m in zip(names, med):
        print(f"  {m * 1e3:8.3f} ms  {xla / m:5.2f}x vs the faster XLA  {n}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pricing_targets", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="timing budget per move")
    ap.add_argument("--top", type=int, default=3, help="plans per move (the model's choice first)")
    ap.add_argument("--cases", nargs="*", default=[t[0] for t in TARGETS])
    a = ap.parse_args(argv)
    for t in TARGETS:
        if t[0] in a.cases:
            run(*t, a.seconds, a.top)


if __name__ == "__main__":
    main()
