"""What every suite repeats: its command line, its clock, the machine it ran on and its results file.

Why one module: a results file is only worth keeping if it says how to reproduce it and how noisy
the machine was, and a ratio of two programs only if both ran interleaved (docs/results.md). Each
suite used to write those lines itself; here they are written once. Nothing here imports JAX at
module level or sets ``XLA_FLAGS``, so a suite that launches processes with its own device count
(``benchmarks.multiprocess``) can use it too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redist.timing import balanced_order, period, schedule

# -- the command line ------------------------------------------------------------------------------


def at_least(low: float, kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)``, refused (a usage error naming the value) below ``low``."""

    def parse(text: str) -> Any:
        value = kind(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is below {low}: give a count or budget of at least {low}")
        return value

    return parse


def suite_parser(module: str, doc: str | None, *, out: str | None = None, seed: str | None = None,
                 reps: tuple[int, str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``python -m benchmarks.<module>``, described by the first line of ``doc``,
    with the options most suites share: ``--out DIR`` (help ``out``), ``--seed K`` (default 0,
    help ``seed``) and ``--reps N`` (``reps``: its default and help; at least 1)."""
    ap = argparse.ArgumentParser(prog=f"python -m benchmarks.{module}", description=(doc or "").split("\n")[0])
    if out is not None:
        ap.add_argument("--out", default=None, help=out)
    if seed is not None:
        ap.add_argument("--seed", type=int, default=0, help=seed)
    if reps is not None:
        ap.add_argument("--reps", type=at_least(1, int), default=reps[0], help=reps[1])
    return ap


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces this run, as a results file quotes it."""
    args = list(argv) if argv is not None else sys.argv[1:]
    return " ".join([f"python -m benchmarks.{module}", *args])


# -- the machine and the clock ---------------------------------------------------------------------


@dataclass
class Clock:
    """Wall time and load average of one run, from its start: the machine is shared, so a reader
    judges the figures by how loaded it was while they were taken."""

    load_before: float = field(default_factory=lambda: os.getloadavg()[0])
    start: float = field(default_factory=time.perf_counter)

    @property
    def load(self) -> tuple[float, float]:
        """The 1-minute load average at the start and now."""
        return self.load_before, os.getloadavg()[0]

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.start


def machine() -> str:
    """JAX's version, its devices and the host's cores: ``JAX 0.x, 8 x cpu, 2 cores``."""
    import jax

    return f"JAX {jax.__version__}, {jax.device_count()} x {jax.devices()[0].platform}, {os.cpu_count()} cores"


def header(title: str, command: str, load: tuple[float, float], wall_s: float, detail: str = "") -> list[str]:
    """Title, command and machine (and ``detail``, e.g. the rounds a case): what a reader needs to
    judge the numbers below (the machine is shared, so the load average says how noisy they are)."""
    return [
        f"# {title} ({datetime.date.today()})", "",
        f"Command: `{command}`  ", f"{machine()}; {detail + '; ' if detail else ''}load average {load[0]:.1f} "
        f"before, {load[1]:.1f} after; {wall_s:.0f} s.", ""]


def write_results(out: str | Path, suffix: str, text: str, data: dict[str, Any] | None = None) -> Path:
    """``<out>/<date>-<suffix>.md`` (and ``.json`` of ``data`` when given); the Markdown's path."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{datetime.date.today()}-{suffix}"
    (folder / f"{stem}.md").write_text(text)
    if data is not None:
        (folder / f"{stem}.json").write_text(json.dumps(data, indent=1))
    return folder / f"{stem}.md"


# -- interleaved timing ----------------------------------------------------------------------------


def thunk(prog: Any, x: Any) -> Callable[[], Any]:
    """``prog(x)`` as a call of no arguments, the form the round robin times."""
    return lambda: prog(x)


def round_robin_times(fns: dict[str, Callable[[], Any]], seconds: float, min_reps: int = 15) -> dict[str, list[float]]:
    """Seconds of each call of each thunk, run in ``redist.timing.schedule``'s balanced rounds (each
    runs after each other one equally often) until ``seconds`` pass, at least ``min_reps`` rounds,
    and whole periods of it."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:
        fns[n]().block_until_ready()
    for order in schedule(len(names), min_reps, seconds, whole_periods=True):
        for j in order:
            t = time.perf_counter()
            fns[names[j]]().block_until_ready()
            times[names[j]].append(time.perf_counter() - t)
    return times


def round_robin(fns: dict[str, Callable[[], Any]], seconds: float, min_reps: int = 15) -> dict[str, float]:
    """Median seconds of each thunk (``round_robin_times``)."""
    return {n: statistics.median(v) for n, v in round_robin_times(fns, seconds, min_reps).items()}


def with_control(fns: dict[str, Callable[[], Any]], of: str, seconds: float,
                 min_reps: int = 15) -> tuple[dict[str, float], float]:
    """``round_robin`` with an A/A control: ``fns[of]`` timed a second time under another name in
    the same rounds. Returns the medians (without the copy) and the copy's median over
    ``fns[of]``'s: how far apart identical work comes out on this machine."""
    again = f"{of} (A/A)"
    med = round_robin({**fns, again: fns[of]}, seconds, min_reps)
    return med, med.pop(again) / med[of]


def geomean(v: Sequence[float]) -> float:
    """The geometric mean of ratios (``nan`` for none): how suites summarise speedups."""
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


__all__ = ["Clock", "at_least", "balanced_order", "command_line", "geomean", "header", "machine", "period",
           "round_robin", "round_robin_times", "suite_parser", "thunk", "with_control", "write_results"]
