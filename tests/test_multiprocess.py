"""A plan runs unchanged across 2 processes (``jax.distributed`` on 127.0.0.1, Gloo collectives):
each process builds the same plan, runs it on its 4 devices, and checks its blocks (issue 11)."""

from __future__ import annotations

from benchmarks.multiprocess import launch

CASES = ["tp2d_transpose_2x4", "seq_to_hidden", "fsdp_gather_data"]


def test_plans_run_across_two_processes() -> None:
    results = launch(2, ["--cases", *CASES], timeout_s=240)
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    lines = [ln for ln in results[0].stdout.splitlines() if not ln.startswith("[Gloo]")]
    assert sorted(ln.split()[0] for ln in lines) == sorted(CASES)
    assert all(ln.split()[1] == "OK" for ln in lines)
