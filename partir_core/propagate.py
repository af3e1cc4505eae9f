"""Sharding propagation: spread the layouts tactics set on inputs to every value, to a fixpoint.

A layout is, per dimension, the tuple of mesh axes sharding it (no pending sums: whether a value
is unreduced is decided at lowering, by the op that produces it). Propagation works on factors:
for each op, every tensor's layout is read as axes per factor, and a factor sharded in one tensor
is copied into the tensors where it is still unsharded. Sweeps alternate forward and backward over
the program until nothing changes.

Conflict policy (documented, reported in ``explain()``): propagation only fills dimensions that
are unsharded; it never replaces axes already there. When two tensors of one op give a factor
different axes, the conflict is recorded and each value keeps its own layout; lowering then picks
the cheapest way to compute that op under the cost model and ``redist`` inserts the moves. So an
earlier tactic (and what it propagated) is never silently undone by a later one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from partir_core.control import sites
from partir_core.ir import Op, Program, Value
from partir_core.rules import NOSHARD, Dims, Rule
from spmd_types import Axis, Mesh, SubAxis
from spmd_types.types import canonical_axes, spans_overlap

Layout = tuple[tuple[Axis, ...], ...]
"""Per dimension, the mesh axes sharding it, major to minor: whole axes (names) or sub-axes
(``SubAxis``, where a reshape splits an axis between two dimensions)."""


@dataclass(frozen=True)
class Conflict:
    """Op ``op`` has a factor that two of its tensors shard differently."""

    op: int
    prim: str
    factor: int
    first: tuple[Axis, ...]
    second: tuple[Axis, ...]
    values: tuple[int, int]


def split_axes(mesh: Mesh, axes: Sequence[Axis], sizes: Sequence[int]) -> list[tuple[Axis, ...]] | None:
    """Distribute a dimension's axes (major to minor) over its factors (major to minor).

    A factor may take axes only once every more-major factor is fully sharded, which is exactly
    when the blocks of the merged dimension are blocks of the factors. An axis larger than what
    the factor has left is split: its major part (a sub-axis) completes the factor and the rest
    goes on (heads of 4 over ``model=4`` grouped as 2 KV heads x 2: ``model:(1)2`` and
    ``model:(2)2``). None if impossible.
    """
    out: list[list[Axis]] = [[] for _ in sizes]
    prod = [1] * len(sizes)
    k = 0
    for a in axes:
        name, pre, s = mesh.span(a)
        while s > 1:
            while k < len(sizes) and prod[k] == sizes[k]:
                k += 1
            if k == len(sizes) or sizes[k] % prod[k]:
                return None
            room = sizes[k] // prod[k]
            take = s if room % s == 0 else room if s % room == 0 else 0
            if take <= 1:
                return None
            out[k].append(_ref(mesh, name, pre, take))
            prod[k] *= take
            pre, s = pre * take, s // take
    return [tuple(x) for x in out]


def _ref(mesh: Mesh, name: str, pre: int, size: int) -> Axis:
    return name if pre == 1 and size == mesh.axis_size(name) else SubAxis(name, pre, size)


def overlaps(mesh: Mesh, a: Axis, b: Axis) -> bool:
    """Whether two axis references share devices' coordinates (the same axis, or overlapping
    factors of one axis): a value may use at most one of them."""
    na, pa, sa = mesh.span(a)
    nb, pb, sb = mesh.span(b)
    return na == nb and spans_overlap(pa, sa, pb, sb)


def clashes(mesh: Mesh, axes: Iterable[Axis], used: Iterable[Axis]) -> bool:
    """Whether any of ``axes`` overlaps any of ``used``."""
    used = list(used)
    return any(overlaps(mesh, a, b) for a in axes for b in used)


def compose(mesh: Mesh, per_factor: Sequence[tuple[Axis, ...]], sizes: Sequence[int]) -> tuple[Axis, ...] | None:
    """The dimension's axes given its factors' axes, or None if not a block layout (consecutive
    sub-axes of one axis merge back: ``model:(1)2, model:(2)2`` is ``model``)."""
    out: list[Axis] = []
    for k, (axes, n) in enumerate(zip(per_factor, sizes)):
        if not axes:
            continue
        p = math.prod(mesh.axis_size(a) for a in axes)
        if n % p:
            return None
        if any(sizes[j] > 1 and math.prod(mesh.axis_size(a) for a in per_factor[j]) != sizes[j]
               for j in range(k)):
            return None
        out.extend(axes)
    return canonical_axes(mesh, out)


def factor_axes(mesh: Mesh, rule: Rule, dims: Dims, layout: Layout) -> dict[int, tuple[Axis, ...]] | None:
    """Axes per factor read off one tensor's layout (None when the layout does not fit the rule)."""
    out: dict[int, tuple[Axis, ...]] = {}
    for fs, axes in zip(dims, layout):
        if not fs:
            if axes:
                return None
            continue
        parts = split_axes(mesh, axes, [rule.factors[f].size for f in fs])
        if parts is None:
            return None
        out.update(zip(fs, parts))
    return out


def layout_from_factors(mesh: Mesh, rule: Rule, dims: Dims, shape: Sequence[int],
                        assign: dict[int, tuple[Axis, ...]]) -> Layout | None:
    out = []
    for fs in dims:
        axes = compose(mesh, [assign.get(f, ()) for f in fs], [rule.factors[f].size for f in fs])
        if axes is None:
            return None
        out.append(axes)
    return tuple(out)


class Agreement(NamedTuple):
    """What one op's tensors agree on: axes per factor, and the value each factor's axes came from."""

    proposal: dict[int, tuple[Axis, ...]]
    source: dict[int, int]


class Propagator:
    """Holds the layouts of all values and runs sweeps; ``pinned`` values never change."""

    def __init__(self, program: Program, mesh: Mesh, rules: Sequence[Rule]) -> None:
        self.program = program
        self.mesh = mesh
        self.rules = rules
        self.layouts: dict[int, Layout] = {v.id: ((),) * len(v.shape) for v in program.values()}
        self.pinned: set[int] = set()
        self.conflicts: dict[tuple[int, int], Conflict] = {}
        self.sites = sites(program, rules)
        self._site = 0

    def _tensors(self, op: Op, rule: Rule, forward: bool) -> list[tuple[Value, Dims]]:
        ins = [(a, d) for a, d in zip(op.inputs, rule.operands) if isinstance(a, Value)]
        outs = list(zip(op.outputs, rule.results))
        return ins + outs if forward else outs + ins

    def _visit(self, op: Op, rule: Rule, forward: bool) -> set[int]:
        """One op: agree on axes per factor, then refine every tensor towards them."""
        tensors = self._tensors(op, rule, forward)
        agreed, current = self._propose(op, rule, tensors)
        changed: set[int] = set()
        if not agreed.proposal:
            return changed
        for (v, dims), fa in zip(tensors, current):
            if v.id in self.pinned or fa is None:
                continue
            cur = self._refine(op, rule, v, dims, fa, agreed)
            if cur != self.layouts[v.id]:
                self.layouts[v.id] = cur
                changed.add(v.id)
        return changed

    def _propose(self, op: Op, rule: Rule, tensors: Sequence[tuple[Value, Dims]]
                 ) -> tuple[Agreement, list[dict[int, tuple[Axis, ...]] | None]]:
        """What the op's tensors agree on, and each tensor's own axes per factor (None where its
        layout does not fit the rule).

        A factor's proposal is the longest of its tensors' axes when they are prefixes of one
        another (a refinement); tensors whose axes differ otherwise are a conflict, recorded,
        and the first one seen wins the proposal."""
        proposal: dict[int, tuple[Axis, ...]] = {}
        source: dict[int, int] = {}
        current: list[dict[int, tuple[Axis, ...]] | None] = []
        for v, dims in tensors:
            fa = factor_axes(self.mesh, rule, dims, self.layouts[v.id])
            current.append(fa)
            if fa is None:
                continue
            for f, axes in fa.items():
                if not axes or rule.factors[f].kind == NOSHARD:
                    continue
                p = proposal.get(f, ())
                if axes[:len(p)] == p:
                    if len(axes) > len(p):
                        proposal[f], source[f] = axes, v.id
                elif p[:len(axes)] != axes and (self._site, f) not in self.conflicts:
                    self.conflicts[(self._site, f)] = Conflict(op.index, op.name, f, p, axes, (source[f], v.id))
        return Agreement(proposal, source), current

    def _refine(self, op: Op, rule: Rule, v: Value, dims: Dims, fa: dict[int, tuple[Axis, ...]],
                agreed: Agreement) -> Layout:
        """``v``'s layout with every dimension refined towards the agreed axes of its factors,
        except where that would reuse an axis another of its dimensions holds (a conflict)."""
        cur = list(self.layouts[v.id])
        for d, fs in enumerate(dims):
            if not fs:
                continue
            per = [p if p[:len(c)] == c else c
                   for c, p in ((fa.get(f, ()), agreed.proposal.get(f, ())) for f in fs)]
            want = compose(self.mesh, per, [rule.factors[f].size for f in fs])
            if want is None or want == cur[d]:
                continue
            others = [a for k, axes in enumerate(cur) if k != d for a in axes]
            if clashes(self.mesh, want, others):  # blocked: the value uses those axes on another dim
                self._blocked(op, v, fs, fa, agreed)
                continue
            cur[d] = want
        return tuple(cur)

    def _blocked(self, op: Op, v: Value, fs: Sequence[int], fa: dict[int, tuple[Axis, ...]],
                 agreed: Agreement) -> None:
        """Record the conflict of a refinement ``v`` cannot take (first one per site and factor)."""
        f = next(f for f in fs if agreed.proposal.get(f, ()) != fa.get(f, ()))
        if (self._site, f) not in self.conflicts and f in agreed.source:
            self.conflicts[(self._site, f)] = Conflict(
                op.index, op.name, f, agreed.proposal[f], fa.get(f, ()), (agreed.source[f], v.id))

    def run(self, max_sweeps: int = 64) -> set[int]:
        """Sweep forward then backward until a fixpoint; returns the values whose layout changed."""
        changed: set[int] = set()
        order = list(enumerate(self.sites))
        for _ in range(max_sweeps):
            step: set[int] = set()
            for forward, sweep in ((True, order), (False, order[::-1])):
                for k, (op, rule) in sweep:
                    self._site = k
                    step |= self._visit(op, rule, forward)
            changed |= step
            if not step:
                break
        return changed
