"""``redist calibrate``: time each collective kind on this backend and write a cost profile."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("calibrate", help="time every collective kind here; write a profile the planner loads")
    p.add_argument("--out", default="redist-profile.json", help="profile path (JSON)")
    p.add_argument("--reps", type=int, default=30, help="interleaved repetitions per sample")
    p.add_argument("--devices", type=int, default=8, help="simulated CPU devices when on CPU")
    handlers["calibrate"] = _run


def _run(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
    from redist.calibrate import calibrate

    prof = calibrate(args.reps, progress=print)
    with open(args.out, "w") as f:
        f.write(prof.to_json())
    print(f"\nbackend {prof.backend} ({prof.device_kind}); local copy {prof.copy_Bps / 1e9:.2f} GB/s")
    for kind, kc in prof.kinds:
        print(f"  {kind:18s} overhead {kc.overhead_s * 1e6:8.1f} us  latency {kc.latency_s * 1e6:8.1f} us"
              f"  bandwidth {kc.bandwidth_Bps / 1e9:7.2f} GB/s")
    print(f"wrote {args.out}; use it with load_cost_model({args.out!r})")
    return 0
