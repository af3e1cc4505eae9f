"""Parsing and printing types in the syntax ``jax.typeof`` prints: ``f32[512@(x,y),128]{U:z}``.

Grammar (whitespace allowed between tokens)::

    type  := dtype '[' [dim (',' dim)*] ']' ['{' 'U' ':' axes '}']
    dim   := INT ['@' axes]
    axes  := axis | '(' axis (',' axis)* ')'
    axis  := IDENT [':' '(' INT ')' INT]          # sub-axis, as Shardy writes "y":(1)2

Errors are ``TypeSyntaxError`` with the 1-based column; semantic problems (unknown axis,
indivisible dimension...) surface as the type layer's own typed errors.
"""

from __future__ import annotations

import re

from spmd_types.errors import ShardingTypeError, TypeSyntaxError
from spmd_types.mesh import Axis, Mesh, SubAxis, format_axis
from spmd_types.types import ShardingType

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


def parse_type(text: str, mesh: Mesh) -> ShardingType:
    """Parse type text against ``mesh``; ``parse_type(format_type(t), t.mesh) == t``."""
    if not isinstance(text, str):
        raise ShardingTypeError(f"type text must be a string, got {type(text).__name__}")
    mesh = Mesh.coerce(mesh)
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
    unreduced: tuple[Axis, ...] = ()
    if p.peek() == "{":
        p.take("{")
        kind, kcol = p.take_kind("ident", "'U' (unreduced axes)")
        if kind != "U":
            raise TypeSyntaxError(f"only unreduced axes {{U:...}} are supported, found {kind!r}", text, kcol)
        p.take(":")
        unreduced = p.axes()
        p.take("}")
    if p.peek() is not None:
        raise p.fail("end of text")
    try:
        from spmd_types.dtypes import canonical_dtype

        canonical_dtype(dtype)
    except ShardingTypeError as e:
        raise TypeSyntaxError(str(e), text, dcol) from None
    return ShardingType(shape, dtype, dims, mesh, unreduced)


def _format_axes(axes: tuple[Axis, ...]) -> str:
    if len(axes) == 1 and isinstance(axes[0], str):
        return axes[0]
    return "(" + ",".join(format_axis(a) for a in axes) + ")"


def format_type(t: ShardingType) -> str:
    dims = ",".join(f"{n}@{_format_axes(a)}" if a else str(n) for n, a in zip(t.shape, t.dims))
    out = f"{t.dtype}[{dims}]"
    if t.unreduced:
        out += "{U:" + _format_axes(t.sorted_unreduced()) + "}"
    return out
