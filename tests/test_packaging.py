"""What the wheel ships: the project's packages and the CLI, not ``benchmarks`` (a source-checkout suite)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_finds_every_package_but_benchmarks() -> None:
    setuptools = pytest.importorskip("setuptools")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(setuptools.find_packages(str(ROOT), include=include))
    tops = {name.split(".")[0] for name in found}
    assert tops == {"spmd_types", "redist", "proofs", "partir_core", "redist_cli"}
    assert not any(name.startswith("benchmarks") for name in found)
    assert config["project"]["scripts"] == {"redist": "redist_cli:main"}


def test_bench_plan_without_a_checkout_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from redist_cli import checkout
    from redist_cli.main import main

    monkeypatch.setattr(checkout, "benchmarks_root", lambda: None)
    assert main(["bench-plan", "--pairs", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the benchmark suites ship with the source checkout")
    assert err.rstrip().endswith("run redist bench-plan again")


def test_bench_plan_runs_the_checkout_suite(capfd: pytest.CaptureFixture[str]) -> None:
    from redist_cli.main import main

    assert main(["bench-plan", "--pairs", "5", "--gap-pairs", "1"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("Command: redist bench-plan --pairs 5 --seed 0")
    assert "| small mesh | pairs | differ in bytes |" in out
