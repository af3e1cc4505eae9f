"""The partitioner against XLA's: for each model x strategy, jit the same training step with the
input shardings our tactics produced and let XLA's SPMD partitioner do the rest.

Both programs are compiled; collectives and their bytes are read from the optimised HLO (the same
parser for both), temporary memory from ``memory_analysis()``, wall time as the median of a few
runs. A practitioner's hand count of collectives per strategy is shown next to both.

``run_gpt_bench`` (``python -m benchmarks.partitioner``) does the same for the GPT written the
modern way (scan over layers, remat, dropout, tied embeddings): XLA gets our input *and* output
shardings, collectives and bytes are counted per executed step (a loop body once per iteration),
wall time is interleaved medians, every result is checked against the unpartitioned step, and the
simulator's predicted time is ranked against the measured one.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax

from benchmarks.harness import geomean, suite_parser
from benchmarks.markdown import md_table
from partir_core import models as M
from partir_core import partition
from partir_core import strategies as S
from redist.hlo import parse_collectives
from redist.profile import spearman
from spmd_types import Mesh
from spmd_types.jax_interop import mesh_to_jax, to_named_sharding

_ABBR = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
         "collective-permute": "CP", "ragged-all-to-all": "RA2A"}


@dataclass(frozen=True)
class Side:
    collectives: dict[str, int]
    recv_bytes: float
    temp_bytes: int
    time_s: float

    def fmt(self) -> str:
        return " ".join(f"{_ABBR.get(k, k)}x{n}" for k, n in sorted(self.collectives.items())) or "-"


@dataclass(frozen=True)
class Row:
    model: str
    strategy: str
    hand: str
    ours: Side
    xla: Side
    predicted: dict[str, int]


def hand_count(model: str, strategy: str, n_params: int) -> str:
    """Collectives a practitioner derives by hand (per training step)."""
    megatron = {"mlp": 1, "transformer": 4}[model]  # fwd after w2 (+ attention), bwd the same
    z = n_params  # ZeRO: every parameter (tensor) is sharded over data
    table = {
        "BP": f"AR x{n_params + 1} (one per gradient, one for the loss)",
        "MP": f"AR x{megatron} (Megatron: one per block per direction)",
        "Z2": f"RS x{z} (gradients), AG x{z} (updated params), AR x1 (loss)",
        "Z3": f"AG x{z} (params before use), RS x{z} (gradients), AR x1 (loss)",
        "EMB": "AG x1 (table before lookup)",
        "BP+MP": f"AR x{megatron} (MP) + AR x{n_params + 1} (BP)",
        "BP+MP+Z3": f"AR x{megatron} (MP) + AG x{z}, RS x{z}, AR x1 (Z3)",
    }
    return table[strategy]


def _measure(compiled: Any, args: list[Any], runs: int) -> Side:
    hlo = parse_collectives(compiled.as_text())
    counts = dict(Counter(c.kind for c in hlo.collectives))
    ma = compiled.memory_analysis()
    temp = int(ma.temp_size_in_bytes) if ma is not None else -1
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return Side(counts, float(hlo.recv_bytes or 0.0), temp, statistics.median(times))


def bench_one(model: M.Model, strategy: str, mesh: Mesh, runs: int = 5) -> Row:
    ours, xla, predicted = bench_schedule(model, S.schedule(model.name, strategy), mesh, runs)
    return Row(model.name, strategy, hand_count(model.name, strategy, len(model.params)), ours, xla, predicted)


def bench_schedule(model: M.Model, schedule: list[Any], mesh: Mesh, runs: int = 5) -> tuple[Side, Side, dict[str, int]]:
    """Our partitioned step and XLA's (jit with the same input shardings), both compiled and timed."""
    step = partition(model.step, mesh, schedule)
    a = step.trace(*model.args)
    leaves = jax.tree_util.tree_leaves(model.args)
    # ours
    from partir_core.api import fn_mesh
    jm = fn_mesh(mesh)
    ours_args = [jax.device_put(x, to_named_sharding(t, jm)) for x, t in zip(leaves, a.lowered.in_types)]
    _, fn = step._compiled(*model.args)
    ours = _measure(fn.lower(*ours_args).compile(), ours_args, runs)
    # XLA: same input shardings, its own partitioning of everything else
    xm = mesh_to_jax(mesh, explicit=False)
    shardings = [to_named_sharding(t, xm) for t in a.lowered.in_types]
    xla_args = [jax.device_put(x, s) for x, s in zip(leaves, shardings)]
    flat = jax.jit(lambda *xs: model.step(*jax.tree_util.tree_unflatten(a.program.in_tree, list(xs))),
                   in_shardings=shardings)
    xla = _measure(flat.lower(*xla_args).compile(), xla_args, runs)
    return ours, xla, step.simulate().counts()


def run_partitioner_bench(mesh: Mesh | None = None, models: tuple[str, ...] = ("mlp", "transformer"),
                          strategies: tuple[str, ...] | None = None, runs: int = 5,
                          sizes: dict[str, dict[str, int]] | None = None) -> tuple[list[Row], str]:
    """Rows for every model x strategy, and the markdown table of the report."""
    mesh = mesh or Mesh({"data": 4, "model": 2})
    rows = []
    for name in models:
        model = M.MODELS[name](**(sizes or {}).get(name, {}))
        for s in strategies or tuple(S.applicable(name)):
            if s in S.applicable(name):
                rows.append(bench_one(model, s, mesh, runs))
    return rows, table(rows)


def table(rows: list[Row]) -> str:
    head = ("model", "strategy", "hand count", "ours: collectives", "ours: recv B", "ours: temp B", "ours: ms",
            "XLA: collectives", "XLA: recv B", "XLA: temp B", "XLA: ms")
    return "\n".join(md_table(head, ((
        r.model, r.strategy, r.hand, r.ours.fmt(), f"{r.ours.recv_bytes:,.0f}", f"{r.ours.temp_bytes:,}",
        f"{r.ours.time_s * 1e3:.2f}", r.xla.fmt(), f"{r.xla.recv_bytes:,.0f}", f"{r.xla.temp_bytes:,}",
        f"{r.xla.time_s * 1e3:.2f}") for r in rows)))


# -- the GPT (scan over layers, remat, dropout, tied embeddings) --------------------------------------

GPT_STRATEGIES = ("BP", "MP", "BP+MP", "BP+MP+Z3", "BP+MP+SP", "BP+MP+VP")
GPT_SIZES: dict[str, int] = {"batch": 8, "seq": 128, "d_model": 256, "heads": 8, "head_dim": 32,
                             "ffn": 1024, "vocab": 1024, "layers": 2}
_COMP_HEAD = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*->.*\{\s*$")
_CALLEE = re.compile(r"\b(body|condition|calls|to_apply|branch_computations|true_computation|"
                     r"false_computation)=(\{[^}]*\}|%?[\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    comps: dict[str, list[str]] = {}
    entry, cur = "", None
    for line in text.splitlines():
        m = _COMP_HEAD.match(line)
        if m:
            cur = m.group(1)
            comps[cur] = []
            if line.startswith("ENTRY"):
                entry = cur
        elif cur is not None:
            comps[cur].append(line)
    return comps, entry


def executed_collectives(hlo_text: str, num_devices: int) -> tuple[dict[str, int], float]:
    """Collectives and received bytes per device of one run of a compiled module, a loop body's
    counted once per iteration (XLA's ``known_trip_count``); ``redist.hlo`` counts text."""
    comps, entry = _computations(hlo_text)
    runs: Counter[str] = Counter()

    def walk(name: str, times: int) -> None:
        runs[name] += times
        for line in comps.get(name, ()):
            trip = _TRIP.search(line)
            for role, callees in _CALLEE.findall(line):
                k = int(trip.group(1)) if trip and role == "body" else 1
                for callee in (c.strip().lstrip("%") for c in callees.strip("{}").split(",")):
                    if callee in comps:
                        walk(callee, times * k)

    walk(entry, 1)
    counts: Counter[str] = Counter()
    recv = 0.0
    for name, times in runs.items():
        for c in parse_collectives("\n".join(comps[name]), num_devices).collectives:
            counts[c.kind] += times
            recv += (c.recv_bytes or 0.0) * times
    return dict(counts), recv


def gpt_hand_count(strategy: str, layers: int) -> str:
    """Executed collectives per step a practitioner derives for the GPT (12 stacked parameters
    per layer, 4 outside the layers; remat recomputes the forward, which needs again only the
    attention output's reduction: Megatron is 5 per layer).

    ZeRO-3 gathers each stacked parameter in the forward scan and again in the backward scan,
    except ``b2``: the recomputed block stops before the MLP's last add, and b2's gradient does
    not read b2 (11 per layer); a parameter outside the scan is gathered once, the gathered copy
    serving forward and backward (23 per layer + 4). Megatron-SP per layer: forward AG, RS
    around attention and around the MLP; the recompute AG, RS, AG (the MLP's output is not
    needed again); backward AG, RS around each block: AG x6, RS x5. Vocab parallelism adds, in
    the forward, the masked lookup's AR, AR(max) and AR(sum of exp) (the label pick's pending sum
    merges into the loss's all-reduce) and, in the backward, log-softmax's sum over the vocab and
    the tied head's input gradient: 5 ARs."""
    n = 12 * layers + 4
    mp = 5 * layers
    table = {
        "BP": f"AR x{n + 1}",
        "MP": f"AR x{mp}",
        "BP+MP": f"AR x{mp + n + 1}",
        "BP+MP+Z3": f"AR x{mp + 1}, AG x{23 * layers + 4}, RS x{n}",
        "BP+MP+SP": f"AG x{6 * layers}, RS x{5 * layers} (SP), AR x{n + 1} (gradients, loss)",
        "BP+MP+VP": f"AR x{mp + n + 1} + AR x3 (fwd: lookup, max, sum) + AR x2 (bwd: sum, head input)",
    }
    return table.get(strategy, "-")


@dataclass(frozen=True)
class GptRow:
    strategy: str
    hand: str
    ours_counts: dict[str, int]
    predicted_counts: dict[str, int]
    xla_counts: dict[str, int]
    ours_recv: float
    xla_recv: float
    ours_ms: float
    xla_ms: float
    predicted_ms: float
    max_err_ours: float
    max_err_xla: float
    pair_ratio: float = float("nan")
    """Median over interleaved (XLA, ours) pairs of XLA time / our time."""

    @property
    def speedup(self) -> float:
        return self.pair_ratio if self.pair_ratio == self.pair_ratio else self.xla_ms / self.ours_ms


def _fmt(counts: dict[str, int]) -> str:
    return " ".join(f"{_ABBR.get(k, k.replace('_', '-'))}x{n}" for k, n in sorted(counts.items())) or "-"


def _max_err(got: list[Any], ref: list[Any]) -> float:
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(r, np.float64))))
               for g, r in zip(got, ref))


def _placed(step: Any, model: M.Model, mesh: Mesh) -> list[Any]:
    from partir_core.api import fn_mesh

    a = step.analysis
    jm = fn_mesh(mesh)
    return [jax.device_put(x, to_named_sharding(t, jm))
            for x, t in zip(jax.tree_util.tree_leaves(model.args), a.lowered.in_types)]


@dataclass(frozen=True)
class _Built:
    """One strategy compiled both ways, its arguments placed, before any timing."""

    strategy: str
    step: Any
    ours: Any
    ours_args: list[Any]
    xla: Any
    xla_args: list[Any]


def compiled_pair(model: M.Model, schedule: list[Any], mesh: Mesh) -> tuple[Any, Any, list[Any], Any, list[Any]]:
    """``(partitioned step, ours compiled, its placed args, XLA's compiled, its placed args)``:
    XLA's jit gets the same input and output shardings as our lowering."""
    step = partition(model.step, mesh, schedule)
    a = step.trace(*model.args)
    ours_args = _placed(step, model, mesh)
    _, fn = step._compiled(*model.args)
    xm = mesh_to_jax(mesh, explicit=False)
    ins = [to_named_sharding(t, xm) for t in a.lowered.in_types]
    outs = tuple(to_named_sharding(t, xm) for t in a.lowered.out_types)
    flat = jax.jit(lambda *xs: tuple(jax.tree_util.tree_leaves(
        model.step(*jax.tree_util.tree_unflatten(a.program.in_tree, list(xs))))),
        in_shardings=ins, out_shardings=outs)
    xla_args = [jax.device_put(x, s) for x, s in zip(jax.tree_util.tree_leaves(model.args), ins)]
    return step, fn.lower(*ours_args).compile(), ours_args, flat.lower(*xla_args).compile(), xla_args


def _build(model: M.Model, strategy: str, mesh: Mesh) -> _Built:
    step, ours, ours_args, xla, xla_args = compiled_pair(model, S.schedule("gpt", strategy), mesh)
    return _Built(strategy, step, ours, ours_args, xla, xla_args)


def _once(fn: Any, args: list[Any]) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def time_round_robin(built: list[_Built], reps: int) -> list[tuple[list[float], list[float]]]:
    """(XLA times, our times) per strategy, every strategy timed in every round (XLA and ours
    adjacent, their order alternating): a load phase of the shared machine then hits every row
    alike, so the rows rank against each other as well as against XLA (timing each row's
    pairs in turn let a busy minute reorder the rows: Spearman 0.94 in one run, 0.60 in the next)."""
    for b in built:
        _once(b.xla, b.xla_args)
        _once(b.ours, b.ours_args)
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in built]
    for r in range(reps):
        for b, (tx, to) in zip(built, out):
            if r % 2:
                to.append(_once(b.ours, b.ours_args))
                tx.append(_once(b.xla, b.xla_args))
            else:
                tx.append(_once(b.xla, b.xla_args))
                to.append(_once(b.ours, b.ours_args))
    return out


def _row(b: _Built, times: tuple[list[float], list[float]], ref: list[Any], mesh: Mesh, layers: int) -> GptRow:
    from partir_core.auto_profile import predict_s

    err_ours = _max_err(list(b.ours(*b.ours_args)), ref)
    err_xla = _max_err(list(b.xla(*b.xla_args)), ref)
    oc, orecv = executed_collectives(str(b.ours.as_text()), mesh.size)
    xc, xrecv = executed_collectives(str(b.xla.as_text()), mesh.size)
    sim = b.step.simulate()
    tx, to = times
    return GptRow(b.strategy, gpt_hand_count(b.strategy, layers), oc, sim.counts(), xc, orecv, xrecv,
                  statistics.median(to) * 1e3, statistics.median(tx) * 1e3,
                  predict_s(b.step.analysis.lowered, sim) * 1e3, err_ours, err_xla,
                  statistics.median(x / o for x, o in zip(tx, to)))


def run_gpt_bench(mesh: Mesh | None = None, strategies: tuple[str, ...] = GPT_STRATEGIES,
                  sizes: dict[str, int] | None = None, reps: int = 10) -> tuple[list[GptRow], str]:
    """Every GPT strategy against XLA given the same input and output shardings."""
    mesh = mesh or Mesh({"data": 2, "model": 4})
    model = M.gpt(**(sizes or GPT_SIZES))
    ref = list(jax.tree_util.tree_leaves(jax.jit(model.step)(*model.args)))
    built = [_build(model, s, mesh) for s in strategies]
    times = time_round_robin(built, reps)
    layers = int(model.params["blocks"]["w1"].shape[0])
    rows = [_row(b, t, ref, mesh, layers) for b, t in zip(built, times)]
    return rows, gpt_table(rows)


def gpt_table(rows: list[GptRow]) -> str:
    head = ("strategy", "max abs err ours / XLA", "hand count", "ours: executed (HLO)", "simulator",
            "XLA: executed", "ours recv B", "XLA recv B", "ours ms", "XLA ms", "speedup", "predicted ms")
    out = md_table(head, ((
        r.strategy, f"{r.max_err_ours:.1e} / {r.max_err_xla:.1e}", r.hand, _fmt(r.ours_counts),
        _fmt(r.predicted_counts), _fmt(r.xla_counts), f"{r.ours_recv:,.0f}", f"{r.xla_recv:,.0f}",
        f"{r.ours_ms:.2f}", f"{r.xla_ms:.2f}", f"{r.speedup:.2f}x", f"{r.predicted_ms:.2f}") for r in rows))
    sp = [r.speedup for r in rows]
    gm = geomean(sp)
    rho = spearman([r.predicted_ms for r in rows], [r.ours_ms for r in rows]) if len(rows) > 1 else float("nan")
    out.append("")
    out.append(f"geometric-mean speedup {gm:.2f}x (min {min(sp, default=float('nan')):.2f}x; speedup = median "
               f"over interleaved pairs of XLA ms / ours ms, every row timed in every round); "
               f"Spearman(predicted, measured) = {rho:.2f}; predicted = local work at the calibrated rates of "
               f"partir_core.auto_profile.CPU8 + every collective priced by the measured profile "
               f"redist/profiles/cpu.json")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = suite_parser("partitioner", "the partitioner on the GPT against XLA's SPMD partitioner",
                     reps=(10, "interleaved rounds of every strategy"))
    p.add_argument("--small", action="store_true", help="the test-size GPT (seconds, not minutes)")
    p.add_argument("--strategies", default=",".join(GPT_STRATEGIES))
    args = p.parse_args(argv)
    sizes = dict(GPT_SIZES, seq=16, d_model=32, ffn=64, vocab=64, heads=4, head_dim=8) if args.small else None
    _, text = run_gpt_bench(strategies=tuple(args.strategies.split(",")), sizes=sizes, reps=args.reps)
    print(text)


if __name__ == "__main__":
    import os

    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    main()
