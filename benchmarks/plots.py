"""PNG plots of a run (matplotlib, imported lazily: it is only in the ``bench`` extra).

- ``<stem>-bytes.png``: bytes received / transfer lower bound, XLA and ours, per named case
  (1.0 is optimal; cases whose bound is 0 are left out, and a cap keeps the axis readable);
- ``<stem>-speedup.png``: the distribution of per-case speedups (XLA time / ours), named cases and
  random pairs, with the geometric means marked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.run import CaseResult, SuiteResult

RATIO_CAP = 8.0


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError(
            "the benchmark plots need matplotlib: pip install -e '.[bench]', or run with --no-plots"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ratio(v: float | None, bound: float | None) -> float | None:
    if v is None or bound is None or bound <= 0:
        return None
    return min(v / bound, RATIO_CAP)


def plot_bytes(results: tuple[CaseResult, ...], path: Path, title: str) -> Path:
    plt = _matplotlib()
    rows = [(r.case.name, _ratio(r.xla_best_bytes, r.bound_bytes), _ratio(r.ours_bytes, r.bound_bytes))
            for r in results if r.bound_bytes]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(rows) + 2), 5))
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [r[1] or 0 for r in rows], width=0.4, label="XLA SPMD partitioner")
    ax.bar([x + 0.2 for x in xs], [r[2] or 0 for r in rows], width=0.4, label="redist")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(xs)
    ax.set_xticklabels([r[0] for r in rows], rotation=75, ha="right", fontsize=7)
    ax.set_ylabel(f"bytes received / lower bound (capped at {RATIO_CAP:g})")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_speedups(suite: SuiteResult, path: Path) -> Path:
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    groups = (("named cases", suite.named), ("random pairs", suite.random))
    all_vals = [r.timing.speedup for _, rs in groups for r in rs if r.timing and r.timing.speedup > 0]
    if all_vals:
        lo, hi = math.log2(min(all_vals)), math.log2(max(all_vals))
        lo, hi = min(lo, -0.25), max(hi, 0.25)
        bins = [2 ** (lo + (hi - lo) * i / 30) for i in range(31)]
        for label, rs in groups:
            vals = [r.timing.speedup for r in rs if r.timing and r.timing.speedup > 0]
            if not vals:
                continue
            gm = math.exp(sum(map(math.log, vals)) / len(vals))
            _, _, patches = ax.hist(vals, bins=bins, alpha=0.6, label=f"{label} (geo-mean {gm:.2f}x)")
            color = patches[0].get_facecolor() if len(patches) else None
            ax.axvline(gm, linestyle=":", linewidth=1.5, color=color)
        ax.set_xscale("log", base=2)
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("speedup = XLA time / redist time (log scale; > 1: redist faster; dotted: geo-means)")
    ax.set_ylabel("cases")
    ax.set_title("Wall-clock speedup over XLA, 8 simulated CPU devices")
    if all_vals:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(suite: SuiteResult, out_dir: Path, stem: str) -> list[Path]:
    return [
        plot_bytes(suite.named, out_dir / f"{stem}-bytes.png",
                   "Bytes received per device / transfer lower bound (named cases)"),
        plot_speedups(suite, out_dir / f"{stem}-speedup.png"),
    ]
