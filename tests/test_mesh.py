"""Mesh: construction, row-major device numbering, sub-axis coordinates, text form, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import factor_chains, meshes

from spmd_types import Mesh, MeshError, ShardingTypeError, SubAxis, UnknownAxisError, axis_name
from spmd_types.mesh import format_axis


# -- construction and queries ---------------------------------------------------------------------
def test_basic_queries():
    m = Mesh({"x": 2, "y": 3, "z": 1})
    assert m.names == ("x", "y", "z")
    assert m.shape == {"x": 2, "y": 3, "z": 1}
    assert m.size == 6
    assert m.axes == (("x", 2), ("y", 3), ("z", 1))
    assert "y" in m and "q" not in m and 3 not in m and ["x"] not in m
    assert [m.position(n) for n in m.names] == [0, 1, 2]
    assert str(m) == "{x=2,y=3,z=1}"


def test_mapping_and_pairs_are_equal_and_hash_alike():
    a = Mesh({"x": 2, "y": 4})
    b = Mesh([("x", 2), ("y", 4)])
    assert a == b and hash(a) == hash(b)
    assert a != Mesh({"y": 4, "x": 2})  # axis order matters
    assert a != Mesh({"x": 2, "y": 2})


def test_numpy_integer_sizes_are_accepted_as_ints():
    m = Mesh({"x": np.int64(2), "y": np.int32(3)})
    assert m == Mesh({"x": 2, "y": 3})
    assert all(type(s) is int for _, s in m.axes)


@given(meshes())
def test_str_parse_round_trip(m):
    assert Mesh.parse(str(m)) == m
    assert Mesh.parse(str(m)[1:-1]) == m  # braces optional
    assert Mesh.parse(" , ".join(f"{n} = {s}" for n, s in m.axes)) == m  # spaces tolerated


# -- device ids <-> coordinates -------------------------------------------------------------------
@given(meshes())
def test_device_id_coords_round_trip_row_major(m):
    sizes = [s for _, s in m.axes]
    for dev, idx in enumerate(np.ndindex(*sizes)):  # NumPy's C order is row-major
        c = m.coords(dev)
        assert list(c) == list(m.names)
        assert tuple(c.values()) == idx
        assert m.device_id(c) == dev
    np.testing.assert_array_equal(m.coord_table(), np.array(list(np.ndindex(*sizes))).reshape(m.size, -1))


@pytest.mark.parametrize(
    "axes",
    [{"x": 3}, {"x": 5, "y": 3}, {"a": 6, "b": 1, "c": 5}, {"x": 1}, {"x": 1, "y": 1}, {"p": 7, "q": 2}],
)
def test_non_power_of_two_and_size_one_axes(axes):
    m = Mesh(axes)
    assert m.size == math.prod(axes.values())
    seen = set()
    for dev in range(m.size):
        c = m.coords(dev)
        # explicit row-major formula: first axis most significant
        expect = 0
        for n, s in m.axes:
            expect = expect * s + c[n]
        assert expect == dev
        seen.add(tuple(c.values()))
    assert len(seen) == m.size
    for n, s in m.axes:
        assert m.axis_size(n) == s
        if s == 1:
            assert all(m.coords(d)[n] == 0 for d in range(m.size))


def test_row_major_example():
    m = Mesh({"x": 2, "y": 3})
    assert [tuple(m.coords(d).values()) for d in range(6)] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)
    ]
    assert m.device_id({"y": 2, "x": 1}) == 5  # mapping order is irrelevant


@pytest.mark.parametrize("dev", [-1, 6, 100, 1.5, "a", None, True])
def test_coords_out_of_range(dev):
    m = Mesh({"x": 2, "y": 3})
    with pytest.raises(MeshError, match="device id"):
        m.coords(dev)


def test_coords_accepts_numpy_ints():
    m = Mesh({"x": 2, "y": 3})
    assert m.coords(np.int64(4)) == {"x": 1, "y": 1}
    assert m.device_id({"x": np.int32(1), "y": np.int64(1)}) == 4


@pytest.mark.parametrize(
    "coords, err, needle",
    [
        ({"x": 0}, MeshError, "'y'"),
        ({"x": 2, "y": 0}, MeshError, "x=2"),
        ({"x": -1, "y": 0}, MeshError, "x=-1"),
        ({"x": 0, "y": 3}, MeshError, "y=3"),
        ({"x": 0, "y": 1.0}, MeshError, "y=1.0"),
        ({"x": 0, "y": 0, "q": 0}, UnknownAxisError, "q"),
        (None, MeshError, "mapping"),
        ([0, 0], MeshError, "mapping"),
    ],
)
def test_device_id_bad_coords(coords, err, needle):
    with pytest.raises(err) as e:
        Mesh({"x": 2, "y": 3}).device_id(coords)
    assert needle in str(e.value)


# -- sub-axes -------------------------------------------------------------------------------------
def test_subaxis_str_and_helpers():
    s = SubAxis("y", 2, 3)
    assert str(s) == "y:(2)3" == format_axis(s)
    assert format_axis("y") == "y"
    assert axis_name(s) == "y" and axis_name("x") == "x"


@pytest.mark.parametrize(
    "n, sub, formula",
    [
        (4, (1, 2), lambda c: c // 2),
        (4, (2, 2), lambda c: c % 2),
        (4, (1, 4), lambda c: c),
        (6, (1, 2), lambda c: c // 3),
        (6, (2, 3), lambda c: c % 3),
        (6, (1, 3), lambda c: c // 2),
        (6, (3, 2), lambda c: c % 2),
        (8, (2, 2), lambda c: (c // 2) % 2),
        (12, (2, 3), lambda c: (c // 2) % 3),
    ],
)
def test_axis_coord_of_subaxes(n, sub, formula):
    m = Mesh({"x": 2, "y": n})
    a = SubAxis("y", *sub)
    assert m.axis_size(a) == sub[1]
    assert m.span(a) == ("y", *sub)
    for dev in range(m.size):
        c = m.coords(dev)
        assert m.axis_coord(a, c) == formula(c["y"])
        assert m.axis_coord("x", c) == c["x"]
        assert m.axis_coord("y", c) == c["y"]


@given(st.integers(1, 36).flatmap(lambda n: st.tuples(st.just(n), factor_chains(n))))
def test_factor_chain_coords_are_mixed_radix_digits(nc):
    """The pieces of a factorisation, major first, are the mixed-radix digits of the coordinate."""
    n, chain = nc
    m = Mesh({"y": n})
    assert math.prod(s for _, s in chain) == n
    for c in range(n):
        value = 0
        for pre, size in chain:
            value = value * size + m.axis_coord(SubAxis("y", pre, size), {"y": c})
        assert value == c


def test_span_of_whole_axis():
    m = Mesh({"x": 2, "y": 6})
    assert m.span("y") == ("y", 1, 6)
    assert m.span(SubAxis("y", 1, 6)) == ("y", 1, 6)


@pytest.mark.parametrize(
    "a, needle",
    [
        (SubAxis("y", 1, 4), "y:(1)4"),  # 4 does not divide 6
        (SubAxis("y", 4, 2), "y:(4)2"),
        (SubAxis("y", 0, 2), "y:(0)2"),
        (SubAxis("y", 2, 0), "y:(2)0"),
        (SubAxis("y", 1, -6), "y:(1)-6"),
        (SubAxis("y", 1.5, 2), "y:(1.5)2"),  # type: ignore[arg-type]
        (SubAxis("q", 1, 2), "'q'"),
        ("q", "'q'"),
        (SubAxis(["y"], 1, 2), "['y']"),  # type: ignore[arg-type]
        (3, "3"),
        (None, "None"),
    ],
)
def test_bad_axis_refs(a, needle):
    m = Mesh({"x": 2, "y": 6})
    for f in (m.axis_size, m.span):
        with pytest.raises(UnknownAxisError) as e:
            f(a)
        assert needle in str(e.value)


def test_axis_coord_bad_coords():
    m = Mesh({"x": 2, "y": 4})
    with pytest.raises(MeshError, match="'y'"):
        m.axis_coord("y", {"x": 0})
    with pytest.raises(MeshError, match="'y'"):
        m.axis_coord(SubAxis("y", 1, 2), {"x": 0, "y": 4})


# -- bad meshes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "axes, needle",
    [
        ({}, "at least one axis"),
        ([], "at least one axis"),
        ({"x": 0}, "'x'"),
        ({"x": -2}, "'x'"),
        ({"x": 2.0}, "'x'"),
        ({"x": "2"}, "'x'"),
        ({"x": True}, "'x'"),
        ({"x": None}, "'x'"),
        ({"": 2}, "''"),
        ({"1x": 2}, "'1x'"),
        ({"x y": 2}, "'x y'"),
        ({"x-y": 2}, "'x-y'"),
        ({"é": 2}, "'é'"),  # the type grammar spells ASCII identifiers only
        ({3: 2}, "3"),
        ([("x", 2), ("x", 3)], "'x' appears twice"),
        ([("x", 2, 1)], "pair"),
        (["x"], "pair"),
        ("x", "'x'"),
        (None, "None"),
        (5, "5"),
    ],
)
def test_bad_meshes(axes, needle):
    with pytest.raises(MeshError) as e:
        Mesh(axes)
    assert needle in str(e.value)
    assert isinstance(e.value, ShardingTypeError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("x=2,y=", "'y='"),
        ("x=2,y", "'y'"),
        ("x", "'x'"),
        ("=2", "'=2'"),
        ("x=0", "'x'"),
        ("x=-1", "'x'"),
        ("x=2,x=3", "'x' appears twice"),
        ("x=a", "'x=a'"),
        ("x=2,,y=3", "''"),
        ("x=2,", "''"),
        ("x=²", "'x=²'"),
        ("x=٣", "'x=٣'"),
        ("x=2.0", "'x=2.0'"),
        ("x=+2", "'x=+2'"),
        ("x==2", "'x==2'"),
        ("1x=2", "'1x=2'"),
        ("x y=2", "'x y=2'"),
        ("", "''"),
        ("{}", "''"),
        ("{x=2", "'{x=2'"),
        (None, "None"),
        (b"x=2", "b'x=2'"),
    ],
)
def test_bad_mesh_text(text, needle):
    with pytest.raises(MeshError) as e:
        Mesh.parse(text)
    assert needle in str(e.value)


_MESH_ALPHABET = "xyz_0123456789=,{} -.é"


@given(
    st.sampled_from(["x=2,y=4", "{x=2, y=3, z=1}", "data=6,model=5", "a=1"]),
    st.lists(
        st.tuples(st.sampled_from(["del", "ins", "rep"]), st.integers(0, 40), st.sampled_from(_MESH_ALPHABET)),
        min_size=1, max_size=4,
    ),
)
def test_mutated_mesh_text_parses_or_raises_mesh_error(text, edits):
    for op, pos, ch in edits:
        pos = pos % (len(text) + 1)
        if op == "del":
            text = text[:pos] + text[pos + 1:]
        elif op == "ins":
            text = text[:pos] + ch + text[pos:]
        else:
            text = text[:pos] + ch + text[pos + 1:]
    try:
        m = Mesh.parse(text)
    except MeshError:
        return
    assert Mesh.parse(str(m)) == m
    assert all(s >= 1 for _, s in m.axes)


@given(st.text(max_size=12))
def test_arbitrary_mesh_text_parses_or_raises_mesh_error(text):
    try:
        Mesh.parse(text)
    except MeshError:
        pass


def test_all_positions_enumerated_once():
    m = Mesh({"a": 2, "b": 3, "c": 2})
    ids = [m.device_id(dict(zip(m.names, c))) for c in itertools.product(range(2), range(3), range(2))]
    assert ids == list(range(m.size))


def test_list_pairs_pickle_and_frozen():
    import copy
    import dataclasses
    import pickle

    m = Mesh([["x", 2], ["y", 3]])
    assert m == Mesh({"x": 2, "y": 3})
    for m2 in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m)):
        assert m2 == m and hash(m2) == hash(m) and m2.position("y") == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.axes = ()  # type: ignore[misc]
