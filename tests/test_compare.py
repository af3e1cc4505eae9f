"""``redist.compare`` and ``redist compare``: ours and XLA's compiled programs for one move.

Exact figures, machine-independent: the collectives read from each compiled program (kinds,
replica groups, operand and received bytes), memory, values. Times are only checked to exist.
"""

from __future__ import annotations

import pytest

from redist import RedistError
from redist.compare import SIDES, compare
from redist_cli.main import main
from spmd_types import Mesh

pytestmark = pytest.mark.jax

MESH = Mesh({"x": 2, "y": 4})
SRC, DST = "f32[256@x,256@y]", "f32[256@y,256@x]"  # blocks of 128x64 f32 = 32 KiB


def test_ours_and_xla_side_by_side_with_exact_collectives() -> None:
    result = compare(SRC, DST, MESH, reps=2)
    assert result.reps == 2 and tuple(s.name for s in result.sides) == SIDES
    ours, out_shardings, reshard = (result.side(n) for n in SIDES)
    for side in result.sides:
        assert side.values is None and side.median_s > 0
        assert side.memory.argument_bytes == side.memory.output_bytes == 32768
    # what ours compiles to moves exactly what the plan says it moves
    assert ours.recv_bytes == result.plan.recv_bytes
    # devices 2-5 receive a whole block from the permute and half a block from the all-to-all
    assert ours.busiest_recv_bytes == out_shardings.busiest_recv_bytes == reshard.busiest_recv_bytes == 49152
    assert len(ours.collectives.collectives) == result.plan.n_collectives
    # XLA (jax 0.10): an all-to-all over x's pairs, then a permute between the y groups
    for xla in (out_shardings, reshard):
        kinds = [(c.kind, tuple(g for g in c.groups if len(set(g)) > 1), c.operand_bytes, c.recv_bytes)
                 for c in xla.collectives.collectives]  # a permute's pairs s -> s move nothing
        assert kinds == [
            ("all-to-all", ((0, 1), (2, 3), (4, 5), (6, 7)), 32768, 16384.0),
            ("collective-permute", ((2, 4), (3, 5), (4, 2), (5, 3)), 32768, 16384.0),
        ]
        assert xla.recv_bytes == 32768.0 and not xla.remat
    assert result.plan.lower_bound_bytes == 24576


def test_compare_refuses_bad_reps_and_too_many_devices() -> None:
    with pytest.raises(RedistError, match="reps=0"):
        compare(SRC, DST, MESH, reps=0)
    with pytest.raises(RedistError, match="needs 16 devices and JAX has 8"):
        compare("f32[64@x]", "f32[64@y]", Mesh({"x": 4, "y": 4}), reps=1)


def test_cli_compare_prints_every_side_and_the_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", SRC, DST, "--mesh", "x=2,y=4", "--reps", "3"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{SRC} -> {DST} on mesh {{x=2,y=4}}, 8 CPU devices"
    header = next(line for line in out.splitlines() if "redist" in line and "XLA reshard" in line)
    assert header.index("redist") < header.index("XLA out_shardings") < header.index("XLA reshard")
    assert out.count("all-to-all         │ {0,1} {2,3} {4,5} {6,7} │  32,768 B (32 KiB)") == 3
    assert "2->4 3->5 4->2 5->3" in out and "median of 3 interleaved rounds" in out
    assert "32,768 B (32 KiB)" in out and "lower bound 24,576 B (24 KiB)" in out
    busiest = next(line for line in out.splitlines() if line.startswith("received (busiest device)"))
    assert busiest.count("49,152 B (48 KiB)") == 3
    assert main(["compare", SRC, DST, "--mesh", "x=2,y=4", "--reps", "0"]) == 2
    assert capsys.readouterr().err == "error: --reps 0: give at least 1 timed round\n"


def test_a_pending_sum_destination_is_compared_and_its_sums_checked() -> None:
    """XLA's programs get an Explicit mesh (JAX takes ``unreduced`` only there), and the values
    check sums each block's partials: JAX gives no block index for an unreduced array."""
    result = compare("f32[64@z,256,16]", "f32[64@z,256,16]{U:x}", Mesh({"x": 2, "y": 2, "z": 2}), reps=1)
    assert all(side.values is None for side in result.sides)
    assert [len(side.collectives.collectives) for side in result.sides] == [0, 0, 0]


def test_the_pending_sum_check_sees_a_wrong_partial() -> None:
    import jax

    from redist.arrays import check_output, make_input
    from spmd_types import parse

    dst = parse("f32[8@z,4]{U:x}", Mesh({"x": 2, "z": 4}))
    x, total = make_input(dst, dst.mesh.to_jax())
    assert check_output(x, total, dst) is None
    shards = [s.data + (1 if i == 0 else 0) for i, s in enumerate(x.addressable_shards)]
    wrong = jax.make_array_from_single_device_arrays(x.shape, x.sharding, shards)
    assert check_output(wrong, total, dst) is not None


def test_xla_reshard_is_left_out_where_jax_would_abort(capsys: pytest.CaptureFixture[str]) -> None:
    """Pending sums over x on one side and over y on the other: jax 0.10.2's reshard fails a
    Shardy CHECK (the process aborts), so that program is not built and the CLI says so."""
    rc = main(["compare", "f32[64@x,16]{U:y}", "f32[64,16@y]{U:x}", "--mesh", "x=4,y=2", "--reps", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "XLA reshard: not run" in out and "the two programs" in out
