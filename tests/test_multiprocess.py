"""A plan runs unchanged across 2 processes (``jax.distributed`` on 127.0.0.1, Gloo collectives):
each process builds the same plan, runs it on its 4 devices, and checks its blocks (issue 11)."""

from __future__ import annotations

from benchmarks.multiprocess import CASE_LINE, launch

CASES = ["tp2d_transpose_2x4", "seq_to_hidden", "fsdp_gather_data"]


def test_plans_run_across_two_processes() -> None:
    results = launch(2, ["--cases", *CASES], timeout_s=240)
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    lines = [m.group(0).split() for m in CASE_LINE.finditer(results[0].stdout)]
    assert sorted(ln[0] for ln in lines) == sorted(CASES)
    assert all(ln[1] == "OK" for ln in lines)
