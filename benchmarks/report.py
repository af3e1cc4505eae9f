"""The report: a Markdown file and a JSON file per run, plus the summary the README quotes.

Every table is preceded by the command that reproduces it. Bytes are per device, averaged over
devices, counted in the array's own dtype (see ``HloCollectives.recv_bytes_as``); the ratio to
the transfer lower bound is shown next to each so cases of different sizes compare at a glance.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.run import CaseResult, SuiteResult


@dataclass(frozen=True)
class Summary:
    """The headline numbers of one group of cases (named or random)."""

    cases: int
    timed: int
    geomean_speedup: float | None
    max_speedup: float | None
    min_speedup: float | None
    fewer_bytes: int
    equal_bytes: int
    more_bytes: int
    less_memory: int
    equal_memory: int
    more_memory: int
    xla_remat: int
    xla_at_bound: int
    ours_at_bound: int
    checked_equal: int
    errors: int
    median_planning_ms: float | None
    max_planning_ms: float | None


def summarize(results: Sequence[CaseResult]) -> Summary:
    speedups = [r.timing.speedup for r in results if r.timing is not None and r.timing.speedup > 0]
    bytes_cmp = [r.bytes_cmp() for r in results]
    mem_cmp = [r.memory_cmp() for r in results]
    plan_ms = sorted(r.ours.planning_s * 1e3 for r in results if r.ours is not None)
    return Summary(
        cases=len(results),
        timed=len(speedups),
        geomean_speedup=math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        max_speedup=max(speedups, default=None),
        min_speedup=min(speedups, default=None),
        fewer_bytes=bytes_cmp.count(-1),
        equal_bytes=bytes_cmp.count(0),
        more_bytes=bytes_cmp.count(1),
        less_memory=mem_cmp.count(-1),
        equal_memory=mem_cmp.count(0),
        more_memory=mem_cmp.count(1),
        xla_remat=sum(r.xla_remat for r in results),
        xla_at_bound=sum(_at_bound(r.xla_best_bytes, r.bound_bytes) for r in results),
        ours_at_bound=sum(_at_bound(r.ours_bytes, r.bound_bytes) for r in results),
        checked_equal=sum(r.ok and r.ours_ran for r in results),
        errors=sum(r.error is not None for r in results),
        median_planning_ms=plan_ms[len(plan_ms) // 2] if plan_ms else None,
        max_planning_ms=plan_ms[-1] if plan_ms else None,
    )


def _at_bound(v: float | None, bound: float | None) -> bool:
    return v is not None and bound is not None and v <= bound * (1 + 1e-9) + 1e-6


# -- formatting -----------------------------------------------------------------------------------------
def _kb(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1024:,.1f}"


def _ratio(v: float | None, bound: float | None) -> str:
    if v is None or bound is None:
        return ""
    if bound == 0:
        return " (=0)" if v == 0 else " (inf)"
    return f" ({v / bound:.2f}x)"


def _x(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}x"


def _cmp_mark(c: int | None) -> str:
    return {-1: "fewer", 0: "equal", 1: "**MORE**", None: "n/a"}[c]


def case_table(results: Sequence[CaseResult], with_types: bool = True) -> list[str]:
    head = (
        "| case | mesh | src -> dst | bound KiB | XLA KiB (x bound) | ours KiB (x bound) | bytes |"
        " XLA temp KiB | ours temp KiB | ours peak KiB | speedup | plan ms | ok |"
    )
    lines = [head, _sep(head)]
    for r in results:
        c = r.case
        x = r.xla_primary
        types = f"`{c.src}` -> `{c.dst}`" if with_types else ""
        ours = r.ours
        ok = "yes" if r.ok and ours is not None else ("XLA only" if r.ok and ours is None else "**no**")
        if ours is not None and ours.memory is None and r.error is None and r.xla_check is None:
            ok = "plan only"
        lines.append(
            "| " + " | ".join([
                c.name, c.mesh_text, types, _kb(r.bound_bytes),
                _kb(r.xla_best_bytes) + _ratio(r.xla_best_bytes, r.bound_bytes) + (" R" if r.xla_remat else ""),
                _kb(r.ours_bytes) + _ratio(r.ours_bytes, r.bound_bytes),
                _cmp_mark(r.bytes_cmp()),
                _kb(r.xla_best_temp) if x is not None else "n/a",
                _kb(ours.memory.temp_bytes) if ours and ours.memory else "n/a",
                _kb(ours.peak_bytes) if ours else "n/a",
                _x(r.timing.speedup) if r.timing else "n/a",
                f"{ours.planning_s * 1e3:.2f}" if ours else "n/a",
                ok,
            ]) + " |"
        )
    return lines


def _sep(head: str) -> str:
    return "|" + "---|" * (head.count("|") - 1)


def summary_table(named: Summary, random: Summary) -> list[str]:
    def row(label: str, f: Any) -> str:
        return f"| {label} | {f(named)} | {f(random)} |"

    def opt(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    return [
        f"| | named cases ({named.cases}) | random pairs ({random.cases}) |",
        "|---|---|---|",
        row("geometric-mean speedup (XLA time / ours)", lambda s: _x(s.geomean_speedup)),
        row("max speedup", lambda s: _x(s.max_speedup)),
        row("min speedup", lambda s: _x(s.min_speedup)),
        row("ours moves fewer / equal / more bytes than XLA",
            lambda s: f"{s.fewer_bytes} / {s.equal_bytes} / {s.more_bytes}"),
        row("ours uses less / equal / more temp memory than XLA",
            lambda s: f"{s.less_memory} / {s.equal_memory} / {s.more_memory}"),
        row("XLA fully rematerializes", lambda s: str(s.xla_remat)),
        row("at the transfer lower bound: XLA / ours", lambda s: f"{s.xla_at_bound} / {s.ours_at_bound}"),
        row("results checked equal (both sides)", lambda s: f"{s.checked_equal} / {s.cases}"),
        row("cases with errors", lambda s: str(s.errors)),
        row("planning time median / max (ms)",
            lambda s: f"{opt(s.median_planning_ms, '.2f')} / {opt(s.max_planning_ms, '.2f')}"),
    ]


def bar_lines(named: Summary, random: Summary, ours_available: bool) -> list[str]:
    """The issue's acceptance bar, checked."""
    if not ours_available:
        return ["- the bar cannot be checked: `redist.redistribute` or its executor was not available for this run"]
    more_b = named.more_bytes + random.more_bytes
    more_m = named.more_memory + random.more_memory
    gm = named.geomean_speedup
    return [
        f"- ours never moves more bytes than XLA: **{'PASS' if more_b == 0 else 'FAIL'}** ({more_b} cases more)",
        f"- ours never uses more memory than XLA: **{'PASS' if more_m == 0 else 'FAIL'}** ({more_m} cases more)",
        f"- geometric-mean speedup >= 1.22x on the named cases: "
        f"**{'PASS' if gm is not None and gm >= 1.22 else 'FAIL'}** ({_x(gm)})",
    ]


METHOD = """\
**XLA** compiles `jax.jit(identity, out_shardings=dst)` on an input laid out as `src` (Auto axes), and
`jax.sharding.reshard(x, dst)` in `jit` on Explicit axes; unreduced sources exist only on Explicit
axes, so for them both run there. Collectives are read from `compiled.as_text()` (kind, replica
groups, operand shapes) and converted to bytes received per device with the ring formulas of
docs/design.md section 4; the comparison uses the better of the two XLA programs for bytes and for
memory, and times the `out_shardings` program. XLA's CPU backend widens bf16 collectives to f32,
on both sides alike, so bytes are counted in the array's own dtype (raw HLO bytes are in the JSON).
"R" marks an involuntary full rematerialization logged by XLA's partitioner.
**Ours**: `redistribute(src, dst, mesh)` (planning time = median of 3 cold calls, the plan cache
cleared before each), the plan's
`recv_bytes`, `peak_bytes`, `lower_bound_bytes`; `redist.executor.compile_plan(plan)` compiled for
the same input gives the temp memory, and its HLO is read with the same parser (a disagreement
with the plan is listed under notes). **Temp** is `memory_analysis().temp_size_in_bytes` per device;
differences up to 64 B (XLA's buffer alignment, a 4-byte device-index scalar) count as equal.
**Speedup** = median XLA time / median ours over interleaved runs (A B, B A, ...) of the two
compiled programs on 8 simulated CPU devices, after 2 warm-up runs each, for a minimum number of
runs and then until a per-case time budget is spent; > 1 means ours is faster (the median of
per-pair ratios and the minima are in the JSON). Both outputs are checked
shard by shard against a NumPy reference (exact equality: values are small integers)."""


def render_markdown(suite: SuiteResult) -> str:
    named, random = summarize(suite.named), summarize(suite.random)
    m = suite.machine
    stem = report_stem(suite)
    lines = [
        f"# redist vs the XLA SPMD partitioner: {suite.date}",
        "",
        f"Reproduce: `{suite.command}` (wall time of this run: {suite.wall_s:.0f} s).",
        "",
        f"JAX {m.jax_version} (jaxlib {m.jaxlib_version}), Python {m.python}, {m.platform}; "
        f"{m.processor}, {m.cpu_count} cores, load average {m.load_avg[0]} at the end; "
        f"devices: {m.devices} (simulated with `--xla_force_host_platform_device_count=8`).",
        "",
        "## Summary",
        "",
        *summary_table(named, random),
        "",
        *bar_lines(named, random, suite.ours_available),
        "",
        "## Method",
        "",
        METHOD,
        "",
        *control_lines(suite),
        f"## Named cases ({len(suite.named)}; {_reps(suite.named, suite.reps_named, suite.budget_named_s)})",
        "",
        f"Reproduce: `{suite.command}`",
        "",
        *case_table(suite.named),
        "",
        *notes_section(suite.named),
        f"## Random pairs ({len(suite.random)}; {_reps(suite.random, suite.reps_random, suite.budget_random_s)})",
        "",
    ]
    if suite.pair_spec is not None:
        ps = suite.pair_spec
        lines += [
            f"Seed {ps.seed}, {ps.count} pairs, at most {ps.max_bytes} B per array, unreduced "
            f"probability {ps.unreduced_prob} per axis (`benchmarks/random_pairs.py`).",
            "",
        ]
    lines += [
        f"Reproduce: `{suite.command}`",
        "",
        "<details><summary>all random pairs</summary>",
        "",
        *case_table(suite.random),
        "",
        "</details>",
        "",
        *notes_section(suite.random),
        "## Plots",
        "",
        f"![bytes / lower bound per named case]({stem}-bytes.png)",
        "",
        f"![speedup distribution]({stem}-speedup.png)",
        "",
    ]
    for key, value in suite.extra.items():
        lines += [f"## {key}", "", str(value), ""]
    return "\n".join(lines)


def _reps(results: Sequence[CaseResult], minimum: int, budget: float) -> str:
    done = sorted(r.timing.reps for r in results if r.timing is not None)
    if not done:
        return "not timed"
    extra = f" or {budget:g} s of runs" if budget else ""
    return f"timed runs per side: at least {minimum}{extra}, median {done[len(done) // 2]}"


def control_lines(suite: SuiteResult) -> list[str]:
    c = suite.control
    if c is None:
        return []
    return [
        f"Timing control: XLA's program for `{suite.control_case}` timed against itself the same way "
        f"gives {c.speedup:.3f}x ({c.reps} runs per side; per-pair median {c.pair_ratio_median:.3f}x): "
        f"ratios within a few percent of 1.0 are noise on this machine.",
        "",
    ]


def notes_section(results: Sequence[CaseResult]) -> list[str]:
    """Per-case notes: errors, failed checks, rematerializations, and why a case is slower."""
    out: list[str] = []
    for r in results:
        items = list(r.notes)
        if r.error:
            items.insert(0, f"error: {r.error}")
        if r.xla_check:
            items.insert(0, f"XLA result check failed: {r.xla_check}")
        if r.ours_check:
            items.insert(0, f"our result check failed: {r.ours_check}")
        if r.ours is not None:
            items.append("plan: " + " -> ".join(r.ours.steps) if r.ours.steps else "plan: (empty)")
        if r.xla_primary is not None:
            items.append("XLA: " + r.xla_primary.collectives.summary())
        if items and (r.notes or r.error or r.xla_check or r.ours_check):
            out.append(f"- **{r.case.name}**: " + "; ".join(items))
    if out:
        return ["Notes:", "", *out, ""]
    return []


# -- JSON ---------------------------------------------------------------------------------------------
def _jsonable(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: _jsonable(getattr(o, f.name)) for f in dataclasses.fields(o)}
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def case_json(r: CaseResult) -> dict[str, Any]:
    d = _jsonable(r)
    d["derived"] = {
        "bound_bytes": r.bound_bytes,
        "xla_best_bytes": r.xla_best_bytes,
        "xla_best_temp_bytes": r.xla_best_temp,
        "ours_bytes": r.ours_bytes,
        "bytes_cmp": r.bytes_cmp(),
        "memory_cmp": r.memory_cmp(),
        "speedup": r.timing.speedup if r.timing else None,
        "xla_remat": r.xla_remat,
        "ok": r.ok,
    }
    return d


def render_json(suite: SuiteResult) -> dict[str, Any]:
    return {
        "command": suite.command,
        "date": suite.date,
        "machine": _jsonable(suite.machine),
        "wall_s": suite.wall_s,
        "ours_available": suite.ours_available,
        "reps": {"named": suite.reps_named, "random": suite.reps_random},
        "control": {"case": suite.control_case, "timing": _jsonable(suite.control)},
        "budget_s": {"named": suite.budget_named_s, "random": suite.budget_random_s},
        "pair_spec": _jsonable(suite.pair_spec),
        "summary": {"named": _jsonable(summarize(suite.named)), "random": _jsonable(summarize(suite.random))},
        "named": [case_json(r) for r in suite.named],
        "random": [case_json(r) for r in suite.random],
        "extra": _jsonable(suite.extra),
    }


def report_stem(suite: SuiteResult) -> str:
    """``<date>`` for the full run, ``<date>-quick`` for ``--quick``."""
    return suite.date + ("-quick" if "--quick" in suite.command.split() else "")


def write_report(suite: SuiteResult, out_dir: Path, plots: bool = True) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.json`` and (optionally) the PNG plots; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report_stem(suite)
    md = out_dir / f"{stem}.md"
    js = out_dir / f"{stem}.json"
    md.write_text(render_markdown(suite))
    js.write_text(json.dumps(render_json(suite), separators=(",", ":")) + "\n")  # compact: ~3 KB/case
    written = [md, js]
    if plots:
        from benchmarks.plots import write_plots

        written += write_plots(suite, out_dir, stem)
    return written
