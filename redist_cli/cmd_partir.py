"""``redist partir``: partition a bundled model with a strategy and show what happened.

Prints ``explain()`` (tactics, conflicts, every value's type, every collective) or, with
``--summary``, the simulator's per-device FLOPs, collectives and peak memory; ``--run`` also
executes the step on 8 simulated CPU devices and checks it against the unpartitioned one.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def _partir(args: argparse.Namespace) -> int:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    import jax
    import numpy as np

    from partir_core import models, partition, strategies
    from spmd_types import Mesh

    mesh = Mesh.parse(args.mesh)
    model = models.MODELS[args.model]()
    step = partition(model.step, mesh, strategies.schedule(args.model, args.strategy))
    step.trace(*model.args)
    if args.summary:
        sim = step.simulate()
        counts = ", ".join(f"{k} x{n}" for k, n in sorted(sim.counts().items())) or "none"
        print(f"{args.model} {args.strategy} on {mesh}: flops/device {sim.flops:,.0f}, peak {sim.peak_bytes:,} B, "
              f"recv {sim.recv_bytes:,.0f} B, collectives: {counts}")
    else:
        print(step.explain())
    if args.run:
        got = jax.tree_util.tree_leaves(step(*model.args))
        want = jax.tree_util.tree_leaves(jax.jit(model.step)(*model.args))
        err = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in zip(got, want))
        print(f"max abs difference to the unpartitioned step: {err:.3g}")
    return 0


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("partir", help="partition a bundled training step with a strategy and explain it")
    p.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
    p.add_argument("--strategy", default="BP+MP", help="BP, MP, Z2, Z3, EMB, BP+MP, BP+MP+Z3 or parts joined by +")
    p.add_argument("--mesh", default="data=4,model=2")
    p.add_argument("--summary", action="store_true", help="only the simulator's summary line")
    p.add_argument("--run", action="store_true", help="also run it and compare with the unpartitioned step")
    handlers["partir"] = _partir
