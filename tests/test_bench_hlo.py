"""The HLO collective parser and the bytes formulas, on hand-written HLO with known answers."""

from __future__ import annotations

import pytest

from redist.hlo import (
    iota_device_list,
    parse_collectives,
    parse_instruction,
    parse_replica_groups,
    permute_recv_bytes,
    ring_recv_bytes,
    shape_bytes,
    shape_elements,
)


def module(body: str, n: int = 8) -> str:
    return (
        f"HloModule m, is_scheduled=true, num_partitions={n}\n\n"
        f"ENTRY %main (param: f32[8,64]) -> f32[8,64] {{\n{body}\n}}\n"
    )


# -- shapes -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, nbytes, elements",
    [
        ("f32[8,64]{1,0}", 2048, 512),
        ("bf16[4,128,512]{2,1,0}", 4 * 128 * 512 * 2, 4 * 128 * 512),
        ("pred[16]", 16, 16),
        ("s32[]", 4, 1),
        ("(f32[1,512,512]{2,1,0}, f32[1,512,512]{2,1,0})", 2 * 512 * 512 * 4, 2 * 512 * 512),
        ("(f32[2]{0}, /*index=1*/f32[2]{0}, token[])", 16, 4),
        ("s4[8]", 4, 8),
    ],
)
def test_shape_sizes(text: str, nbytes: int, elements: int) -> None:
    assert shape_bytes(text) == nbytes
    assert shape_elements(text) == elements


def test_parse_instruction_tuple_shape_and_attrs() -> None:
    ins = parse_instruction(
        "  %all-to-all.1 = (f32[1,2]{1,0}, /*index=1*/f32[1,2]{1,0}) all-to-all(%a, %b), channel_id=1, "
        "replica_groups={{0,1}}"
    )
    assert ins is not None
    assert ins.name == "all-to-all.1" and ins.opcode == "all-to-all"
    assert ins.operands == ("%a", "%b")
    assert "replica_groups={{0,1}}" in ins.attrs
    assert parse_instruction("ENTRY %main (p: f32[2]) -> f32[2] {") is None
    assert parse_instruction("}") is None


# -- replica groups -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, groups",
    [
        ("{{0,1},{2,3}}", ((0, 1), (2, 3))),
        ("{{0,2,4,6},{1,3,5,7}}", ((0, 2, 4, 6), (1, 3, 5, 7))),
        ("{}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        ("[2,4]<=[8]", ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("[4,2]<=[2,4]T(1,0)", ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("[1,8]<=[8]", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}", ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}", ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_0','axis_1'}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        # the major half of axis_1: digits (c // 2) % 2
        ("mesh['axis_0'=2,'axis_1'=4] {'axis_1':(1)2}", ((0, 2), (1, 3), (4, 6), (5, 7))),
        # XLA's output for f32[2048@x,2048@y] -> f32[2048@y,2048@x] on {x=2,y=4}
        ("mesh['axis_0'=4,'axis_1'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_0':(2)2}",
         ((0, 1), (2, 3), (4, 5), (6, 7))),
        # listed order decides the order inside a group (first listed = most significant)
        ("mesh['a'=2,'b'=2] {'b','a'}", ((0, 2, 1, 3),)),
    ],
)
def test_replica_groups(text: str, groups: tuple[tuple[int, ...], ...]) -> None:
    got = parse_replica_groups(text, 8)
    assert sorted(got) == sorted(groups)
    assert sorted(d for g in got for d in g) == sorted(d for g in groups for d in g)


def test_iota_device_list_without_prefix() -> None:
    assert iota_device_list("[2,2,2]T(0,2,1)").tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


# -- bytes formulas (docs/design.md section 4) ---------------------------------------------------------------
def test_ring_formulas() -> None:
    # all-gather: (p-1)/p of the gathered output = (p-1) x operand
    assert ring_recv_bytes("all-gather", [4, 4], 100, 8) == 300
    # reduce-scatter: (p-1)/p of the input
    assert ring_recv_bytes("reduce-scatter", [4, 4], 400, 8) == 300
    # all-reduce: 2 (p-1)/p of the input
    assert ring_recv_bytes("all-reduce", [2] * 4, 1000, 8) == 1000
    # all-to-all: (p-1)/p of the input
    assert ring_recv_bytes("all-to-all", [8], 800, 8) == 700
    # devices in no group receive nothing: 6 of 8 devices in groups of 2 gathering 100 B
    assert ring_recv_bytes("all-gather", [2, 2, 2], 100, 8) == pytest.approx(600 / 8)


def test_permute_counts_only_real_pairs() -> None:
    pairs = ((0, 0), (1, 2), (2, 1), (3, 3))
    assert permute_recv_bytes(pairs, 100, 4) == 50


# -- whole modules ------------------------------------------------------------------------------------------
def test_all_gather_explicit_groups() -> None:
    hlo = module(
        "  %param = f32[8,64]{1,0} parameter(0)\n"
        "  %wrapped_copy = f32[8,64]{0,1} fusion(%param), kind=kLoop, calls=%c\n"
        "  %all-gather = f32[32,64]{1,0} all-gather(%wrapped_copy), channel_id=1, "
        "replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true\n"
        "  ROOT %f = f32[32,64]{1,0} fusion(%all-gather), kind=kLoop, calls=%d"
    )
    r = parse_collectives(hlo)
    assert r.kinds() == ("all-gather",)  # the fusion consuming %all-gather is not a collective
    c = r.collectives[0]
    assert c.group_size == 4 and c.operand_bytes == 2048 and c.result_bytes == 8192
    assert r.recv_bytes == 3 * 2048  # = (p-1)/p of the 8192-byte result
    assert r.recv_bytes_as(2) == 3 * 1024


def test_xla_transpose_module() -> None:
    """The module XLA compiles for f32[2048@x,2048@y] -> f32[2048@y,2048@x] on {x=2,y=4}."""
    hlo = module(
        "  %param = f32[1024,512]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}\n"
        "  %s0 = f32[1,512,512]{2,1,0} fusion(%param), kind=kLoop, calls=%x\n"
        "  %s1 = f32[1,512,512]{2,1,0} fusion(%param), kind=kLoop, calls=%y\n"
        "  %all-to-all.1 = (f32[1,512,512]{2,1,0}, f32[1,512,512]{2,1,0}) all-to-all(%s0, %s1), "
        "channel_id=1, replica_groups=mesh['axis_0'=4,'axis_1'=2], device_ids=([2,2,2]T(0,2,1)) "
        "{'axis_0':(2)2}\n"
        "  %c = f32[512,1024]{1,0} fusion(%all-to-all.1), kind=kLoop, calls=%z\n"
        "  ROOT %collective-permute = f32[512,1024]{1,0} collective-permute(%c), channel_id=2, "
        "source_target_pairs={{0,0},{2,4},{1,1},{3,5},{4,2},{6,6},{5,3},{7,7}}"
    )
    r = parse_collectives(hlo)
    assert r.kinds() == ("all-to-all", "collective-permute")
    a2a, perm = r.collectives
    assert a2a.groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert a2a.recv_bytes == 2 * 512 * 512 * 4 / 2  # half of the 2 MiB input
    assert perm.recv_bytes == 4 * 2 * 1024 * 1024 / 8  # 4 real pairs of 2 MiB over 8 devices
    # 2 MiB in all; docs/design.md section 3: 4/3 of this case's lower bound (1.5 MiB)
    assert r.recv_bytes == 2 * 1024 * 1024


def test_reduce_scatter_all_reduce_iota_groups() -> None:
    hlo = module(
        "  %p = f32[64]{0} parameter(0)\n"
        "  %rs = f32[16]{0} reduce-scatter(%p), channel_id=1, replica_groups=[2,4]<=[8], "
        "dimensions={0}, to_apply=%add\n"
        "  ROOT %ar = f32[16]{0} all-reduce(%rs), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), "
        "to_apply=%add"
    )
    rs, ar = parse_collectives(hlo).collectives
    assert rs.group_size == 4 and rs.recv_bytes == 256 * 3 / 4
    assert ar.groups == ((0, 4), (1, 5), (2, 6), (3, 7)) and ar.recv_bytes == 64


def test_async_forms_counted_once() -> None:
    hlo = module(
        "  %p = f32[8]{0} parameter(0)\n"
        "  %ags = (f32[8]{0}, f32[16]{0}) all-gather-start(%p), channel_id=1, replica_groups={{0,1},{2,3}}, "
        "dimensions={0}\n"
        "  %agd = f32[16]{0} all-gather-done(%ags)\n"
        "  %cps = (f32[16]{0}, f32[16]{0}, u32[], u32[]) collective-permute-start(%agd), channel_id=2, "
        "source_target_pairs={{0,1},{1,0}}\n"
        "  ROOT %cpd = f32[16]{0} collective-permute-done(%cps)",
        n=4,
    )
    r = parse_collectives(hlo)
    assert r.kinds() == ("all-gather", "collective-permute")
    ag, cp = r.collectives
    assert ag.result_bytes == 64 and ag.recv_bytes == 32
    assert cp.recv_bytes == 2 * 64 / 4
    assert r.recv_bytes == 32 + 32


def test_inline_operand_shapes_and_empty_groups() -> None:
    """Older HLO printing puts the operand's shape inline; ``{}`` groups mean all devices."""
    hlo = module(
        "  ROOT %ar = f32[10]{0} all-reduce(f32[10]{0} %p), replica_groups={}, to_apply=%add", n=4
    )
    (ar,) = parse_collectives(hlo).collectives
    assert ar.group_size == 4 and ar.recv_bytes == 2 * 3 / 4 * 40


def test_ragged_all_to_all_is_data_dependent() -> None:
    hlo = module(
        "  %in = f32[32]{0} parameter(0)\n  %out = f32[32]{0} parameter(1)\n"
        "  %o = s64[2]{0} parameter(2)\n"
        "  ROOT %r = f32[32]{0} ragged-all-to-all(%in, %out, %o, %o, %o, %o), replica_groups={{0,1}}",
        n=2,
    )
    r = parse_collectives(hlo)
    assert r.collectives[0].operand_bytes == 128
    assert r.recv_bytes is None and r.recv_elements is None


def test_no_collectives() -> None:
    r = parse_collectives(module("  ROOT %param = f32[8,64]{1,0} parameter(0)"))
    assert r.collectives == () and r.recv_bytes == 0 and r.summary() == "(none)"


def test_collective_sequence_keeps_program_order_where_the_signature_does_not() -> None:
    from redist.hlo import Collective, HloCollectives, collective_sequence, collective_signature
    a2a = Collective("a", "all-to-all", ((0, 1), (2, 3)), 8, 8, 4.0, 2, 1.0)
    perm = Collective("p", "collective-permute", ((0, 2), (2, 0), (1, 1)), 8, 8, 4.0, 2, 1.0)
    first, second = HloCollectives(4, (a2a, perm)), HloCollectives(4, (perm, a2a))
    assert collective_signature(first) == collective_signature(second)
    assert collective_sequence(first) != collective_sequence(second)
    assert collective_sequence(first)[1] == ("collective-permute", ((0, 2), (2, 0)), 1.0)  # self-pair left out


def test_per_device_receipts_average_to_the_mean_and_name_the_busiest() -> None:
    """A permute that reaches two of four devices: the mean hides that they receive twice as much."""
    from redist.hlo import Collective, HloCollectives, device_recv_elements

    gather = Collective("ag", "all-gather", ((0, 1), (2, 3)), 64, 128, 64.0, 16, 16.0)
    permute = Collective("cp", "collective-permute", ((0, 2), (1, 3), (2, 2)), 64, 64, 32.0, 16, 8.0)
    ragged = Collective("r", "ragged-all-to-all", ((0, 1, 2, 3),), 64, 64, None, 16, None)
    assert list(device_recv_elements(gather, 4)) == [16, 16, 16, 16]
    assert list(device_recv_elements(permute, 4)) == [0, 0, 16, 16]  # 2 -> 2 moves nothing
    assert device_recv_elements(ragged, 4) is None
    h = HloCollectives(4, (gather, permute))
    per = h.device_recv_bytes_as(4)
    assert list(per) == [64, 64, 128, 128] and per.mean() == h.recv_bytes_as(4)
    assert HloCollectives(4, (gather, ragged)).device_recv_bytes_as(4) is None
