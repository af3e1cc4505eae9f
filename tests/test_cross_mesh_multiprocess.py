"""Moves between meshes across 2 processes (``jax.distributed`` on 127.0.0.1, 4 CPU devices each,
Gloo): the pipeline hand-off from process 0's devices to process 1's, trainer-to-sampler onto
process 1, and the resizes 8 -> 4 and 4 -> 8, each checked on both processes' devices, where
``jax.device_put`` and ``jax.sharding.reshard`` refuse them."""

from __future__ import annotations

from benchmarks.cross_mesh import CASES, LINE, across_processes


def test_every_move_runs_across_two_processes_with_values_checked_on_both() -> None:
    outs = across_processes(0.0625, 2, timeout_s=400)
    for out in outs:
        verdicts = {m["case"]: m["verdict"] for m in LINE.finditer(out)}
        assert verdicts == {c.name: "OK" for c in CASES}, out
    held = [{m["case"]: int(m.group(0).rsplit("devices=", 1)[1]) for m in LINE.finditer(o)} for o in outs]
    assert [h["pipeline"] for h in held] == [0, 4]  # the destination lives on process 1's devices
    assert [h["resize_8_to_4"] for h in held] == [4, 0]
    assert [h["resize_4_to_8"] for h in held] == [4, 4]
