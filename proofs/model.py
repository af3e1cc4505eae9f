"""The z3 model of distributed arrays: devices, local indices, global arrays and type meanings.

Conventions (docs/design.md section 2, restated independently of ``redist``):

* A device is a tuple of symbolic mesh coordinates, one z3 ``Int`` per mesh axis (``0 <= c < N``).
  A (sub-)axis ``(name, pre, size)`` of an axis of size ``N`` reads the digit
  ``(c // (N // (pre*size))) % size``; several axes read a mixed-radix number, major first.
* Dimension sizes are symbolic. For each dimension ``d`` we fix a cell count ``L_d`` (a common
  multiple of every shard count the proof involves) and a symbolic multiple ``m_d >= 1``; the
  global size is ``n_d = L_d * m_d``. Every block boundary is then a multiple of ``m_d``, so a
  global index is written as a pair ``(q, r)`` with ``0 <= q < L_d`` and ``0 <= r < m_d``
  (``i = q*m_d + r``). The pair is a bijection of ``[0, n_d)``, so an uninterpreted function of
  the pairs is as general as one of the integers, and all index arithmetic is *linear* in the
  symbolic values (``q`` moves by constants times coordinates; ``r`` passes through). A proof in
  this space therefore holds for every ``m_d >= 1``, i.e. for every shape the types allow.
* The global array is an uninterpreted function ``G(q0, r0, q1, r1, ...)`` to integers. A type
  *means*: the device at ``c`` holds, at local index ``l``, ``G(block(c)*ext + l)`` - summed over the
  coordinates of the unreduced axes when there are any.
* The *generic state* of a type is the most general family of locals meeting that meaning:
  without unreduced axes it is ``G`` at the global index; with unreduced axes (group index ``u`` of
  size ``k``) every device with ``u != 0`` holds an arbitrary ``F(c, l)`` (uninterpreted) and the
  device with ``u == 0`` holds ``G(...) - sum_{j != 0} F(c[u:=j], l)``. Every state meeting the
  meaning is an instance (choose ``F``), so a property proved of the generic state holds for all.
* At a *concrete* device the generic state is a linear combination of *atoms* (``Lin``):
  applications of ``G`` and the ``F``s at constant cell offsets plus the symbolic offset ``o``
  inside a cell (the ``If`` decided, the device's digits folded). ``proofs.p2p`` encodes them as
  integer codes to run point-to-point schedules with NumPy over every device; ``Space.realize``
  turns atoms back into the z3 term that ``proofs.link.prove_p2p`` proves.
* A device whose coordinates are partly concrete (a member of a group: ``set_mixed`` with a
  constant) keeps those coordinates as Python ints, so the generic state's ``If`` is decided while
  the terms are built: a reduction over ``k`` partials costs ``O(k)`` terms, not ``O(k^2)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from spmd_types import Axis, Mesh, ShardingType

Term = Any  # a z3 arithmetic expression (or a Python int that z3 coerces)
Dev = tuple[Term, ...]
Index = tuple[tuple[Term, Term], ...]
Span = tuple[str, int, int]
Atom = tuple[Any, ...]
"""``(-1, q)``: ``G`` at cells ``q``; ``(i, key, q)``: partials ``F_i`` of device ``key`` at local cells
``q`` - each applied at ``q + o`` (and the symbolic in-cell remainders ``r``)."""
Lin = dict[Atom, int]
"""A linear combination of atoms (coefficients never zero)."""


def span(mesh: Mesh, a: Axis) -> Span:
    """``(name, pre, size)`` of a (sub-)axis (validated by the mesh)."""
    return mesh.span(a)


def digit(mesh: Mesh, dev: Dev, sp: Span) -> Term:
    """Coordinate of ``dev`` along the (sub-)axis ``sp``."""
    name, pre, size = sp
    n = mesh.axis_size(name)
    c = dev[mesh.position(name)]
    if size == 1:
        return z3.IntVal(0)
    stride = n // (pre * size)
    if isinstance(c, int):
        return z3.IntVal((c // stride) % size)
    if pre == 1 and stride == 1:
        return c
    if pre == 1:
        return c / stride
    if stride == 1:
        return c % size
    return (c / stride) % size


def _const(x: Term) -> int | None:
    """``x`` as a Python int when it is a constant (an int or a z3 integer value), else None."""
    if isinstance(x, int):
        return x
    return x.as_long() if z3.is_int_value(x) else None


def set_digit(mesh: Mesh, dev: Dev, sp: Span, value: Term) -> Dev:
    """``dev`` with its coordinate along ``sp`` replaced by ``value``.

    Folded where exact, so concrete members of a group stay small terms: a whole axis is replaced
    (``c + (value - c) = value``), and a concrete coordinate with a concrete value stays an int."""
    name, pre, size = sp
    if size == 1:
        return dev
    n = mesh.axis_size(name)
    stride = n // (pre * size)
    pos = mesh.position(name)
    c, v = dev[pos], _const(value)
    if pre == 1 and stride == 1:
        new: Term = value if v is None else v
    elif isinstance(c, int) and v is not None:
        new = c + (v - (c // stride) % size) * stride
    else:
        new = c + (value - digit(mesh, dev, sp)) * stride
    return dev[:pos] + (new,) + dev[pos + 1:]


def mixed(mesh: Mesh, dev: Dev, spans: Sequence[Span]) -> Term:
    """Mixed-radix number of ``dev``'s digits along ``spans`` (first most significant)."""
    if all(isinstance(c, int) for c in dev):  # a concrete device: fold the digits, build one constant
        return z3.IntVal(mixed_int(mesh, dev, spans))
    out: Term = z3.IntVal(0)
    for sp in spans:
        out = out * sp[2] + digit(mesh, dev, sp)
    return out


def mixed_const(mesh: Mesh, dev: Dev, spans: Sequence[Span]) -> int | None:
    """``mixed`` as a Python int when every coordinate it reads is concrete, else None."""
    num = 0
    for name, pre, size in spans:
        c = dev[mesh.position(name)]
        if not isinstance(c, int):
            return None
        num = num * size + (c // (mesh.axis_size(name) // (pre * size))) % size
    return num


def mixed_int(mesh: Mesh, dev: Sequence[int], spans: Sequence[Span]) -> int:
    """``mixed`` of a concrete device, as a Python int."""
    num = 0
    for name, pre, size in spans:
        num = num * size + (dev[mesh.position(name)] // (mesh.axis_size(name) // (pre * size))) % size
    return num


def set_mixed(mesh: Mesh, dev: Dev, spans: Sequence[Span], value: Term) -> Dev:
    """``dev`` with its digits along ``spans`` set to the mixed-radix digits of ``value``."""
    w = 1
    weights = []
    for sp in reversed(spans):
        weights.append(w)
        w *= sp[2]
    weights.reverse()
    for sp, wt in zip(spans, weights):
        if isinstance(value, int):
            d: Term = (value // wt) % sp[2]
        else:
            d = (value / wt) % sp[2] if wt > 1 else value % sp[2]
        dev = set_digit(mesh, dev, sp, d)
    return dev


def spans_of(mesh: Mesh, axes: Sequence[Axis]) -> tuple[Span, ...]:
    return tuple(span(mesh, a) for a in axes)


def size_of(spans: Sequence[Span]) -> int:
    return math.prod(s for _, _, s in spans)


def shards(t: ShardingType, d: int) -> int:
    return math.prod(t.mesh.axis_size(a) for a in t.dims[d])


def cells(types: Sequence[ShardingType]) -> tuple[int, ...]:
    """Per dimension, the least common multiple of the shard counts of ``types``: the cell count."""
    rank = types[0].rank
    return tuple(math.lcm(*(shards(t, d) for t in types)) for d in range(rank))


@dataclass
class Arr:
    """A distributed array in the model: per-dimension local extents in cells (``q`` units) and the
    value each device holds at each local index."""

    ext: tuple[int, ...]
    val: Callable[[Dev, Index], Term]


class Space:
    """One proof's symbols: the mesh, cell counts ``L``, multiples ``m`` and the global array ``G``."""

    _counter = itertools.count()

    def __init__(self, mesh: Mesh, L: Sequence[int], tag: str = "") -> None:
        self.mesh = mesh
        self.L = tuple(L)
        self.rank = len(self.L)
        k = next(Space._counter)
        self.tag = f"{tag}{k}"
        self.m = tuple(z3.Int(f"m{d}") for d in range(self.rank))
        if self.rank:
            self.G = z3.Function(f"G_{self.tag}", *([z3.IntSort()] * (2 * self.rank)), z3.IntSort())
        else:
            self._g0 = z3.Int(f"G_{self.tag}")
        self._partials: list[Any] = []

    def g(self, idx: Sequence[tuple[Term, Term]]) -> Term:
        if not self.rank:
            return self._g0
        return self.G(*[x for qr in idx for x in qr])

    def fresh_partials(self) -> Callable[[Dev, Index], Term]:
        """A fresh uninterpreted function ``F(c..., q0, r0, ...)`` for a generic unreduced state
        (the ``len(self._partials) - 1``-th, the index its atoms name)."""
        n_args = len(self.mesh.axes) + 2 * self.rank
        f = z3.Function(f"F_{self.tag}_{len(self._partials) + 1}", *([z3.IntSort()] * n_args), z3.IntSort())
        self._partials.append(f)
        return lambda dev, idx: f(*dev, *[x for qr in idx for x in qr])

    @property
    def n_partials(self) -> int:
        """How many partials' functions ``generic`` has made (atoms name them by index)."""
        return len(self._partials)

    def realize(self, lin: Lin, o: Index) -> Term:
        """The z3 term of atoms at in-cell offset ``o``."""
        terms = []
        for atom, c in lin.items():
            idx = tuple((atom[-1][d] + o[d][0], o[d][1]) for d in range(self.rank))
            t = self.g(idx) if atom[0] == -1 else self._partials[atom[0]](*atom[1], *[x for qr in idx for x in qr])
            terms.append(t if c == 1 else c * t)
        return z3.Sum(terms) if terms else z3.IntVal(0)

    def block_cells(self, t: ShardingType, dev: Sequence[int]) -> tuple[int, ...]:
        """First global cell of a concrete device's block of ``t``, per dimension."""
        ext = self.ext(t)
        return tuple(mixed_int(self.mesh, dev, spans_of(self.mesh, t.dims[d])) * ext[d] for d in range(self.rank))

    def ext(self, t: ShardingType) -> tuple[int, ...]:
        """Local extents of ``t`` in cells."""
        out = []
        for d in range(self.rank):
            s = shards(t, d)
            if self.L[d] % s:
                raise ValueError(f"cell count {self.L[d]} of dimension {d} is not a multiple of {s} ({t})")
            out.append(self.L[d] // s)
        return tuple(out)

    def global_index(self, t: ShardingType, dev: Dev, idx: Index) -> Index:
        ext = self.ext(t)
        out = []
        for d in range(self.rank):
            b = mixed(self.mesh, dev, spans_of(self.mesh, t.dims[d]))
            q, r = idx[d]
            out.append((b * ext[d] + q, r))
        return tuple(out)

    # -- meanings ------------------------------------------------------------------------------------
    def unreduced_spans(self, t: ShardingType) -> tuple[Span, ...]:
        return spans_of(self.mesh, t.sorted_unreduced())

    def generic(self, t: ShardingType, replicas_agree: bool = False) -> Arr:
        """The most general state meeting ``t``'s meaning (see the module docstring).

        ``replicas_agree``: a narrower assumption - devices that differ only along mesh axes ``t``
        does not mention at all hold the same partials (as ``redist.simulate.scatter`` lays them
        out). The meaning of docs/design.md does not require it."""
        uspans = self.unreduced_spans(t)
        k = size_of(uspans)
        mesh = self.mesh
        if k == 1:
            return Arr(self.ext(t), lambda dev, idx: self.g(self.global_index(t, dev, idx)))
        f0 = self.fresh_partials()
        f = f0
        if replicas_agree:
            used: dict[str, list[Span]] = {}
            for a in t.used_axes():
                sp_ = span(mesh, a)
                used.setdefault(sp_[0], []).append(sp_)

            def f(dev: Dev, idx: Index) -> Term:
                # Keep only the digits the type uses: replicas (the other digits) share a partial.
                kept = []
                for name, n in mesh.axes:
                    part: Term = z3.IntVal(0)
                    for sp_ in used.get(name, []):
                        part = part + digit(mesh, dev, sp_) * (n // (sp_[1] * sp_[2]))
                    kept.append(part)
                return f0(tuple(kept), idx)

        def val(dev: Dev, idx: Index) -> Term:
            u = mixed_const(mesh, dev, uspans)  # a member of a group: its branch is known
            if u is not None and u != 0:
                return f(dev, idx)
            own = self.g(self.global_index(t, dev, idx)) - z3.Sum([f(set_mixed(mesh, dev, uspans, j), idx)
                                                                   for j in range(1, k)])
            return own if u == 0 else z3.If(mixed(mesh, dev, uspans) == 0, own, f(dev, idx))

        return Arr(self.ext(t), val)

    def device_vars(self, tag: str = "") -> Dev:
        return tuple(z3.Int(f"c_{name}{tag}") for name in self.mesh.names)

    def index_vars(self, tag: str = "") -> Index:
        return tuple((z3.Int(f"q{d}{tag}"), z3.Int(f"r{d}{tag}")) for d in range(self.rank))

    def bounds(self, dev: Dev, idx: Index, ext: Sequence[int]) -> list[Term]:
        out: list[Term] = [m >= 1 for m in self.m]
        for c, (_, n) in zip(dev, self.mesh.axes):
            out += [c >= 0, c < n]
        for d, (q, r) in enumerate(idx):
            out += [q >= 0, q < ext[d], r >= 0, r < self.m[d]]
        return out

    def meaning_violation(self, arr: Arr, t: ShardingType, dev: Dev, idx: Index) -> Term:
        """The negation of "``arr`` holds what ``t`` says" at device ``dev``, local index ``idx``."""
        uspans = self.unreduced_spans(t)
        k = size_of(uspans)
        if k == 1:
            lhs = arr.val(dev, idx)
        else:
            lhs = z3.Sum([arr.val(set_mixed(self.mesh, dev, uspans, j), idx) for j in range(k)])
        return lhs != self.g(self.global_index(t, dev, idx))


__all__ = [
    "Arr", "Atom", "Dev", "Index", "Lin", "Space", "Span", "Term", "cells", "digit", "mixed",
    "mixed_const", "mixed_int", "set_digit", "set_mixed", "shards", "size_of", "span", "spans_of",
]
