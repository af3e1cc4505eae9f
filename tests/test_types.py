"""ShardingType: validation with typed errors, canonical form (sub-axes), derived sizes, blocks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import mesh_and_type, meshes, sharding_types

from spmd_types import (
    DTYPES,
    DuplicateAxisError,
    IndivisibleDimensionError,
    InvalidSizeError,
    Mesh,
    MeshError,
    RankMismatchError,
    ShardingType,
    ShardingTypeError,
    SubAxis,
    UnknownAxisError,
    canonical_dtype,
    itemsize,
    parse,
)
from spmd_types.dtypes import numpy_dtype
from spmd_types.types import canonical_axes, spans_overlap

XY = Mesh({"x": 2, "y": 4})


def T(shape, dims, mesh=XY, dtype="f32", unreduced=()):
    return ShardingType(shape, dtype, dims, mesh, unreduced)


# -- valid random types ----------------------------------------------------------------------------
@given(mesh_and_type(subaxes=True))
def test_random_types_are_consistent(mt):
    mesh, t = mt
    assert t.rank == len(t.shape) == len(t.dims) == len(t.local_shape)
    assert t.dtype in DTYPES
    for d in range(t.rank):
        k = math.prod(mesh.axis_size(a) for a in t.dims[d])
        assert t.dim_shards(d) == k
        assert t.shape[d] % k == 0 and t.local_shape[d] == t.shape[d] // k
    assert t.sharded_ways * t.replication == mesh.size
    assert t.local_size == math.prod(t.local_shape)
    assert t.local_bytes == t.local_size * itemsize(t.dtype)
    assert t.global_bytes == math.prod(t.shape) * t.itemsize
    # canonical: re-validating the canonical form is the identity
    assert ShardingType(t.shape, t.dtype, t.dims, mesh, t.unreduced) == t
    assert t.replace() == t
    assert hash(ShardingType(t.shape, t.dtype, t.dims, mesh, t.unreduced)) == hash(t)
    used = t.used_axes()
    assert len(used) == sum(len(a) for a in t.dims) + len(t.unreduced)
    for i, a in enumerate(used):  # every axis at most once
        for b in used[i + 1:]:
            na, pa, sa = mesh.span(a)
            nb, pb, sb = mesh.span(b)
            assert na != nb or not spans_overlap(pa, sa, pb, sb)


@given(mesh_and_type(max_devices=64, subaxes=True))
def test_block_index_is_mixed_radix_of_axis_coords(mt):
    mesh, t = mt
    for dev in range(mesh.size):
        c = mesh.coords(dev)
        for d, axes in enumerate(t.dims):
            b = 0
            for a in axes:
                name, pre, size = mesh.span(a)
                n = mesh.axis_size(name)
                b = b * size + (c[name] // (n // (pre * size))) % size
            assert t.block_index(c)[d] == b
            lo, hi = t.block(dev)[d]
            assert (lo, hi) == (b * t.local_shape[d], (b + 1) * t.local_shape[d])


@given(mesh_and_type(max_devices=48, subaxes=True, max_rank=3, max_factor=2))
def test_blocks_tile_global_space_replication_times(mt):
    mesh, t = mt
    assume(math.prod(t.shape) <= 20000)
    counter = np.zeros(t.shape, dtype=np.int64)
    bounds = np.asarray(t.blocks())
    assert bounds.shape == (mesh.size, t.rank, 2)
    for dev in range(mesh.size):
        blk = t.block(dev)
        assert tuple(hi - lo for lo, hi in blk) == t.local_shape
        assert [list(b) for b in blk] == bounds[dev].tolist()
        counter[tuple(slice(lo, hi) for lo, hi in blk)] += 1
    assert (counter == t.replication).all()


# -- canonical form ----------------------------------------------------------------------------------
def test_subaxes_merge_into_whole_axis():
    m = Mesh({"y": 4})
    a = parse("f32[8@(y:(1)2,y:(2)2)]", m)
    assert a == parse("f32[8@y]", m)
    assert a.dims == (("y",),)
    assert str(a) == "f32[8@y]"
    # minor first is a different layout and is kept as written
    b = parse("f32[8@(y:(2)2,y:(1)2)]", m)
    assert b != a and b.dims == ((SubAxis("y", 2, 2), SubAxis("y", 1, 2)),)


def test_subaxis_covering_whole_axis_is_the_axis():
    m = Mesh({"x": 3, "y": 6})
    assert T((6,), [(SubAxis("y", 1, 6),)], m) == T((6,), ["y"], m)
    assert T((6,), [()], m, unreduced=[SubAxis("y", 1, 6)]) == T((6,), [()], m, unreduced=["y"])


def test_three_way_merge_and_partial_merge():
    m = Mesh({"y": 12})
    t = T((12,), [(SubAxis("y", 1, 2), SubAxis("y", 2, 2), SubAxis("y", 4, 3))], m)
    assert t.dims == (("y",),)
    t = T((12,), [(SubAxis("y", 1, 2), SubAxis("y", 2, 2))], m)
    assert t.dims == ((SubAxis("y", 1, 4),),)
    t = T((12, 2), [(SubAxis("y", 2, 2), SubAxis("y", 4, 3)), (SubAxis("y", 1, 2),)], m)
    assert t.dims == ((SubAxis("y", 2, 6),), (SubAxis("y", 1, 2),))
    assert canonical_axes(m, (SubAxis("y", 1, 3), SubAxis("y", 3, 4))) == ("y",)


def test_unreduced_subaxes_merge_in_any_order():
    m = Mesh({"x": 2, "y": 4})
    a = T((8,), ["x"], m, unreduced=[SubAxis("y", 2, 2), SubAxis("y", 1, 2)])
    assert a.unreduced == frozenset({"y"}) and a == T((8,), ["x"], m, unreduced=["y"])
    b = T((8,), [SubAxis("y", 1, 2)], m, unreduced=[SubAxis("y", 2, 2), "x"])
    assert b.unreduced == frozenset({"x", SubAxis("y", 2, 2)})
    assert b.sorted_unreduced() == ("x", SubAxis("y", 2, 2))


def test_regression_size_one_subaxes_are_dropped():
    """A size-1 sub-axis shards nothing: it used to be kept (printing ``(y:(1)1)``) and to count as
    used only sometimes (``y:(1)1`` beside ``y`` was accepted, ``y:(2)1`` beside ``y`` was not)."""
    m = Mesh({"x": 2, "y": 4})
    assert T((4,), [(SubAxis("y", 1, 1),)], m) == T((4,), [()], m)
    assert T((4,), [(SubAxis("y", 1, 1), "y")], m) == T((4,), ["y"], m)
    assert T((4,), [(SubAxis("y", 2, 1), "y")], m) == T((4,), ["y"], m)
    assert T((4,), [("x",)], m, unreduced=[SubAxis("y", 4, 1)]).unreduced == frozenset()
    assert str(T((4,), [(SubAxis("y", 1, 1),)], m)) == "f32[4]"
    # on a size-1 axis the only sub-axis is the whole axis
    m1 = Mesh({"x": 1, "y": 4})
    assert T((4,), [(SubAxis("x", 1, 1),)], m1) == T((4,), ["x"], m1)


def test_regression_size_one_axis_twice_is_a_duplicate():
    """``f32[4@(x,x)]`` on ``{x=1}`` used to be accepted and silently merged into ``f32[4@x]``."""
    m = Mesh({"x": 1, "y": 4})
    with pytest.raises(DuplicateAxisError, match="'x'"):
        parse("f32[4@(x,x)]", m)
    with pytest.raises(DuplicateAxisError, match="'x'"):
        parse("f32[4@x]{U:x}", m)
    with pytest.raises(DuplicateAxisError, match="'x'"):
        parse("f32[4@x,4@x]", m)
    with pytest.raises(DuplicateAxisError, match="x:\\(1\\)1"):
        T((4,), [("x", SubAxis("x", 1, 1))], m)
    assert parse("f32[4@x]", m).replication == 4


# -- overlap of sub-axes -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, a, b",
    [
        (4, "y", SubAxis("y", 1, 2)),
        (4, "y", SubAxis("y", 2, 2)),
        (4, SubAxis("y", 1, 2), SubAxis("y", 1, 4)),
        (8, SubAxis("y", 1, 2), SubAxis("y", 1, 4)),
        (6, SubAxis("y", 1, 2), SubAxis("y", 3, 2)),
        (6, SubAxis("y", 1, 2), SubAxis("y", 1, 3)),
        (12, SubAxis("y", 1, 4), SubAxis("y", 2, 3)),
        (12, SubAxis("y", 2, 2), SubAxis("y", 1, 3)),
        (4, SubAxis("y", 1, 2), SubAxis("y", 1, 2)),
    ],
)
def test_overlapping_subaxes_are_duplicates(n, a, b):
    m = Mesh({"x": 2, "y": n})
    shape = (n * 2, n * 2)
    for dims, unred in (([(a, b), ()], ()), ([(a,), (b,)], ()), ([(a,), ()], (b,)), ([(), ()], (a, b))):
        with pytest.raises(DuplicateAxisError) as e:
            T(shape, dims, m, unreduced=unred)
        msg = str(e.value)
        assert str(a) in msg and str(b) in msg


@pytest.mark.parametrize(
    "n, a, b",
    [
        (6, SubAxis("y", 1, 2), SubAxis("y", 2, 3)),
        (6, SubAxis("y", 1, 3), SubAxis("y", 3, 2)),
        (4, SubAxis("y", 1, 2), SubAxis("y", 2, 2)),
        (8, SubAxis("y", 1, 2), SubAxis("y", 4, 2)),
        (12, SubAxis("y", 1, 2), SubAxis("y", 4, 3)),
        (12, SubAxis("y", 3, 2), SubAxis("y", 1, 3)),
    ],
)
def test_disjoint_subaxes_coexist(n, a, b):
    m = Mesh({"x": 2, "y": n})
    t = T((n, n), [(a,), (b,)], m)
    assert t.dims == ((a,), (b,))
    assert T((n, n), [(b,), ()], m, unreduced=[a]).unreduced == frozenset({a})


def _valid_subaxes(n: int) -> list[tuple[int, int]]:
    return [(p, s) for p in range(1, n + 1) for s in range(2, n + 1) if n % (p * s) == 0]


def _ordered_factorisations(n: int) -> list[tuple[int, ...]]:
    if n == 1:
        return [()]
    return [(d, *rest) for d in range(2, n + 1) if n % d == 0 for rest in _ordered_factorisations(n // d)]


def _disjoint_in_some_chain(n: int) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of sub-axes that are disjoint runs of one ordered factorisation of ``n``."""
    out = set()
    for chain in _ordered_factorisations(n):
        runs = []
        for i in range(len(chain)):
            for j in range(i + 1, len(chain) + 1):
                runs.append((i, j, (math.prod(chain[:i]), math.prod(chain[i:j]))))
        for i, j, a in runs:
            for k, l, b in runs:
                if j <= k or l <= i:
                    out.add((a, b))
    return out


def test_spans_overlap_matches_brute_force():
    """Two factors of one axis may share a type exactly when both are pieces of one factorisation
    of the axis, neither containing the other. Then their digits are independent (every pair of
    coordinates occurs equally often, so blocks tile exactly). The converse does not hold: pieces
    of different factorisations can happen to be independent (y:(2)3 and y:(3)2 on 6 are c%3 and
    c%2; y:(2)2 and y:(3)2 on 12); those are rejected, so the sub-axes of a type always nest in one
    factorisation, which is what planners reasoning in prime atoms rely on."""
    for n in range(2, 25):
        coords = np.arange(n)
        subs = _valid_subaxes(n)
        digit = {(p, s): (coords // (n // (p * s))) % s for p, s in subs}
        chain_disjoint = _disjoint_in_some_chain(n)
        for (p1, s1) in subs:
            for (p2, s2) in subs:
                disjoint = not spans_overlap(p1, s1, p2, s2)
                assert disjoint == (((p1, s1), (p2, s2)) in chain_disjoint), (n, p1, s1, p2, s2)
                assert disjoint == (not spans_overlap(p2, s2, p1, s1))
                counts = np.zeros((s1, s2), dtype=np.int64)
                np.add.at(counts, (digit[p1, s1], digit[p2, s2]), 1)
                independent = (p1, s1) != (p2, s2) and (counts == n // (s1 * s2)).all()
                if disjoint:
                    assert independent, (n, p1, s1, p2, s2)


def test_pieces_of_different_factorisations_are_rejected():
    with pytest.raises(DuplicateAxisError, match=r"y:\(3\)2"):
        T((6, 6), [(SubAxis("y", 2, 3),), (SubAxis("y", 3, 2),)], Mesh({"y": 6}))
    with pytest.raises(DuplicateAxisError, match=r"y:\(3\)2"):
        T((6, 6), [(SubAxis("y", 2, 2),), (SubAxis("y", 3, 2),)], Mesh({"y": 12}))


# -- typed errors naming the culprit -----------------------------------------------------------------
@pytest.mark.parametrize(
    "shape, dims, unred, err, needles",
    [
        ((8,), ["q"], (), UnknownAxisError, ["'q'", "['x', 'y']"]),
        ((8,), [()], ("q",), UnknownAxisError, ["'q'"]),
        ((8,), [(SubAxis("q", 1, 2),)], (), UnknownAxisError, ["'q'"]),
        ((8,), [(SubAxis("y", 1, 3),)], (), UnknownAxisError, ["y:(1)3", "4"]),
        ((8,), [(SubAxis("y", 4, 2),)], (), UnknownAxisError, ["y:(4)2"]),
        ((8,), [(3,)], (), UnknownAxisError, ["dimension 0", "3"]),
        ((8,), [[["y"]]], (), UnknownAxisError, ["['y']"]),
        ((8,), [7], (), UnknownAxisError, ["dimension 0", "7"]),
        ((8,), [()], 3, UnknownAxisError, ["unreduced", "3"]),
        ((8,), [()], (None,), UnknownAxisError, ["unreduced", "None"]),
        ((8,), [("x", "x")], (), DuplicateAxisError, ["'x'", "dimension 0"]),
        ((8, 8), ["x", "x"], (), DuplicateAxisError, ["'x'", "dimension 0", "dimension 1"]),
        ((8,), ["x"], ("x",), DuplicateAxisError, ["'x'", "unreduced"]),
        ((8,), [()], ("y", "y"), DuplicateAxisError, ["'y'"]),
        ((8,), [("y", SubAxis("y", 2, 2))], (), DuplicateAxisError, ["'y'", "y:(2)2"]),
        ((6,), ["y"], (), IndivisibleDimensionError, ["dimension 0", "size 6", "4", "y=4"]),
        ((8, 6), [(), ("x", "y")], (), IndivisibleDimensionError, ["dimension 1", "size 6", "8", "x=2", "y=4"]),
        ((2,), [(SubAxis("y", 1, 2), "x")], (), IndivisibleDimensionError, ["dimension 0", "y:(1)2=2"]),
        ((8,), [(), ()], (), RankMismatchError, ["rank 1", "2"]),
        ((8, 8), [()], (), RankMismatchError, ["rank 2", "1"]),
        ((), ["x"], (), RankMismatchError, ["rank 0"]),
        ((8,), None, (), RankMismatchError, ["None"]),
        ((8,), "x", (), RankMismatchError, ["'x'"]),
        ((8,), 5, (), RankMismatchError, ["5"]),
        ((0,), [()], (), InvalidSizeError, ["dimension 0", "size 0"]),
        ((8, -4), [(), ()], (), InvalidSizeError, ["dimension 1", "size -4"]),
        ((8.0,), [()], (), InvalidSizeError, ["dimension 0", "8.0"]),
        ((True,), [()], (), InvalidSizeError, ["dimension 0", "True"]),
        (("8",), [()], (), InvalidSizeError, ["dimension 0", "'8'"]),
        (8, [()], (), InvalidSizeError, ["shape", "8"]),
        (None, [()], (), InvalidSizeError, ["shape", "None"]),
    ],
)
def test_typed_errors(shape, dims, unred, err, needles):
    with pytest.raises(err) as e:
        ShardingType(shape, "f32", dims, XY, unred)
    msg = str(e.value)
    for n in needles:
        assert n in msg, (n, msg)
    assert isinstance(e.value, ShardingTypeError)


@pytest.mark.parametrize("dtype", ["f33", "float", "", None, 5, "F32"])
def test_unknown_dtype(dtype):
    with pytest.raises(InvalidSizeError) as e:
        T((8,), ["x"], dtype=dtype)
    assert repr(dtype) in str(e.value)


def test_mesh_must_be_a_mesh():
    for bad in ("notmesh", None, {"x": 2}):
        with pytest.raises(MeshError):
            ShardingType((8,), "f32", [()], bad)  # type: ignore[arg-type]


def test_regression_unreduced_string_is_one_axis():
    """``unreduced="xy"`` used to be split into the axes ``x`` and ``y``."""
    m = Mesh({"x": 2, "y": 2, "xy": 2})
    assert T((8,), [()], m, unreduced="xy").unreduced == frozenset({"xy"})
    assert T((8,), [()], m, unreduced=SubAxis("x", 1, 2)).unreduced == frozenset({"x"})
    assert T((8,), [()], m, unreduced=None) == T((8,), [()], m)


def test_single_axis_and_none_dim_specs():
    assert T((8, 4), ["x", None]) == T((8, 4), [("x",), ()])
    assert T((8,), [SubAxis("y", 1, 2)]).dims == ((SubAxis("y", 1, 2),),)
    assert T((np.int64(8),), [["x"]]).shape == (8,)
    assert type(T((np.int64(8),), [["x"]]).shape[0]) is int


@given(st.data())
def test_generated_bad_types_raise_typed_errors(data):
    """Corrupt a valid type in one way and check the specific error and that it names the culprit."""
    mesh = data.draw(meshes(max_devices=64))
    t = data.draw(sharding_types(mesh, min_rank=1))
    dims = [list(a) for a in t.dims]
    kind = data.draw(st.sampled_from(["unknown", "dup", "indivisible", "rank", "size"]))
    if kind == "unknown":
        d = data.draw(st.integers(0, t.rank - 1))
        dims[d].append("nope")
        with pytest.raises(UnknownAxisError, match="'nope'"):
            ShardingType(t.shape, t.dtype, dims, mesh, t.unreduced)
    elif kind == "dup":
        used = t.used_axes()
        assume(used)
        a = data.draw(st.sampled_from(list(used)))
        d = data.draw(st.integers(0, t.rank - 1))
        dims[d].append(a)
        with pytest.raises(DuplicateAxisError) as e:
            ShardingType(t.shape, t.dtype, dims, mesh, t.unreduced)
        assert repr(str(a)) in str(e.value)
    elif kind == "indivisible":
        ds = [d for d in range(t.rank) if t.dim_shards(d) > 1]
        assume(ds)
        d = data.draw(st.sampled_from(ds))
        shape = list(t.shape)
        shape[d] += 1
        with pytest.raises(IndivisibleDimensionError, match=f"dimension {d} of size {shape[d]}"):
            ShardingType(shape, t.dtype, t.dims, mesh, t.unreduced)
    elif kind == "rank":
        extra = data.draw(st.booleans())
        dims2 = dims + [[]] if extra else dims[:-1]
        with pytest.raises(RankMismatchError, match=f"rank {t.rank}"):
            ShardingType(t.shape, t.dtype, dims2, mesh, t.unreduced)
    else:
        d = data.draw(st.integers(0, t.rank - 1))
        shape = list(t.shape)
        shape[d] = data.draw(st.sampled_from([0, -1, -t.shape[d]]))
        with pytest.raises(InvalidSizeError, match=f"dimension {d}"):
            ShardingType(shape, t.dtype, t.dims, mesh, t.unreduced)


# -- misc API ------------------------------------------------------------------------------------------
def test_replace_validates():
    t = T((8, 8), ["x", "y"])
    assert t.replace(dims=[(), ("y", "x")]) == T((8, 8), [(), ("y", "x")])
    assert t.replace(unreduced=()) == t
    with pytest.raises(DuplicateAxisError):
        t.replace(unreduced=["x"])
    with pytest.raises(IndivisibleDimensionError):
        T((2, 8), [(), ()]).replace(dims=[("y",), ()])


def test_repr_and_parse_method():
    t = T((8, 4), ["x", None], unreduced=["y"])
    assert repr(t) == "ShardingType('f32[8@x,4]{U:y}', mesh={x=2,y=4})"
    assert ShardingType.parse("f32[8@x,4]{U:y}", XY) == t


def test_replication_counts_unreduced_as_copies():
    assert T((8, 8), ["x", "y"]).replication == 1
    assert T((8, 8), ["x", None]).replication == 4
    assert T((8, 8), ["x", None], unreduced=["y"]).replication == 4
    assert T((), []).replication == 8 and T((), []).local_shape == ()


def test_types_on_different_meshes_differ():
    a = T((8,), ["x"])
    b = T((8,), ["x"], mesh=Mesh({"x": 2, "y": 2}))
    assert a != b and str(a) == str(b)


@pytest.mark.parametrize(
    "name, canon",
    [("float32", "f32"), ("f32", "f32"), ("bfloat16", "bf16"), ("bool", "pred"), ("int8", "s8"),
     ("i32", "s32"), ("uint64", "u64"), ("complex64", "c64"), ("float8_e4m3fn", "f8_e4m3fn"),
     (np.float32, "f32"), (np.dtype("int16"), "s16"), (np.dtype("complex128"), "c128")],
)
def test_dtype_aliases(name, canon):
    assert canonical_dtype(name) == canon
    assert T((8,), [()], dtype=name).dtype == canon


@pytest.mark.parametrize("canon", sorted(DTYPES))
def test_dtype_table(canon):
    assert itemsize(canon) == numpy_dtype(canon).itemsize  # type: ignore[attr-defined]
    assert canonical_dtype(str(numpy_dtype(canon))) == canon


def test_block_of_unknown_device():
    t = T((8,), ["x"])
    with pytest.raises(MeshError, match="device id 8"):
        t.block(8)


@given(mesh_and_type(subaxes=True, reduced=True))
def test_pickle_round_trip(mt):
    import pickle

    _, t = mt
    u = pickle.loads(pickle.dumps(t))
    assert u == t and hash(u) == hash(t) and str(u) == str(t)


@pytest.mark.parametrize("dtype, widened", [
    ("bf16", True), ("f16", True), ("bfloat16", True), ("float16", True), (np.float16, True),
    ("f32", False), ("u16", False), ("s16", False), (np.float32, False), ("float8_e4m3b11fnuz", False), (None, False),
])
def test_is_16bit_float_names_the_floats_xla_cpu_widens(dtype: object, widened: bool) -> None:
    from spmd_types.dtypes import is_16bit_float

    assert is_16bit_float(dtype) is widened
