"""The persistent autotuning cache (``redist.tune_cache``): written once, used untimed by fresh
processes, robust to corrupt, other-format and stale files, safe under concurrent writers, and
one choice for every ``jax.distributed`` process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import redist.tuning
from benchmarks.multiprocess import spawn_local
from redist import autotune, redistribute, use_tune_cache
from redist.profile import default_cost_model
from redist.synth import ranked
from redist.tune_cache import ENV, FORMAT, TuneCacheWarning, fingerprint, forget_loaded, move_key, store
from spmd_types import Mesh, parse

WORKER = str(Path(__file__).with_name("tune_cache_worker.py"))
ROOT = str(Path(__file__).resolve().parents[1])
MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "s32[4,8@y,512,16@x]", "s32[4,8@x,512@y,16]"  # near-tied candidates on the model


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with no cache in force and nothing loaded."""
    monkeypatch.delenv(ENV, raising=False)
    use_tune_cache(None)
    forget_loaded()
    yield
    use_tune_cache(None)
    forget_loaded()


def _move() -> tuple:
    s, d = parse(SRC, MESH), parse(DST, MESH)
    return s, d, default_cost_model(MESH)


def _store_second(path: Path) -> tuple:
    """An entry naming candidate 1 (not the model's choice), stored without timing anything."""
    s, d, cm = _move()
    plans = ranked(s, d, cm, 3)
    store(str(path), s, d, cm, plans, 1, (2e-3, 1e-3), 3, 3, 0.0)
    forget_loaded()
    return s, d, cm, plans


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    return subprocess.run([sys.executable, WORKER, *args], env=env, capture_output=True, text=True, timeout=300)


def test_autotune_records_its_choice(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    tuned = autotune(SRC, DST, MESH, top=3, reps=3, margin=0.0, cache=path)
    (entry,) = json.loads(path.read_text())["entries"].values()
    index = next(i for i, t in enumerate(tuned.trials) if t.plan is tuned.plan)
    assert entry["winner"] == index and entry["fingerprints"] == [fingerprint(t.plan) for t in tuned.trials[:index + 1]]
    assert entry["top"] == 3 and entry["reps"] == 3 and entry["margin"] == 0.0
    assert entry["measured_s"] == [t.measured_s for t in tuned.trials]


def test_a_fresh_process_plans_reshards_and_autotunes_from_the_cache_untimed(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    _, _, _, plans = _store_second(path)  # candidate 1: not what the model would choose
    result = _run("use", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    line = re.search(r"PLANNED (\w+) TUNED (\w+) RESHARD (\w+) CORRECT (\w+) TIMED (\d+)", result.stdout)
    assert line is not None, result.stdout
    want = fingerprint(plans[1])
    assert want != fingerprint(plans[0]) and line.groups() == (want, want, want, "True", "0")


def test_a_cached_entry_changes_the_choice_and_is_a_plan_the_verifier_proves(tmp_path: Path) -> None:
    import proofs  # noqa: F401  (registers plan.verify)

    path = tmp_path / "tune.json"
    s, d, cm, plans = _store_second(path)
    assert redistribute(s, d, cost_model=cm).steps == plans[0].steps
    use_tune_cache(path)
    chosen = redistribute(s, d, cost_model=cm)
    assert chosen.steps == plans[1].steps != plans[0].steps
    assert chosen.verify()
    use_tune_cache(None)
    assert redistribute(s, d, cost_model=cm).steps == plans[0].steps


def test_autotune_with_the_cache_returns_the_entry_without_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tune.json"
    _, _, cm, plans = _store_second(path)
    calls: list[int] = []
    def counting(*args: object, **kwargs: object) -> list[object]:
        calls.append(1)
        return []

    monkeypatch.setattr(redist.tuning, "samples", counting)
    tuned = autotune(SRC, DST, MESH, cost_model=cm, top=3, reps=3, margin=0.0, cache=path)
    assert calls == [] and tuned.plan.steps == plans[1].steps
    assert [t.measured_s for t in tuned.trials[:2]] == [2e-3, 1e-3] and tuned.speedup == 2.0


def test_another_top_times_again_and_replaces_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    _store_second(path)
    autotune(SRC, DST, MESH, top=2, reps=2, margin=0.0, cache=path)
    (entry,) = json.loads(path.read_text())["entries"].values()
    assert entry["top"] == 2 and entry["reps"] == 2


@pytest.mark.parametrize("text, said", [
    ("{not json", "not valid JSON of a cache"),
    (json.dumps({"format": FORMAT + 1, "entries": {}}), f"has format {FORMAT + 1}"),
    (json.dumps([1, 2]), "not valid JSON of a cache"),
])
def test_a_corrupt_or_other_format_file_falls_back_once_with_a_warning(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "tune.json"
    path.write_text(text)
    s, d, cm = _move()
    use_tune_cache(path)
    with pytest.warns(TuneCacheWarning, match=said):
        assert redistribute(s, d, cost_model=cm).steps == ranked(s, d, cm, 1)[0].steps
    forget_loaded()  # a new read of the file, but the same process: said again only after forgetting
    with pytest.warns(TuneCacheWarning, match=said):
        redistribute(s, d, cost_model=cm)


def test_a_stale_entry_falls_back_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    s, d, cm, plans = _store_second(path)
    doc = json.loads(path.read_text())
    (entry,) = doc["entries"].values()
    entry["fingerprints"][1] = "0" * 16  # the planner's candidate 1 is no longer this plan
    path.write_text(json.dumps(doc))
    use_tune_cache(path)
    with pytest.warns(TuneCacheWarning, match="is stale"):
        assert redistribute(s, d, cost_model=cm).steps == plans[0].steps


def test_a_malformed_entry_falls_back_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    s, d, cm, plans = _store_second(path)
    doc = json.loads(path.read_text())
    (entry,) = doc["entries"].values()
    entry["winner"] = 5  # beyond top
    path.write_text(json.dumps(doc))
    use_tune_cache(path)
    with pytest.warns(TuneCacheWarning, match="is malformed"):
        assert redistribute(s, d, cost_model=cm).steps == plans[0].steps


def test_tuning_into_an_other_format_file_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"format": 0, "entries": {"old": {}}}))
    with pytest.warns(TuneCacheWarning, match="has format 0"):
        _store_second(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and len(doc["entries"]) == 1 and "old" not in doc["entries"]


def test_the_key_names_backend_device_kind_process_layout_mesh_move_and_cost_model() -> None:
    s, d, cm = _move()
    key = json.loads(move_key(s, d, cm))
    assert key == {"backend": "cpu", "device_kind": "cpu", "processes": 1, "devices_per_process": 8,
                   "mesh": "{x=2,y=4}", "src": SRC, "dst": DST, "objective": cm.objective,
                   "cost_model": key["cost_model"]}
    from redist import CostModel

    assert json.loads(move_key(s, d, CostModel(objective="bytes")))["cost_model"] != key["cost_model"]


def test_a_miss_uses_the_models_choice_silently(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = tmp_path / "tune.json"
    _store_second(path)
    use_tune_cache(path)
    s, d = parse("f32[64@x,8]", MESH), parse("f32[64,8@x]", MESH)
    cm = default_cost_model(MESH)
    assert redistribute(s, d, cost_model=cm).steps == ranked(s, d, cm, 1)[0].steps
    assert not [w for w in recwarn if issubclass(w.category, TuneCacheWarning)]


def test_two_processes_writing_at_once_leave_a_valid_file_with_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    procs = [subprocess.Popen([sys.executable, WORKER, "write", str(path), str(first), "60"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for first in (1, 61)]
    import time

    time.sleep(0.5)
    Path(str(path) + ".go").touch()  # both start writing together (each waits for this file)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT
    srcs = sorted(json.loads(k)["src"] for k in doc["entries"])
    assert srcs == sorted(f"f32[{8 * n}@x,8]" for n in range(1, 121))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_every_distributed_process_takes_process_0s_entry(tmp_path: Path) -> None:
    paths = [tmp_path / "p0.json", tmp_path / "p1.json"]  # process 1's file does not exist
    results = spawn_local(2, 4, lambda i, port: [WORKER, "distributed", str(i), str(port), str(paths[i])],
                          timeout_s=240)
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    chose = [re.search(r"CHOSE (\d+) LAYOUT (\w+)", r.stdout) for r in results]
    assert all(c is not None for c in chose), [r.stdout for r in results]
    assert [c.groups() for c in chose if c] == [("1", "True"), ("1", "True")]
    assert not paths[1].exists()  # reading writes nothing


def test_redist_tune_times_a_list_once_and_then_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from redist_cli.main import main

    moves, cache = tmp_path / "moves.txt", tmp_path / "tune.json"
    moves.write_text(f"# near-tied plans\n{SRC} -> {DST}\n\nf32[64@x,8] f32[64,8@x]  # one all-to-all\n")
    argv = ["tune", str(moves), "--mesh", "x=2,y=4", "--cache", str(cache), "--top", "2", "--reps", "2"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert first.count("(timed ") == 2 and f"2 moves in {cache}" in first
    assert len(json.loads(cache.read_text())["entries"]) == 2
    forget_loaded()
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> list[object]:
        calls.append(1)
        return []

    monkeypatch.setattr(redist.tuning, "samples", counting)
    assert main(argv) == 0
    assert capsys.readouterr().out.count("(from the cache, not timed)") == 2 and calls == []


@pytest.mark.parametrize("text, said", [("f32[8@x]\n", "moves.txt:1: a move is two types"),
                                        ("# nothing\n", "no moves in the file"),
                                        ("f32[8@x] f32[8@q]\n", "moves.txt:1: UnknownAxisError")])
def test_redist_tune_names_the_bad_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str) -> None:
    from redist_cli.main import main

    moves = tmp_path / "moves.txt"
    moves.write_text(text)
    assert main(["tune", str(moves), "--mesh", "x=2,y=4", "--cache", str(tmp_path / "c.json")]) == 2
    assert said in capsys.readouterr().err


def test_the_benchmark_runs_a_case_and_prints_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.tune_cache import main

    assert main(["--cases", "fsdp_gather_2d", "--seconds", "0", "--top", "2", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "Command: `python -m benchmarks.tune_cache --cases fsdp_gather_2d --seconds 0.0 --top 2 --reps 1" in out
    assert re.search(r"\| fsdp_gather_2d \| [\d.]+ s \| all_gather", out)
