"""The suites' shared harness (benchmarks.harness): command lines, results files and the interleaved
round robin with its A/A control, checked on counts and text, never on the clock."""

from __future__ import annotations

import argparse
import datetime
import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.harness import (
    at_least,
    command_line,
    geomean,
    header,
    round_robin_times,
    suite_parser,
    with_control,
    write_results,
)
from benchmarks.paired import period


class _Done:
    def block_until_ready(self) -> _Done:
        return self


def _counting(calls: Counter[str], name: str) -> Callable[[], _Done]:
    def call() -> _Done:
        calls[name] += 1
        return _Done()

    return call


def test_at_least_refuses_a_value_below_its_bound_naming_it() -> None:
    parse = at_least(1, int)
    assert parse("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match="0 is below 1"):
        parse("0")


def test_suite_parser_names_the_module_and_adds_the_shared_options() -> None:
    ap = suite_parser("speed", "First line.\n\nMore.", out="where", seed="which", reps=(7, "how many"))
    assert ap.prog == "python -m benchmarks.speed"
    assert ap.description == "First line."
    args = ap.parse_args([])
    assert (args.out, args.seed, args.reps) == (None, 0, 7)
    assert ap.parse_args(["--out", "d", "--seed", "3", "--reps", "2"]).reps == 2
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--reps", "0"])
    assert e.value.code == 2


def test_suite_parser_leaves_out_the_options_not_asked_for() -> None:
    args = suite_parser("golden", None).parse_args([])
    assert not hasattr(args, "out") and not hasattr(args, "seed") and not hasattr(args, "reps")


def test_command_line_reproduces_the_arguments() -> None:
    assert command_line("studies.families", ["--pairs", "2"]) == "python -m benchmarks.studies.families --pairs 2"
    assert command_line("per_call", []) == "python -m benchmarks.per_call"


def test_header_quotes_the_command_and_the_detail() -> None:
    lines = header("A title", "python -m benchmarks.x --reps 2", (1.0, 2.0), 3.0, "2 rounds a case")
    assert lines[0] == f"# A title ({datetime.date.today()})"
    assert lines[2] == "Command: `python -m benchmarks.x --reps 2`  "
    assert "; 2 rounds a case; load average 1.0 before, 2.0 after; 3 s." in lines[3]


def test_write_results_writes_the_dated_markdown_and_json(tmp_path: Path) -> None:
    path = write_results(tmp_path / "new", "speed", "# text\n", {"rows": [1, 2]})
    stem = f"{datetime.date.today()}-speed"
    assert path == tmp_path / "new" / f"{stem}.md"
    assert path.read_text() == "# text\n"
    assert json.loads((tmp_path / "new" / f"{stem}.json").read_text()) == {"rows": [1, 2]}
    write_results(tmp_path, "per-call", "t")
    assert not (tmp_path / f"{datetime.date.today()}-per-call.json").exists()


def test_round_robin_runs_whole_balanced_periods() -> None:
    calls: Counter[str] = Counter()
    times = round_robin_times({n: _counting(calls, n) for n in "abc"}, 0.0, min_reps=4)
    rounds = period(3)  # 4 rounds asked, whole periods of the 3-side Williams design: 6
    assert {n: len(v) for n, v in times.items()} == {"a": rounds, "b": rounds, "c": rounds}
    assert calls == Counter({"a": rounds + 1, "b": rounds + 1, "c": rounds + 1})  # one warm-up call each


def test_with_control_times_the_copy_in_the_same_rounds_and_drops_it() -> None:
    calls: Counter[str] = Counter()
    med, control = with_control({"xla": _counting(calls, "xla"), "ours": _counting(calls, "ours")}, "xla", 0.0,
                                min_reps=2)
    assert set(med) == {"xla", "ours"}
    assert control > 0 and math.isfinite(control)
    rounds = period(3)
    assert calls == Counter({"xla": 2 * (rounds + 1), "ours": rounds + 1})  # the copy is the same callable


def test_geomean() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(geomean([]))
