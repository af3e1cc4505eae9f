"""PNG plots of a run (matplotlib, imported lazily: it is only in the ``bench`` extra).

- ``<stem>-bytes.png``: bytes received / transfer lower bound, XLA and ours, per named case, one
  horizontal bar pair per case so every name reads level (1.0 is optimal; cases whose bound is 0
  are left out, and a cap keeps the axis readable);
- ``<stem>-speedup.png``: per-case speedups (XLA time / ours), named cases and random pairs in
  separate panels (200 random pairs would hide 40 named cases in one histogram), each with its
  geometric mean drawn and labelled.

The plots are drawn from plain rows, so ``plots_from_json`` redraws them from a committed report
without rerunning the benchmark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.run import CaseResult, SuiteResult

RATIO_CAP = 8.0
INSTALL_HINT = "pip install -e '.[bench]' (or pass --no-plots)"


class BytesRow(NamedTuple):
    name: str
    xla_ratio: float | None
    ours_ratio: float | None


class Plots(NamedTuple):
    """What the plots need from a run: per named case byte ratios, and speedups per group."""

    bytes_rows: list[BytesRow]
    named_speedups: list[float]
    random_speedups: list[float]


def matplotlib_missing() -> str | None:
    """A message naming the extra if matplotlib cannot be imported (checked before a run starts)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"the benchmark plots need matplotlib, which is not installed: {INSTALL_HINT}"
    return None


def _matplotlib() -> Any:
    problem = matplotlib_missing()
    if problem:
        raise RuntimeError(problem)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ratio(v: float | None, bound: float | None) -> float | None:
    if v is None or bound is None or bound <= 0:
        return None
    return min(v / bound, RATIO_CAP)


def from_suite(suite: SuiteResult) -> Plots:
    def speedups(rs: Sequence[CaseResult]) -> list[float]:
        return [r.timing.speedup for r in rs if r.timing and r.timing.speedup > 0]

    rows = [BytesRow(r.case.name, _ratio(r.xla_best_bytes, r.bound_bytes), _ratio(r.ours_bytes, r.bound_bytes))
            for r in suite.named if r.bound_bytes]
    return Plots(rows, speedups(suite.named), speedups(suite.random))


def from_json(report: dict[str, Any]) -> Plots:
    """The same rows from a report's JSON (``benchmarks.report.render_json``)."""
    def speedups(cases: list[dict[str, Any]]) -> list[float]:
        return [c["derived"]["speedup"] for c in cases if (c["derived"].get("speedup") or 0) > 0]

    rows = []
    for c in report["named"]:
        d = c["derived"]
        if d.get("bound_bytes"):
            rows.append(BytesRow(c["case"]["name"], _ratio(d["xla_best_bytes"], d["bound_bytes"]),
                                 _ratio(d["ours_bytes"], d["bound_bytes"])))
    return Plots(rows, speedups(report["named"]), speedups(report["random"]))


def plot_bytes(rows: Sequence[BytesRow], path: Path, title: str) -> Path:
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(8.5, 0.24 * len(rows) + 1.6), layout="constrained")
    ys = list(range(len(rows)))
    ax.barh([y - 0.2 for y in ys], [r.xla_ratio or 0 for r in rows], height=0.4, label="XLA SPMD partitioner",
            color="#ff7f0e")
    ax.barh([y + 0.2 for y in ys], [r.ours_ratio or 0 for r in rows], height=0.4, label="redist", color="#1f77b4")
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.text(1.0, -1.0, " 1.0 = lower bound", fontsize=8, va="center")
    ax.set_yticks(ys)
    ax.set_yticklabels([r.name for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -1.5)
    ax.set_xlabel(f"bytes received per device / transfer lower bound (capped at {RATIO_CAP:g}; lower is better)")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _geomean(vals: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, vals)) / len(vals))


def plot_speedups(groups: Sequence[tuple[str, Sequence[float]]], path: Path) -> Path:
    """One histogram panel per group, shared log2 x axis, each geometric mean drawn and labelled."""
    plt = _matplotlib()
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    groups = [(label, vals) for label, vals in groups if vals]
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(5.2 * max(1, len(groups)), 4.2),
                             sharex=True, squeeze=False, layout="constrained")
    everything = [v for _, vals in groups for v in vals]
    if everything:
        lo, hi = min(math.log2(min(everything)), -0.25), max(math.log2(max(everything)), 0.25)
        bins = [2 ** (lo + (hi - lo) * i / 24) for i in range(25)]
    for ax, (label, vals), color in zip(axes[0], groups, ("#1f77b4", "#2ca02c")):
        gm = _geomean(vals)
        ax.hist(vals, bins=bins, color=color, alpha=0.8)
        ax.axvline(gm, color="#d62728", linewidth=1.8, label=f"geometric mean {gm:.2f}x")
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--", label="1x: equal time")
        ax.legend(loc="upper left", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{label} ({len(vals)})", fontsize=11)
        ax.set_xlabel("speedup = XLA time / redist time (log scale; > 1x: redist faster)", fontsize=9)
        ax.set_ylabel("cases")
    fig.suptitle("Wall-clock speedup over XLA, 8 simulated CPU devices", fontsize=12)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(plots: Plots, out_dir: Path, stem: str) -> list[Path]:
    return [
        plot_bytes(plots.bytes_rows, out_dir / f"{stem}-bytes.png",
                   "Bytes received per device / transfer lower bound (named cases)"),
        plot_speedups((("named cases", plots.named_speedups), ("random pairs", plots.random_speedups)),
                      out_dir / f"{stem}-speedup.png"),
    ]


def write_plots(suite: SuiteResult, out_dir: Path, stem: str) -> list[Path]:
    return draw(from_suite(suite), out_dir, stem)


def plots_from_json(json_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Redraw a report's plots from its JSON, next to it unless ``out_dir`` is given."""
    target = json_path.parent if out_dir is None else out_dir
    target.mkdir(parents=True, exist_ok=True)
    return draw(from_json(json.loads(json_path.read_text())), target, json_path.stem)
