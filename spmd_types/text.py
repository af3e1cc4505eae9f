"""Parsing and printing types in the syntax ``jax.typeof`` prints: ``f32[512@(x,y),128]{U:z, R:w}``.

Grammar (whitespace allowed between tokens)::

    type  := dtype '[' [dim (',' dim)*] ']' ['{' group (',' group)* '}']
    group := ('U' | 'R') ':' axes                  # unreduced / reduced axes, each kind once
    dim   := INT ['@' axes]
    axes  := axis | '(' axis (',' axis)* ')'
    axis  := IDENT [':' '(' INT ')' INT]          # sub-axis, as Shardy writes "y":(1)2

Errors are ``TypeSyntaxError`` with the 1-based column; semantic problems (unknown axis,
indivisible dimension...) surface as the type layer's own typed errors when ``spmd_types.types``
builds the type from the parts. This module is the grammar only (text <-> ``TypeParts``), so the
type module can use it without an import circle.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from typing import NamedTuple

from spmd_types.dtypes import canonical_dtype
from spmd_types.errors import ShardingTypeError, TypeSyntaxError
from spmd_types.mesh import Axis, SubAxis, format_axis

_TOKEN = re.compile(r"\s*(?:(?P<int>[0-9]+)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[\[\]@(),{}:]))")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks: list[tuple[str, str, int]] = []  # (kind, value, column)
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                col = pos + 1 + (len(text[pos:]) - len(text[pos:].lstrip()))
                raise TypeSyntaxError(f"unexpected character {text[col - 1]!r}", text, col)
            kind = m.lastgroup or ""
            val = m.group(kind)
            self.toks.append((kind, val, m.start(kind) + 1))
            pos = m.end()
        self.i = 0

    def col(self) -> int:
        return self.toks[self.i][2] if self.i < len(self.toks) else len(self.text) + 1

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def fail(self, what: str) -> TypeSyntaxError:
        got = self.peek()
        found = "end of text" if got is None else repr(got)
        return TypeSyntaxError(f"expected {what}, found {found}", self.text, self.col())

    def take(self, value: str) -> None:
        if self.peek() != value:
            raise self.fail(repr(value))
        self.i += 1

    def take_kind(self, kind: str, what: str) -> tuple[str, int]:
        if self.i >= len(self.toks) or self.toks[self.i][0] != kind:
            raise self.fail(what)
        _, val, col = self.toks[self.i]
        self.i += 1
        return val, col

    def axis(self) -> Axis:
        name, _ = self.take_kind("ident", "an axis name")
        if self.peek() != ":":
            return name
        self.take(":")
        self.take("(")
        pre, _ = self.take_kind("int", "the sub-axis pre-size (an integer)")
        self.take(")")
        size, _ = self.take_kind("int", "the sub-axis size (an integer)")
        return SubAxis(name, int(pre), int(size))

    def axes(self) -> tuple[Axis, ...]:
        if self.peek() != "(":
            return (self.axis(),)
        self.take("(")
        out = [self.axis()]
        while self.peek() == ",":
            self.take(",")
            out.append(self.axis())
        self.take(")")
        return tuple(out)


class TypeParts(NamedTuple):
    """What type text says, before it is checked against a mesh."""

    dtype: str
    shape: tuple[int, ...]
    dims: tuple[tuple[Axis, ...], ...]
    unreduced: tuple[Axis, ...]
    reduced: tuple[Axis, ...] = ()


_GROUPS = {"U": "unreduced", "R": "reduced"}


def _parse_groups(p: _Parser) -> dict[str, tuple[Axis, ...]]:
    """``{U:axes, R:axes}`` (either, in either order, each once), as ``jax.typeof`` prints it."""
    groups: dict[str, tuple[Axis, ...]] = {}
    p.take("{")
    while True:
        kind, kcol = p.take_kind("ident", "'U' (unreduced axes) or 'R' (reduced axes)")
        if kind not in _GROUPS:
            hint = "; several axes of one kind are written in parentheses, as in {U:(x,y)}" if groups else ""
            raise TypeSyntaxError(
                f"expected 'U' (unreduced axes) or 'R' (reduced axes), found {kind!r}{hint}", p.text, kcol)
        if kind in groups:
            raise TypeSyntaxError(f"{_GROUPS[kind]} axes are given twice; list them once, as in "
                                  f"{{{kind}:(x,y)}}", p.text, kcol)
        p.take(":")
        groups[kind] = p.axes()
        if p.peek() != ",":
            break
        p.take(",")
    p.take("}")
    return groups


def parse_parts(text: str) -> TypeParts:
    """The grammar above: text -> parts (raises ``TypeSyntaxError`` with the column)."""
    if not isinstance(text, str):
        raise ShardingTypeError(f"type text must be a string, got {type(text).__name__}")
    p = _Parser(text)
    dtype, dcol = p.take_kind("ident", "a dtype such as f32")
    p.take("[")
    shape: list[int] = []
    dims: list[tuple[Axis, ...]] = []
    if p.peek() != "]":
        while True:
            size, _ = p.take_kind("int", "a dimension size (an integer)")
            shape.append(int(size))
            if p.peek() == "@":
                p.take("@")
                dims.append(p.axes())
            else:
                dims.append(())
            if p.peek() != ",":
                break
            p.take(",")
    p.take("]")
    groups = _parse_groups(p) if p.peek() == "{" else {}
    if p.peek() is not None:
        raise p.fail("end of text")
    try:
        canonical_dtype(dtype)
    except ShardingTypeError as e:
        raise TypeSyntaxError(str(e), text, dcol) from None
    return TypeParts(dtype, tuple(shape), tuple(dims), groups.get("U", ()), groups.get("R", ()))


def _format_axes(axes: tuple[Axis, ...]) -> str:
    if len(axes) == 1 and isinstance(axes[0], str):
        return axes[0]
    return "(" + ",".join(format_axis(a) for a in axes) + ")"


def format_parts(dtype: str, shape: Sequence[int], dims: Sequence[tuple[Axis, ...]],
                 unreduced: Sequence[Axis] | Set[Axis] = (), reduced: Sequence[Axis] | Set[Axis] = ()) -> str:
    """The canonical text of a type's parts (``unreduced`` and ``reduced`` in mesh order), the
    groups as ``jax.typeof`` joins them: ``{U:x, R:y}``."""
    body = ",".join(f"{n}@{_format_axes(a)}" if a else str(n) for n, a in zip(shape, dims))
    groups = [f"{k}:{_format_axes(tuple(axes))}" for k, axes in (("U", unreduced), ("R", reduced)) if axes]
    return f"{dtype}[{body}]" + ("{" + ", ".join(groups) + "}" if groups else "")
