"""``redist partir``: partition a bundled model with a strategy and show what happened.

Prints ``explain()`` (tactics, conflicts, every value's type, every collective) or, with
``--summary``, the simulator's per-device FLOPs, collectives and peak memory; ``--run`` also
executes the step on the mesh's devices (simulated CPU devices) and checks it against the
unpartitioned one, with a progress display on stderr while it traces, compiles and runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MODELS = ("mlp", "transformer", "gpt", "llama", "moe")
"""``partir_core.models.MODELS``, spelled here so ``redist --help`` imports no JAX (a test keeps them equal)."""
PARTS = ("BP", "MP", "Z2", "Z3", "EMB", "SP", "VP", "EP")
"""The parts a strategy joins with ``+`` (``partir_core.strategies``; a test keeps them equal)."""
NEEDS = {"SP": ("gpt", "llama", "moe"), "VP": ("gpt", "llama", "moe"), "EMB": ("transformer", "gpt", "llama", "moe"),
         "EP": ("moe",)}
"""The models a part applies to, where not every model (``partir_core.strategies.applicable``)."""
AXIS = {"BP": "data", "Z2": "data", "Z3": "data", "MP": "model", "EMB": "model", "SP": "model", "VP": "model",
        "EP": "data"}
"""The mesh axis each part shards over."""


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("partir", help="partition a bundled training step with a strategy and explain it")
    p.add_argument("--model", choices=MODELS, default="mlp",
                   help="the bundled training step (partir_core.models): an MLP, a transformer, a GPT, a Llama-style "
                        "decoder, its mixture-of-experts variant")
    p.add_argument("--strategy", default="BP+MP", type=_strategy,
                   help="parts joined by +: BP (batch over data), MP (Megatron over model), Z2 (ZeRO-2 over data), Z3 "
                        "(ZeRO-3 over data), EMB (embedding rows over model; not mlp), SP (sequence over model; gpt, "
                        "llama, moe), VP (vocabulary over model; gpt, llama, moe), EP (experts over data, tokens moved by "
                        "all-to-all; moe); e.g. BP+MP, BP+MP+Z3, BP+MP+SP+VP, BP+EP")
    p.add_argument("--mesh", default="data=4,model=2", help="the mesh; the strategies name axes data and model")
    p.add_argument("--summary", action="store_true", help="only the simulator's summary line")
    p.add_argument("--run", action="store_true", help="also run it and compare with the unpartitioned step")
    handlers["partir"] = _partir


def _strategy(text: str) -> str:
    """``text`` with its parts upper-cased, each one a known part (argparse reports the message)."""
    parts = [p.strip().upper() for p in text.split("+")]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown strategy part {bad[0]!r} in {text!r}; parts are "
                                         f"{', '.join(PARTS)}, joined by + (e.g. BP+MP)")
    return "+".join(parts)


def _model_problem(model: str, strategy: str) -> str | None:
    for part in strategy.split("+"):
        if part in NEEDS and model not in NEEDS[part]:
            return (f"--strategy {strategy}: {part} applies to --model {' or '.join(NEEDS[part])}, "
                    f"not {model}")
    return None


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    """A spinner with the phase and the time elapsed, on stderr (stdout keeps the results)."""
    if not enabled:
        yield lambda _: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from redist_cli.ui import console

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=None)
        yield lambda phase: bar.update(task, description=phase)


def _partir(args: argparse.Namespace) -> int:
    problem = _model_problem(args.model, args.strategy)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from spmd_types import Mesh

    mesh = Mesh.parse(args.mesh)
    needed = {AXIS[p] for p in args.strategy.split("+")}
    missing_axes = sorted(a for a in needed if a not in mesh)
    if missing_axes:
        print(f"error: --mesh {args.mesh}: --strategy {args.strategy} shards over mesh axes "
              f"{' and '.join(sorted(needed))}; the mesh lacks {', '.join(missing_axes)} "
              f"(e.g. --mesh data=4,model=2)", file=sys.stderr)
        return 2
    from redist_cli import devices

    problem = devices.ensure(mesh.size, "redist partir") if args.run else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with _progress(args.run) as phase:
        phase("importing JAX and the partitioner")
        return _run(args, mesh, phase)


def _run(args: argparse.Namespace, mesh: Any, phase: Callable[[str], None]) -> int:
    import jax
    import numpy as np

    from partir_core import models, partition, strategies

    phase(f"building the {args.model} step")
    model = models.MODELS[args.model]()
    step = partition(model.step, mesh, strategies.schedule(args.model, args.strategy))
    phase("tracing it and applying the tactics")
    step.trace(*model.args)
    if args.summary:
        sim = step.simulate()
        counts = ", ".join(f"{k} x{n}" for k, n in sorted(sim.counts().items())) or "none"
        print(f"{args.model} {args.strategy} on {mesh}: flops/device {sim.flops:,.0f}, peak {sim.peak_bytes:,} B, "
              f"recv {sim.recv_bytes:,.0f} B, collectives: {counts}")
    else:
        print(step.explain())
    if args.run:
        sys.stdout.flush()
        phase(f"compiling and running the partitioned step on {mesh.size} devices")
        got = jax.tree_util.tree_leaves(step(*model.args))
        phase("compiling and running the unpartitioned step")
        want = jax.tree_util.tree_leaves(jax.jit(model.step)(*model.args))
        err = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in zip(got, want))
        print(f"max abs difference to the unpartitioned step: {err:.3g}")
    return 0
