"""Type text: round trips, the forms ``jax.typeof`` prints, syntax errors with columns, fuzzing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import mesh_and_type, meshes, sharding_types

from spmd_types import (
    DuplicateAxisError,
    IndivisibleDimensionError,
    InvalidSizeError,
    Mesh,
    RankMismatchError,
    ShardingType,
    ShardingTypeError,
    SubAxis,
    TypeSyntaxError,
    UnknownAxisError,
    format_type,
    parse,
    parse_type,
)

XYZ = Mesh({"x": 2, "y": 4, "z": 2})


# -- round trips -----------------------------------------------------------------------------------------
@given(mesh_and_type(subaxes=True, reduced=True))
def test_parse_format_round_trip(mt):
    mesh, t = mt
    text = format_type(t)
    assert str(t) == text
    assert parse(text, mesh) == t
    assert parse_type(text, mesh) == t and ShardingType.parse(text, mesh) == t
    assert format_type(parse(text, mesh)) == text  # printing is canonical


@given(mesh_and_type(subaxes=True, reduced=True))
def test_round_trip_with_whitespace_and_long_dtype_names(mt):
    mesh, t = mt
    from spmd_types.dtypes import DTYPES

    text = DTYPES[t.dtype][0] + format_type(t)[len(t.dtype):]
    spaced = " " + re.sub(r"([\[\]@(),{}:])", r" \1\t", text) + "\n"
    assert parse(spaced, mesh) == t


@given(st.data())
def test_noncanonical_spellings_parse_to_the_canonical_type(data):
    """Write every whole axis of a random type as a random split into sub-axes: same type."""
    from strategies import factor_chains

    mesh = data.draw(meshes())
    t = data.draw(sharding_types(mesh))

    def spell(a):
        if isinstance(a, SubAxis):
            return [str(a)]
        n = mesh.axis_size(a)
        if n == 1 or not data.draw(st.booleans()):
            return [a]
        return [str(SubAxis(a, p, s)) for p, s in data.draw(factor_chains(n))]

    dims = []
    for n, axes in zip(t.shape, t.dims):
        parts = [p for a in axes for p in spell(a)]
        dims.append(f"{n}@({','.join(parts)})" if parts else str(n))
    unred = [p for a in t.unreduced for p in spell(a)]
    text = f"{t.dtype}[{','.join(dims)}]" + ("{U:(" + ",".join(unred) + ")}" if unred else "")
    assert parse(text, mesh) == t


@pytest.mark.parametrize(
    "text, canon",
    [
        ("f32[512@(x,y),128]", "f32[512@(x,y),128]"),
        ("float32[8@x,16@y]", "f32[8@x,16@y]"),
        ("f32[8@x,4]{U:y}", "f32[8@x,4]{U:y}"),
        ("f32[8@x,4]{U:(y,z)}", "f32[8@x,4]{U:(y,z)}"),
        ("f32[8@x,4]{U:(z,y)}", "f32[8@x,4]{U:(y,z)}"),  # unreduced print in mesh order
        ("bfloat16[8@x,16]", "bf16[8@x,16]"),
        ("int32[3]", "s32[3]"),
        ("bool[2]", "pred[2]"),
        ("float32[]", "f32[]"),
        ("f32[8@(x)]", "f32[8@x]"),
        ("f32[8@(y,x)]", "f32[8@(y,x)]"),
        ("f32[8@y:(1)2]", "f32[8@(y:(1)2)]"),
        ("f32[8@(y:(1)2,y:(2)2)]", "f32[8@y]"),
        ("f32[8@(y:(2)2,y:(1)2)]", "f32[8@(y:(2)2,y:(1)2)]"),
        ("f32[8@(x,y:(2)2),4@(y:(1)2)]{U:z}", "f32[8@(x,y:(2)2),4@(y:(1)2)]{U:z}"),
        ("f32[4]{U:(y:(2)2,y:(1)2)}", "f32[4]{U:y}"),
        ("f32[08]", "f32[8]"),
        ("  f32 [ 8 @ ( x , y ) , 4 ] { U : z }  ", "f32[8@(x,y),4]{U:z}"),
        ("f32[8@x,4]{R:y}", "f32[8@x,4]{R:y}"),
        ("f32[8,4]{R:z,U:(y,x)}", "f32[8,4]{U:(x,y), R:z}"),  # U first, as jax.typeof prints
        ("float32[8,4]{U:x, R:(z,y)}", "f32[8,4]{U:x, R:(y,z)}"),  # pasted from jax.typeof
        ("f32[4]{R:(y:(2)2,y:(1)2)}", "f32[4]{R:y}"),
        ("float8_e4m3fn[2]", "f8_e4m3fn[2]"),
        ("complex64[2@z]", "c64[2@z]"),
    ],
)
def test_known_texts(text, canon):
    t = parse(text, XYZ)
    assert str(t) == canon
    assert parse(canon, XYZ) == t


def test_axis_named_U():
    m = Mesh({"U": 2, "y": 2})
    t = parse("f32[8@U]{U:y}", m)
    assert t.dims == (("U",),) and t.unreduced == frozenset({"y"})
    assert parse("f32[8@y]{U:U}", m).unreduced == frozenset({"U"})
    assert parse(str(t), m) == t


def test_semantic_parse_matches_constructor():
    assert parse("f32[8@x,4]{U:y}", XYZ) == ShardingType((8, 4), "f32", ["x", None], XYZ, ["y"])


# -- syntax errors: class, column, message -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, column, needle",
    [
        ("", 1, "a dtype"),
        ("f32", 4, "'['"),
        ("f32[", 5, "a dimension size"),
        ("f32[8", 6, "']'"),
        ("f32[8@", 7, "an axis name"),
        ("f32[8@x", 8, "']'"),
        ("f32[8@(x", 9, "')'"),
        ("f32[8@(x,", 10, "an axis name"),
        ("f32[8@(x y)]", 10, "found 'y'"),
        ("f32[8,]", 7, "a dimension size"),
        ("f32[,8]", 5, "found ','"),
        ("f32[8]]", 7, "end of text"),
        ("f32[8]{", 8, "'U'"),
        ("f32[8]{U", 9, "':'"),
        ("f32[8]{U:", 10, "an axis name"),
        ("f32[8]{U:y", 11, "'}'"),
        ("f32[8]{V:y}", 8, "found 'V'"),
        ("f32[8]{R:y,R:z}", 12, "given twice"),
        ("f32[8]{U:y,z}", 12, "in parentheses"),
        ("f32[8]{R:y,}", 12, "'U' (unreduced axes) or 'R'"),
        ("f32[8]{U:()}", 11, "an axis name"),
        ("f32[8@y:(1)]", 12, "sub-axis size"),
        ("f32[8@y:1)2]", 9, "'('"),
        ("f32[8@y:(a)2]", 10, "pre-size"),
        ("f32[8@y:(1)z]", 12, "sub-axis size"),
        ("f32[8#]", 6, "'#'"),
        ("[8]", 1, "a dtype"),
        ("8[8]", 1, "a dtype"),
        ("f32 8]", 5, "'['"),
        ("f32[8@x] extra", 10, "found 'extra'"),
        ("f32[x]", 5, "found 'x'"),
        ("f32[-8]", 5, "'-'"),
        ("f32[8.0]", 6, "'.'"),
        ("f32[8@@x]", 7, "found '@'"),
        ("f32[8@x]{U:y}{U:z}", 14, "found '{'"),
        ("f32[8@()]", 8, "found ')'"),
        ("f32[8@ é]", 8, "'é'"),
        ("f32[٣]", 5, "'٣'"),  # only ASCII digits
        ("flt[8]", 1, "'flt'"),
        ("float[8]", 1, "'float'"),
        (" \tf32[8@]", 9, "found ']'"),
    ],
)
def test_syntax_errors_have_columns(text, column, needle):
    with pytest.raises(TypeSyntaxError) as e:
        parse(text, XYZ)
    err = e.value
    assert err.column == column and err.text == text
    msg = str(err)
    assert needle in msg and f"column {column}" in msg
    assert msg.splitlines()[-1] == "  " + " " * (column - 1) + "^"
    assert isinstance(err, ShardingTypeError) and isinstance(err, ValueError)


@pytest.mark.parametrize(
    "text, err, needles",
    [
        ("f32[8@q]", UnknownAxisError, ["'q'"]),
        ("f32[8]{U:q}", UnknownAxisError, ["'q'"]),
        ("f32[8@y:(1)3]", UnknownAxisError, ["y:(1)3"]),
        ("f32[8@w:(1)2]", UnknownAxisError, ["'w'"]),
        ("f32[8@(x,x)]", DuplicateAxisError, ["'x'"]),
        ("f32[8@x,8@x]", DuplicateAxisError, ["'x'", "dimension 1", "dimension 0"]),
        ("f32[8@x]{U:x}", DuplicateAxisError, ["'x'", "unreduced"]),
        ("f32[8@x]{R:x}", DuplicateAxisError, ["'x'", "reduced", "dimension 0"]),
        ("f32[8]{U:y, R:y}", DuplicateAxisError, ["'y'", "reduced", "unreduced"]),
        ("f32[8]{R:(y:(1)2,y)}", DuplicateAxisError, ["y:(1)2", "'y'"]),
        ("f32[8]{R:q}", UnknownAxisError, ["'q'"]),
        ("f32[8@(y,y:(1)2)]", DuplicateAxisError, ["y:(1)2", "'y'"]),
        ("f32[8@y:(1)2]{U:y:(1)4}", DuplicateAxisError, ["y:(1)4", "y:(1)2"]),
        ("f32[8@x,6@y]", IndivisibleDimensionError, ["dimension 1", "size 6", "y=4"]),
        ("f32[3@(x,y:(1)2)]", IndivisibleDimensionError, ["dimension 0", "size 3", "4"]),
        ("f32[0]", InvalidSizeError, ["dimension 0", "size 0"]),
        ("f32[8,0@x]", InvalidSizeError, ["dimension 1"]),
    ],
)
def test_semantic_errors_from_text(text, err, needles):
    with pytest.raises(err) as e:
        parse(text, XYZ)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_non_string_input():
    for bad in (None, b"f32[8]", 8, ["f32[8]"]):
        with pytest.raises(ShardingTypeError, match="string"):
            parse(bad, XYZ)  # type: ignore[arg-type]


def test_rank_mismatch_is_not_reachable_from_text_but_is_typed():
    # text always pairs each size with its axes; the constructor is the only way to mismatch
    with pytest.raises(RankMismatchError):
        ShardingType((8,), "f32", [(), ()], XYZ)


# -- fuzzing: malformed text never escapes as an untyped exception -----------------------------------------------
_ALPHABET = "f32bU[]@(),{}:xyz0124 8é-_#\t"
_EDITS = st.lists(
    st.tuples(st.sampled_from(["del", "ins", "rep", "dup"]), st.integers(0, 200), st.sampled_from(_ALPHABET)),
    min_size=1, max_size=5,
)


def _mutate(text: str, edits) -> str:
    for op, pos, ch in edits:
        pos = pos % (len(text) + 1)
        if op == "del":
            text = text[:pos] + text[pos + 1:]
        elif op == "ins":
            text = text[:pos] + ch + text[pos:]
        elif op == "rep":
            text = text[:pos] + ch + text[pos + 1:]
        else:
            text = text[:pos] + text[pos:pos + 3] + text[pos:]
    return text


def _check_parse_is_total(text: str, mesh: Mesh) -> None:
    try:
        t = parse(text, mesh)
    except TypeSyntaxError as e:
        assert 1 <= e.column <= len(text) + 1, (text, e.column)
        assert e.text == text
        return
    except ShardingTypeError:
        return
    # anything that parses is a valid type that round-trips
    assert isinstance(t, ShardingType) and t.mesh == mesh
    assert parse(format_type(t), mesh) == t


@given(mesh_and_type(subaxes=True), _EDITS)
def test_mutated_type_text_parses_or_raises_typed_error(mt, edits):
    mesh, t = mt
    _check_parse_is_total(_mutate(format_type(t), edits), mesh)


@given(
    st.sampled_from([
        "f32[512@(x,y),128]", "float32[8@x,16@y]", "f32[8@x,4]{U:(y,z)}", "f32[8@(y:(1)2,z),4@(y:(2)2)]",
        "bf16[]", "s32[16@(z,x,y)]{U:y}",
    ]),
    _EDITS,
)
def test_mutated_known_text_parses_or_raises_typed_error(text, edits):
    _check_parse_is_total(_mutate(text, edits), XYZ)


@given(st.lists(st.sampled_from(list(_ALPHABET) + ["f32", "y:(1)2", "8@", "{U:", "(x,y)"]), max_size=14).map("".join))
def test_random_token_soup_parses_or_raises_typed_error(text):
    _check_parse_is_total(text, XYZ)


@given(st.text(max_size=20))
def test_arbitrary_unicode_parses_or_raises_typed_error(text):
    _check_parse_is_total(text, XYZ)
