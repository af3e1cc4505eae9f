"""Golden plans: each file under tests/golden/plans/ equals what the planner prints now.

A failure shows the unified diff of the plan and the command that regenerates the files; after a
deliberate planner change, regenerate and review the diff as part of the change (tests/golden/README.md).
Planning only (no JAX execution): the whole module runs in about a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.golden import (
    GOLDEN_DIR,
    UPDATE_COMMAND,
    check,
    diff_text,
    expected_files,
    golden_text,
    stale_files,
)

FILES = expected_files()


@pytest.mark.parametrize("name", list(FILES))
def test_golden_plan(name: str) -> None:
    path = GOLDEN_DIR / name
    assert path.exists(), f"no golden file tests/golden/plans/{name}; create it with: {UPDATE_COMMAND}"
    diff = diff_text(name, golden_text(FILES[name]), path.read_text())
    if diff:
        pytest.fail(f"the plan of {FILES[name].name} changed; if deliberate run: {UPDATE_COMMAND}\n{diff}", pytrace=False)


def test_no_stale_golden_files() -> None:
    stale = stale_files()
    assert not stale, f"golden files for no current case: {stale}; delete them with: {UPDATE_COMMAND}"


def test_golden_sample_covers_pending_sums_and_sub_axes() -> None:
    """The random sample keeps exercising what it was chosen for: pending sums on either side and
    plans that move sub-axes (the header says what changed if the generator's parameters drift)."""
    cases = list(FILES.values())
    assert any(c.src_type.unreduced and c.dst_type.unreduced for c in cases)
    assert any(not c.src_type.unreduced and c.dst_type.unreduced for c in cases)
    assert any(":(" in (GOLDEN_DIR / n).read_text() for n in FILES), "no golden plan uses a sub-axis"


def test_check_reports_a_changed_and_a_stale_file(tmp_path: Path) -> None:
    """The checker cannot pass vacuously: an edited file yields its diff, an extra file is stale."""
    for name, case in FILES.items():
        (tmp_path / name).write_text(golden_text(case))
    assert list(check(tmp_path)) == []
    first = next(iter(FILES))
    (tmp_path / first).write_text((tmp_path / first).read_text().replace("figures: recv", "figures: RECV"))
    (tmp_path / "deleted_case.txt").write_text("old\n")
    problems = list(check(tmp_path))
    assert len(problems) == 2
    assert problems[0].startswith("--- tests/golden/plans/") and "+figures: recv" in problems[0]
    assert problems[1] == "stale (no such case): tests/golden/plans/deleted_case.txt"
