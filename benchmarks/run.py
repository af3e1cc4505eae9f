"""Running the suite: every case through both sides, checked, timed, recorded.

A case never aborts the run: a failure on either side is recorded in the case's ``error`` and the
report lists it. ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before JAX is
imported; ``redist bench`` does that, library users must do it themselves.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import jax
import numpy as np

from benchmarks import our_side
from benchmarks.cases import Case
from benchmarks.our_side import OurResult
from benchmarks.random_pairs import PairSpec
from redist.arrays import check_output, make_input
from redist.hlo import HloCollectives
from redist.timing import Timing, time_interleaved
from redist.xla_side import XlaVariant, measure_variant, same_collectives, xla_programs
from spmd_types import Mesh, ShardingType
from spmd_types.jax_interop import mesh_to_jax
from spmd_types.layout import overlap_elements
from spmd_types.memo import Scope, memo

NOISE = 0.05
"""Relative speed differences below this are reported as timing noise."""

MEMORY_SLACK = 64
"""Temp-memory differences up to this many bytes count as equal: XLA aligns buffers to 64 bytes,
and a program that reads its device index keeps a 4-byte scalar; neither is array memory."""


@dataclass(frozen=True)
class CaseResult:
    """Everything measured for one case (both sides)."""

    case: Case
    src_local_bytes: int
    dst_local_bytes: int
    overlap_bound_bytes: float | None  # our own bound (sources without unreduced axes)
    xla: tuple[XlaVariant, ...] = ()
    reshard_differs: bool = False
    ours: OurResult | None = None
    timing: Timing | None = None
    xla_check: str | None = None  # None: XLA's output equals the reference, laid out as dst
    ours_check: str | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()

    # -- derived comparisons (used by the report and the summary) -------------------------------------
    @property
    def xla_primary(self) -> XlaVariant | None:
        return self.xla[0] if self.xla else None

    @property
    def xla_best_bytes(self) -> float | None:
        """Fewest bytes of the XLA variants (the comparison is against XLA's better program)."""
        vals = [v.recv_bytes for v in self.xla if v.recv_bytes is not None]
        return min(vals) if vals else None

    @property
    def xla_best_temp(self) -> int | None:
        return min((v.memory.temp_bytes for v in self.xla), default=None)

    @property
    def xla_remat(self) -> bool:
        return any(v.remat for v in self.xla)

    @property
    def bound_bytes(self) -> float | None:
        """The transfer lower bound: the plan's (it covers unreduced sources), else our own."""
        if self.ours is not None:
            return self.ours.lower_bound_bytes
        return self.overlap_bound_bytes

    @property
    def ours_bytes(self) -> float | None:
        return self.ours.recv_bytes if self.ours is not None else None

    def bytes_cmp(self) -> int | None:
        """-1: ours moves fewer bytes than XLA, 0: equal, 1: more; None if not comparable."""
        a, b = self.ours_bytes, self.xla_best_bytes
        if a is None or b is None:
            return None
        return 0 if abs(a - b) <= 1e-6 * max(1.0, b) else (-1 if a < b else 1)

    def memory_cmp(self) -> int | None:
        """The same for compiled temporary memory."""
        if self.ours is None or self.ours.memory is None or self.xla_best_temp is None:
            return None
        a, b = self.ours.memory.temp_bytes, self.xla_best_temp
        return 0 if abs(a - b) <= MEMORY_SLACK else (-1 if a < b else 1)

    @property
    def ours_ran(self) -> bool:
        """Whether our compiled executor ran (not just the planner)."""
        return self.ours is not None and self.ours.memory is not None

    @property
    def ok(self) -> bool:
        return self.error is None and self.xla_check is None and self.ours_check is None


@dataclass(frozen=True)
class Machine:
    """Where the numbers were taken."""

    jax_version: str
    jaxlib_version: str
    python: str
    platform: str
    processor: str
    cpu_count: int
    devices: str
    load_avg: tuple[float, float, float]

    @staticmethod
    def current() -> Machine:
        import jaxlib

        try:
            load = os.getloadavg()
        except OSError:  # pragma: no cover
            load = (0.0, 0.0, 0.0)
        return Machine(
            jax_version=jax.__version__,
            jaxlib_version=getattr(jaxlib, "__version__", "?"),
            python=platform.python_version(),
            platform=platform.platform(),
            processor=_cpu_model(),
            cpu_count=os.cpu_count() or 0,
            devices=f"{jax.device_count()} x {jax.devices()[0].platform}",
            load_avg=(round(load[0], 2), round(load[1], 2), round(load[2], 2)),
        )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover
        pass
    return platform.processor() or "unknown"


@dataclass(frozen=True)
class SuiteResult:
    """A whole run: the named cases, the random pairs, and how they were produced."""

    command: str
    date: str
    machine: Machine
    named: tuple[CaseResult, ...]
    random: tuple[CaseResult, ...]
    pair_spec: PairSpec | None
    reps_named: int  # minimum timed runs per side (more while the time budget lasts)
    reps_random: int
    budget_named_s: float
    budget_random_s: float
    wall_s: float
    ours_available: bool
    control: Timing | None = None  # XLA's program timed against itself: the noise floor of a ratio
    control_case: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- meshes ------------------------------------------------------------------------------------------
@memo(Scope.MESH, maxsize=64)
def jax_meshes(mesh: Mesh) -> tuple[jax.sharding.Mesh, jax.sharding.Mesh]:
    """(Auto-axes mesh, Explicit-axes mesh) over the same first ``mesh.size`` devices."""
    return mesh_to_jax(mesh, explicit=False), mesh_to_jax(mesh, explicit=True)


def overlap_bound(src: ShardingType, dst: ShardingType) -> float | None:
    """docs/design.md section 4's bound for sources without unreduced axes, computed here independently
    of ``redist`` so the report can cross-check the plan's ``lower_bound_bytes``."""
    if src.unreduced or dst.unreduced:
        return None
    missing = dst.local_size - overlap_elements(src, dst)
    return float(np.mean(missing)) * src.itemsize


# -- one case -----------------------------------------------------------------------------------------
def run_case(
    case: Case, reps: int, time_it: bool = True, with_ours: bool = True, budget_s: float = 0.0
) -> CaseResult:
    """Measure ``case`` on both sides; failures are recorded, never raised."""
    try:
        src, dst = case.src_type, case.dst_type
    except Exception as e:  # a bad case definition: still a row in the report
        return CaseResult(case, 0, 0, None, error=f"invalid case: {type(e).__name__}: {e}")
    base = CaseResult(case, src.local_bytes, dst.local_bytes, overlap_bound(src, dst))
    try:
        return _run_case(case, src, dst, base, reps, time_it, with_ours, budget_s)
    except Exception as e:
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return _replace(base, error=tb)


def _replace(r: CaseResult, **changes: Any) -> CaseResult:
    return dataclasses.replace(r, **changes)


def _run_case(
    case: Case, src: ShardingType, dst: ShardingType, base: CaseResult, reps: int,
    time_it: bool, with_ours: bool, budget_s: float,
) -> CaseResult:
    auto_mesh, explicit_mesh = jax_meshes(case.mesh)
    x_explicit, expected = make_input(src, explicit_mesh)
    x_auto = x_explicit if src.unreduced else make_input(src, auto_mesh)[0]
    variants: list[XlaVariant] = []
    compiled_primary: Any = None
    x_primary: Any = None
    for method, (fn, mesh_used) in xla_programs(src, dst, auto_mesh, explicit_mesh).items():
        x = x_explicit if mesh_used is explicit_mesh else x_auto
        kind = "explicit" if mesh_used is explicit_mesh else "auto"
        variant, compiled = measure_variant(method, fn, x, kind, src.itemsize)
        variants.append(variant)
        if compiled_primary is None:
            compiled_primary, x_primary = compiled, x
    xla_check = check_output(compiled_primary(x_primary), expected, dst)
    result = _replace(
        base, xla=tuple(variants), reshard_differs=not same_collectives(variants[0], variants[1]),
        xla_check=xla_check,
    )
    if not (with_ours and our_side.available()):
        return _replace(result, notes=_notes(result))
    try:
        ours, compiled_ours = our_side.measure_ours(src, dst, x_explicit)
    except Exception as e:  # keep XLA's measurements; our failure is the case's error
        err = traceback.format_exception_only(type(e), e)[-1].strip()
        return _replace(result, error=f"ours: {err}", notes=_notes(result))
    if compiled_ours is None:  # planner only, no executor yet
        result = _replace(result, ours=ours)
        return _replace(result, notes=(*_notes(result), "ours: plan only (redist.executor not available)"))
    ours_check = check_output(compiled_ours(x_explicit), expected, dst)
    timing = (
        time_interleaved(compiled_primary, x_primary, compiled_ours, x_explicit, reps=reps, budget_s=budget_s)
        if time_it else None
    )
    result = _replace(result, ours=ours, ours_check=ours_check, timing=timing)
    return _replace(result, notes=_notes(result))


def _notes(r: CaseResult) -> tuple[str, ...]:
    """Human explanations: rematerialization, plan/HLO disagreements, and why a case is slower."""
    notes: list[str] = []
    if r.xla_remat:
        notes.append("XLA: involuntary full rematerialization (gathers the whole array, then slices)")
    if r.reshard_differs and len(r.xla) > 1:
        a, b = r.xla[0], r.xla[1]
        notes.append(f"XLA reshard differs: {b.collectives.summary()} ({_fmt(b.recv_bytes)} vs {_fmt(a.recv_bytes)})")
    if r.ours is not None:
        hlo = r.ours.hlo_recv_bytes
        if hlo is not None and abs(hlo - r.ours.recv_bytes) > 1e-6 * max(1.0, r.ours.recv_bytes):
            notes.append(f"ours: plan says {_fmt(r.ours.recv_bytes)} B, compiled HLO moves {_fmt(hlo)} B")
        if r.overlap_bound_bytes is not None and abs(r.overlap_bound_bytes - r.ours.lower_bound_bytes) > 1e-6 * max(
            1.0, r.overlap_bound_bytes
        ):
            notes.append(
                f"bound mismatch: plan {_fmt(r.ours.lower_bound_bytes)} B vs benchmark {_fmt(r.overlap_bound_bytes)} B"
            )
    if r.memory_cmp() == 1 and r.ours is not None and r.ours.memory is not None:
        notes.append(
            f"ours uses more temp memory: {r.ours.memory.temp_bytes:,} B vs XLA's {r.xla_best_temp:,} B "
            f"(plan peak {r.ours.peak_bytes:,} B)"
        )
    if r.timing is not None and r.timing.speedup < 1.0 and r.ours is not None and r.xla_primary is not None:
        notes.append("slower: " + _why_slower(r))
    return tuple(notes)


def _why_slower(r: CaseResult) -> str:
    assert r.ours is not None and r.xla_primary is not None and r.timing is not None
    x = r.xla_primary
    reasons = []
    if 1.0 / r.timing.speedup - 1.0 < NOISE:
        reasons.append(f"within timing noise ({(1 / r.timing.speedup - 1) * 100:.1f}% < {NOISE * 100:.0f}%)")
    if r.bytes_cmp() == 1:
        reasons.append(f"ours moves more bytes ({_fmt(r.ours.recv_bytes)} vs {_fmt(r.xla_best_bytes)})")
    assert r.ours.collectives is not None and r.ours.memory is not None  # timed, so compiled
    n_ours, n_xla = len(r.ours.collectives.collectives), len(x.collectives.collectives)
    if n_ours > n_xla:
        reasons.append(f"ours issues {n_ours} collectives vs XLA's {n_xla} (fixed cost per collective)")
    if r.ours.memory.temp_bytes > x.memory.temp_bytes + MEMORY_SLACK:
        reasons.append(
            f"ours has more temporaries ({r.ours.memory.temp_bytes} vs {x.memory.temp_bytes} B: extra local copies)"
        )
    if not reasons:
        reasons.append(_same_traffic_reason(r.ours.collectives, x.collectives))
    return "; ".join(reasons)


def _same_traffic_reason(ours: HloCollectives, xla: HloCollectives) -> str:
    """Explain a slowdown at equal or better traffic as precisely as the HLO allows."""
    key = lambda h: [(c.kind, c.groups, c.operand_elements) for c in h.collectives]
    if key(ours) == key(xla):
        forms = [(a.groups_form, b.groups_form) for a, b in zip(ours.collectives, xla.collectives)
                 if a.groups_form != b.groups_form]
        spelled = (
            f"; only the replica-group spelling differs (ours {forms[0][0]}, XLA {forms[0][1]})" if forms else ""
        )
        return (
            f"identical collectives ({xla.summary()}){spelled}: the gap is the CPU runtime's handling "
            f"of the two programs, not traffic"
        )
    return (
        f"same or fewer bytes and collectives ({ours.summary()} vs {xla.summary()}); "
        f"the difference is in the local copies around them"
    )


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def timing_control(case: Case, reps: int, budget_s: float) -> Timing | None:
    """Time XLA's program for ``case`` against itself, exactly as the two sides are timed.

    Why: on a shared machine a ratio of 1.05 can be noise; this A/A ratio, printed in the report,
    shows how far from 1.0 identical programs land under the same conditions.
    """
    try:
        auto_mesh, explicit_mesh = jax_meshes(case.mesh)
        src, dst = case.src_type, case.dst_type
        fn, mesh_used = xla_programs(src, dst, auto_mesh, explicit_mesh)["out_shardings"]
        x = make_input(src, mesh_used)[0]
        compiled = fn.lower(x).compile()
        return time_interleaved(compiled, x, compiled, x, reps=reps, budget_s=budget_s)
    except Exception:  # the control is informative only; never fail the suite for it
        return None


# -- the suite ----------------------------------------------------------------------------------------
class Progress:
    """A progress bar on stderr through ``rich`` (elapsed, remaining, the case just run); one line
    per case when stderr is not a terminal, so logs keep a record."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self.console = Console(file=stream if stream is not None else sys.stderr, highlight=False)
        self.total, self.done = total, 0
        self.bar = RichProgress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                                TimeRemainingColumn(), TextColumn("{task.description}"), console=self.console,
                                disable=not self.console.is_terminal)
        self.task = self.bar.add_task("", total=total)
        self.bar.start()

    def step(self, label: str) -> None:
        self.done += 1
        self.bar.update(self.task, advance=1, description=label)
        if not self.console.is_terminal:
            self.console.print(f"{self.done}/{self.total} {label}")
        if self.done == self.total:
            self.bar.stop()


def run_suite(
    named: Sequence[Case], random: Sequence[Case], *, command: str, reps_named: int = 21,
    reps_random: int = 7, pair_spec: PairSpec | None = None, progress: bool = True,
    with_ours: bool = True, budget_named_s: float = 0.0, budget_random_s: float = 0.0,
) -> SuiteResult:
    """Run every case (named first, then random pairs) and collect a ``SuiteResult``."""
    start = time.perf_counter()
    first = (list(named) + list(random))[:1]
    control = timing_control(first[0], reps_named, budget_named_s) if first else None
    bar = Progress(len(named) + len(random)) if progress else None
    out: dict[str, list[CaseResult]] = {"named": [], "random": []}
    groups = (("named", named, reps_named, budget_named_s), ("random", random, reps_random, budget_random_s))
    for group, cases, reps, budget in groups:
        for case in cases:
            r = run_case(case, reps, with_ours=with_ours, budget_s=budget)
            out[group].append(r)
            if bar is not None:
                bar.step(case.name + ("" if r.ok else "  (problem recorded)"))
            jax.clear_caches()
    return SuiteResult(
        command=command,
        date=datetime.datetime.now().strftime("%Y-%m-%d"),
        machine=Machine.current(),
        named=tuple(out["named"]),
        random=tuple(out["random"]),
        pair_spec=pair_spec,
        reps_named=reps_named,
        reps_random=reps_random,
        budget_named_s=budget_named_s,
        budget_random_s=budget_random_s,
        wall_s=time.perf_counter() - start,
        ours_available=with_ours and our_side.available() and our_side.executor_available(),
        control=control,
        control_case=first[0].name if first else "",
    )
