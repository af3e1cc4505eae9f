"""Golden plans: the printed plan of every named case and of a seeded random sample, one text file each.

Why: a planner change otherwise shows only as a changed number in a test. With the plans on disk
(in the spirit of Shardy's lit tests) the same change reviews as a text diff of the plans it alters.

``python -m benchmarks.golden`` checks the files under ``tests/golden/plans/`` (exit 1 with a diff
on any mismatch, missing or stale file); ``python -m benchmarks.golden --update`` rewrites them and
deletes stale ones. ``tests/test_golden_plans.py`` runs the same comparison, one test per file.

Only the public API is used (``redistribute``, ``str(plan)``, plan attributes), so a change of the
printed format needs a regeneration and nothing else. Contents are deterministic: no timestamps,
paths or machine-dependent numbers, and every float is printed with a fixed format.
"""

from __future__ import annotations

import difflib
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from benchmarks.cases import NAMED_CASES, Case
from benchmarks.harness import suite_parser
from benchmarks.random_pairs import PairSpec, random_pairs
from redist import CostModel, Plan, redistribute
from redist.profile import packaged_profile

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden" / "plans"
UPDATE_COMMAND = "python -m benchmarks.golden --update"

GOLDEN_PAIRS = PairSpec(seed=10, count=48, unreduced_prob=0.25, dst_unreduced_prob=0.25)
"""The random sample: pending sums on both sides (a quarter of the axes each), the benchmark's
meshes (``x=8``, ``2x4``, ``4x2``, ``2x2x2``: axes of 4 and 8 are where plans use sub-axes)."""

OBJECTIVES: tuple[tuple[str, CostModel | None], ...] = (
    ("bytes (objective='bytes', the transfer bound)", CostModel(objective="bytes")),
    ("alpha-beta (objective='alpha-beta', the unmeasured alpha-beta model)", CostModel(objective="alpha-beta")),
    ("measured (redistribute's default: the shipped CPU profile, redist/profiles/cpu.json)", None),
)
"""Every case is planned under the three objectives (``redist.Objective``): least bytes (the
transfer guarantee), the least estimated time under the unmeasured alpha-beta model (latency per
ring round, one bandwidth), and ``redistribute``'s default, least time under the measured CPU
profile (these change when the profile is recalibrated)."""


def golden_cases() -> tuple[Case, ...]:
    """The named cases, then the random sample (renamed ``seed<S>_...`` so no name reads as the
    benchmark's own random pair of the same index)."""
    pairs = tuple(replace(c, name=f"seed{GOLDEN_PAIRS.seed}_{c.name}") for c in random_pairs(GOLDEN_PAIRS))
    return NAMED_CASES + pairs


def file_name(case: Case) -> str:
    """``<case name>.txt`` with anything outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", case.name) + ".txt"


def plan_command(case: Case) -> str:
    """The shell command that prints the same plan (default cost model)."""
    return f"redist plan {shlex.quote(case.src)} {shlex.quote(case.dst)} --mesh {case.mesh_text}"


def figures_line(plan: Plan) -> str:
    """The exact measures, fixed formats only, with verdicts a reviewer can grep for."""
    kinds = ",".join(k for k, _, _ in plan.collectives()) or "-"
    at_bound = "at bound" if round(plan.recv_bytes, 6) <= round(plan.lower_bound_bytes, 6) else "ABOVE BOUND"
    in_memory = "within" if plan.peak_bytes <= plan.memory_bound_bytes else "OVER"
    return (
        f"figures: recv {plan.recv_bytes:.3f} B, lower bound {plan.lower_bound_bytes:.3f} B ({at_bound}); "
        f"busiest device {plan.recv_bytes_max:.3f} B, its lower bound {plan.lower_bound_bytes_max:.3f} B; "
        f"peak {plan.peak_bytes} B, memory bound {plan.memory_bound_bytes} B ({in_memory}); "
        f"collectives {plan.n_collectives} [{kinds}]; time {plan.time_s * 1e6:.3f} us"
    )


def _section(case: Case, objective: str, cm: CostModel | None) -> list[str]:
    plan = redistribute(case.src, case.dst, case.mesh, cost_model=cm if cm is not None else cpu_profile_model())
    return [f"== objective {objective}", str(plan), figures_line(plan)]


def cpu_profile_model() -> CostModel:
    """The shipped CPU profile's model, whatever backend runs the check (goldens are text)."""
    prof = packaged_profile("cpu")
    assert prof is not None, "redist/profiles/cpu.json is missing"
    return prof.cost_model("measured")


def golden_text(case: Case) -> str:
    """The whole file for ``case``: header, then one section per objective."""
    lines = [
        f"# case: {case.name} ({case.family})",
        f"# why: {case.why}" if case.why else "# why: -",
        f"# command: {plan_command(case)}",
        "# other objectives: append --objective bytes or --objective alpha-beta",
        f"# regenerate: {UPDATE_COMMAND}",
    ]
    for objective, cm in OBJECTIVES:
        lines += [""] + _section(case, objective, cm)
    return "\n".join(lines) + "\n"


def expected_files() -> dict[str, Case]:
    """File name -> case, in the cases' order; raises if two cases sanitise to one name."""
    files: dict[str, Case] = {}
    for case in golden_cases():
        name = file_name(case)
        if name in files:
            raise ValueError(f"cases {files[name].name!r} and {case.name!r} both map to golden file {name}")
        files[name] = case
    return files


def stale_files(directory: Path = GOLDEN_DIR) -> list[str]:
    """Golden files on disk that no current case produces (deleted or renamed cases)."""
    current = expected_files()
    return sorted(p.name for p in directory.glob("*.txt") if p.name not in current)


def diff_text(name: str, expected: str, actual: str) -> str:
    """A unified diff from the file on disk (``actual``) to what the planner prints now."""
    return "".join(difflib.unified_diff(
        actual.splitlines(keepends=True), expected.splitlines(keepends=True),
        fromfile=f"tests/golden/plans/{name} (on disk)", tofile=f"{name} (planner now)",
    ))


def check(directory: Path = GOLDEN_DIR) -> Iterator[str]:
    """One message per problem: a diff per changed file, then missing and stale files."""
    for name, case in expected_files().items():
        path = directory / name
        if not path.exists():
            yield f"missing: tests/golden/plans/{name}"
            continue
        diff = diff_text(name, golden_text(case), path.read_text())
        if diff:
            yield diff
    for name in stale_files(directory):
        yield f"stale (no such case): tests/golden/plans/{name}"


def update(directory: Path = GOLDEN_DIR) -> tuple[int, int]:
    """Rewrite changed files and delete stale ones; returns (files written, files deleted)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, case in expected_files().items():
        path = directory / name
        text = golden_text(case)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written += 1
    stale = stale_files(directory)
    for name in stale:
        (directory / name).unlink()
    return written, len(stale)


def main(argv: list[str] | None = None) -> int:
    parser = suite_parser("golden", __doc__)
    parser.add_argument("--update", action="store_true", help="rewrite the golden files and delete stale ones")
    args = parser.parse_args(argv)
    if args.update:
        written, deleted = update()
        print(f"golden plans: {len(expected_files())} files, {written} written, {deleted} stale deleted")
        return 0
    problems = list(check())
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} golden plan(s) differ; after a deliberate planner change run: {UPDATE_COMMAND}")
        return 1
    print(f"golden plans: {len(expected_files())} files match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
