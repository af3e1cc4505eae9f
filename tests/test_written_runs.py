"""Pricing what a move writes in short rows (``redist.measure.written``,
``KindCost.strided_s_per_byte`` and ``run_s``): exact counts per step, the fit that separates
them from the per-byte cost, profiles of format 1 still loading, and the plan order it decides.
No timings."""

from __future__ import annotations

import json

import pytest

from benchmarks.cases import NAMED_CASES, select_cases
from redist.calibrate import _exchanges, _typed, log_fit
from redist.cost import NOTHING_WRITTEN, CostModel, KindCost, Written
from redist.measure import profile_kind, runs_in, written
from redist.plan import Plan
from redist.profile import FORMAT, Profile, ProfileError, Sample, fit_kind, load_profile, predict
from redist.steps import AllGather, AllReduceSlice, AllToAll, Exchange, Permute, ReduceScatter
from redist.synth import synthesize
from spmd_types import Mesh, parse


def test_runs_in_counts_rows_of_a_box() -> None:
    assert runs_in([256, 256], [256, 512]) == 256  # half of every row
    assert runs_in([256, 256], [512, 256]) == 1  # whole rows: one run
    assert runs_in([8, 4, 16], [8, 8, 16]) == 8
    assert runs_in([4, 4], [4, 4]) == 1


def test_written_follows_the_lowering() -> None:
    xy = Mesh({"x": 2, "y": 4})
    src, dst = parse("f32[1024@x,1024@y]", xy), parse("f32[1024@y,1024@x]", xy)
    # tp2d_transpose_2x4's exchange: 2 cells [256, 256] of the new [256, 512] block, 256 rows each
    assert written(Exchange(dst.dims, None), src, dst) == Written(512 * 1024, 512)
    a = Mesh({"a": 2, "b": 4})
    whole = parse("f32[16@a,16384]", a)  # pieces join on the leading dimension: whole rows written;
    # they are split off dimension 1: read as 8 rows each
    assert written(AllToAll(0, 1, ("a",)), whole, Plan.build(whole, (AllToAll(0, 1, ("a",)),)).dst) == Written(0.0, 16)
    tall = parse("f32[512,512@a]", a)  # ... or on dimension 1: 256 rows of each of 2 pieces
    assert written(AllToAll(1, 0, ("a",)), tall, Plan.build(tall, (AllToAll(1, 0, ("a",)),)).dst) == Written(512 * 1024, 512)
    swap, swapped = parse("f32[128@(a,b),64]", a), parse("f32[128@(b,a),64]", a)
    assert written(Permute(swapped.dims), swap, swapped) == NOTHING_WRITTEN  # one ppermute of whole blocks
    part, summed = parse("f32[16,64]{U:a}", a), parse("f32[16@a,64]", a)  # moves that add partial sums
    assert written(Exchange(summed.dims, ()), part, summed) == NOTHING_WRITTEN


def test_leading_copies_are_rows_of_the_block() -> None:
    """A gather or reduce-scatter on dimension 2 of ``[4, 256, 512]`` blocks copies its block in
    ``g * 4 * 256`` rows (``dim``'s blocks moved to or from the front); an all-reduce-slice is not
    priced so; on the leading dimension nothing is copied in rows."""
    m = Mesh({"data": 2, "model": 4})
    part = parse("f32[8@data,256,512]{U:model}", m)
    for step, want in ((ReduceScatter(2, ("model",)), Written(512 * 1024 * 4, 4096)),
                       (AllReduceSlice(2, ("model",)), NOTHING_WRITTEN)):
        assert written(step, part, Plan.build(part, (step,)).dst) == want
    shard = parse("f32[8@data,256,512@model]", m)
    assert written(AllGather(2, ("model",)), shard, Plan.build(shard, (AllGather(2, ("model",)),)).dst) == \
        Written(512 * 1024 * 4, 4096)
    lead = parse("f32[8,256]{U:model}", m)
    assert written(ReduceScatter(0, ("model",)), lead, Plan.build(lead, (ReduceScatter(0, ("model",)),)).dst) == \
        NOTHING_WRITTEN


def test_calibration_times_each_kind_with_whole_and_short_rows_of_two_lengths() -> None:
    """Per kind, the all-to-all and exchange samples include pieces landing as whole rows and as
    short rows of two lengths at one size, and pieces read as short rows, so their fits can tell
    the costs apart."""
    plans = [p for p in (*_typed(8, 8, (64,)), *_exchanges(8, 8, (64,))) if p.src.itemsize == 4]
    for kind in ("all_to_all", "exchange"):
        ws = [written(p.steps[0], p.src, p.dst) for p in plans if profile_kind(p.steps[0], p.src) == kind]
        assert any(w.strided_bytes == 0 for w in ws) and any(w.strided_bytes == 0 and w.runs >= 256 for w in ws)
        row_bytes = {w.strided_bytes / w.runs for w in ws if w.strided_bytes}
        assert {256.0, 4096.0} <= row_bytes, (kind, row_bytes)
    for kind in ("all_gather", "reduce_scatter"):  # on dimension 0, and in rows
        ws = [written(p.steps[0], p.src, p.dst) for p in plans if profile_kind(p.steps[0], p.src) == kind]
        assert NOTHING_WRITTEN in ws and len({w.strided_bytes / w.runs for w in ws if w.runs}) >= 2, kind


def test_calibration_moves_no_block_larger_than_its_sizes() -> None:
    """Every sample that moves blocks in place (all-to-alls, exchanges) moves blocks of the sizes
    asked for, short-row ones included: larger blocks run superlinearly and skew the fit."""
    kib = 64
    plans = [p for p in (*_typed(8, 8, (kib,)), *_exchanges(8, 8, (kib,)))
             if profile_kind(p.steps[0], p.src) in ("all_to_all", "exchange")]
    assert len(plans) > 10
    assert {max(p.src.local_bytes, p.dst.local_bytes) for p in plans if p.src.itemsize == 4} == {kib * 1024}


def test_fit_separates_runs_from_bytes() -> None:
    truth = KindCost(20e-6, 40e-6, 1e9, 0.5e-9, 150e-9)
    samples = [Sample("k", t, b, truth.overhead_s + t * truth.latency_s + b / truth.bandwidth_Bps
                      + f * b * truth.strided_s_per_byte + f * b / row * truth.run_s, strided_bytes=f * b, runs=f * b / row)
               for t in (1, 3) for b in (4096.0, 262144.0, 2097152.0) for f, row in ((0, 1), (1, 256), (1, 4096))]
    for got in (fit_kind(samples), log_fit(samples)):
        assert got.run_s == pytest.approx(truth.run_s, rel=1e-3)
        assert got.strided_s_per_byte == pytest.approx(truth.strided_s_per_byte, rel=1e-3)
        assert got.bandwidth_Bps == pytest.approx(truth.bandwidth_Bps, rel=1e-3)
        assert all(predict(got, s) == pytest.approx(s.seconds, rel=1e-3) for s in samples)
    flat = [s._replace(runs=0.0, strided_bytes=0.0) for s in samples if not s.runs]  # not measured: 0
    assert fit_kind(flat)[3:] == (0.0, 0.0) and log_fit(flat)[3:] == (0.0, 0.0)


def test_format_1_profiles_still_load_without_a_runs_term(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prof = Profile("cpu", "cpu", (("exchange", KindCost(1e-5, 2e-5, 1e9, 1e-10, 1e-7)),), 3e9,
                   (Sample("exchange", 1.0, 1024.0, 1e-4, False, 2048.0, 8.0),))
    assert FORMAT == 2 and load_profile_text(tmp_path, prof.to_json()) == prof
    old = json.loads(prof.to_json())
    old["format"] = 1
    for s in old["samples"]:
        del s["runs"], s["strided_bytes"]
    for k in old["kinds"].values():
        del k["run_s"], k["strided_s_per_byte"]
    loaded = load_profile_text(tmp_path, json.dumps(old))
    assert dict(loaded.kinds)["exchange"][3:] == (0.0, 0.0) and loaded.samples[0][5:] == (0.0, 0.0)
    old["format"] = 3
    with pytest.raises(ProfileError, match="redist calibrate"):
        load_profile_text(tmp_path, json.dumps(old))


def load_profile_text(tmp_path, text: str) -> Profile:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.json"
    path.write_text(text)
    return load_profile(path)


def test_a_per_run_cost_picks_the_order_with_long_rows() -> None:
    """``size3_transpose``: all-to-all, permute, all-to-all in either order move the same bytes in
    the same collectives, each with one all-to-all writing short rows: moving ``y`` first writes
    2 x 64 rows of 768 B, the other order 2 x 192 rows of 256 B. With a per-row cost the planner
    takes the first (7-11% faster interleaved on the CPU backend); without one they tie."""
    case = select_cases(NAMED_CASES, ["size3_transpose"])[0]
    costs = (("all_to_all", KindCost(5e-6, 50e-6, 5e8, 0.5e-9, 150e-9)), ("exchange", KindCost(40e-6, 140e-6, 4e8)),
             ("permute", KindCost(80e-6, 80e-6, 2e9)))
    plan = synthesize(case.src_type, case.dst_type, CostModel(objective="measured", kind_costs=costs, copy_Bps=3e9))
    first, _, last = plan.steps
    assert isinstance(first, AllToAll) and isinstance(_, Permute) and isinstance(last, AllToAll)
    assert first.axes == ("y",) and last.axes == ("x",)


def test_calibration_times_moves_with_rows_down_to_the_cells_floor() -> None:
    """All-to-all and exchange samples land cells as rows as short as the floor their runs are
    priced at (``SHORTEST_CELL_ROW_BYTES``): the fit's per-row cost is not extrapolated."""
    from redist.measure import SHORTEST_CELL_ROW_BYTES

    plans = [p for p in (*_typed(8, 8, (64,)), *_exchanges(8, 8, (64,))) if p.src.itemsize == 4]
    for kind in ("all_to_all", "exchange"):
        ws = [written(p.steps[0], p.src, p.dst) for p in plans if profile_kind(p.steps[0], p.src) == kind]
        assert min(w.strided_bytes / w.runs for w in ws if w.strided_bytes) == SHORTEST_CELL_ROW_BYTES


def test_rows_of_32_bytes_price_a_rank_4_exchange_above_the_all_to_all() -> None:
    """A move whose cells land as 65,536 rows of 32 B (bf16, 16 wide): every row counted, and the
    shipped profile prices the exchange (a ``dynamic_update_slice`` per cell, row by row) above
    the all-to-all, as they ran (``benchmarks.pricing_heldout``, seed 23: 54.0 vs 27.5 ms)."""
    from redist.profile import packaged_profile

    m = Mesh({"x": 4, "y": 2})
    src, dst = parse("bf16[32,32,64,64@x]", m), parse("bf16[32@x,32,64,64]", m)
    ex, a2a = Exchange(dst.dims, None), AllToAll(3, 0, ("x",))
    assert written(ex, src, dst) == Written(2 * 1024 * 1024, 65536)
    cm = packaged_profile("cpu").cost_model("measured")
    assert Plan.build(src, (ex,), cm).time_s > Plan.build(src, (a2a,), cm).time_s
    assert [type(s) for s in synthesize(src, dst, cm).steps] != [Exchange]


def test_calibration_times_moves_whose_cells_are_boxes() -> None:
    """An all-to-all and an exchange per group size moving ``a`` from heads to sequence on a
    rank-4 block: cells narrower than the block in two dimensions, read in 16 runs and written
    in 4 per cell on 4 devices (``calibrate._box_cell_moves``)."""
    plans = [p for p in _exchanges(8, 8, (64,)) if p.src.rank == 4]
    assert sorted((p.src.local_shape[1],
                   profile_kind(p.steps[0], p.src)) for p in plans) == \
        [(4, "all_to_all"), (4, "all_to_all"), (4, "all_to_all"), (4, "exchange"), (4, "exchange"), (4, "exchange")]
    g4 = [p for p in plans if p.src.shape[1] == 16]
    assert {written(p.steps[0], p.src, p.dst) for p in g4} == {Written(64 * 1024, 4 * 4 + 4 * 16)}
    assert all(p.src.local_bytes == 64 * 1024 for p in plans)
