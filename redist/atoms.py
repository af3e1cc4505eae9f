"""Prime sub-axes ("atoms"): the unit the planner and step typing rules reason in.

A canonical type merges ``y:(1)2, y:(2)2`` into ``y``; a step that removes only the minor half of
``y`` must see the split. Every (sub-)axis factors uniquely into prime sub-axes, smallest prime
most major, so step rules compare atom sequences and stay independent of how a type was spelled.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from spmd_types import Axis, IndivisibleDimensionError, Mesh, ShardingType, SubAxis
from spmd_types.memo import Scope, memo
from spmd_types.types import canonical_axes, canonical_unreduced


class Atom(NamedTuple):
    """A prime factor of one mesh axis: the sub-axis ``name:(pre)size`` with a prime ``size``."""

    name: str
    pre: int
    size: int


def primes(n: int) -> list[int]:
    """Prime factors of ``n``, smallest first, with multiplicity."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


@memo(Scope.MESH)
def atoms_of(mesh: Mesh, a: Axis) -> tuple[Atom, ...]:
    """Prime factors of (sub-)axis ``a``, major to minor; a size-1 axis is one atom of size 1."""
    name, pre, size = mesh.span(a)
    if size == 1:
        return (Atom(name, pre, 1),)
    out: list[Atom] = []
    for p in primes(size):
        out.append(Atom(name, pre, p))
        pre *= p
    return tuple(out)


@memo(Scope.MESH, maxsize=65536)
def atoms_of_axes(mesh: Mesh, axes: tuple[Axis, ...]) -> tuple[Atom, ...]:
    """The atoms of ``axes``, major to minor: memoised per mesh like ``axes_of_atoms``, its
    inverse (every step's typing rule reads its axes' atoms, thousands of times a pair)."""
    return tuple(x for a in axes for x in atoms_of(mesh, a))


@memo(Scope.MESH, maxsize=65536)
def atom_axis(mesh: Mesh, atom: Atom) -> Axis:
    name, pre, size = atom
    if pre == 1 and size == mesh.axis_size(name):
        return name
    return SubAxis(name, pre, size)


@memo(Scope.MESH, maxsize=65536)
def axes_of_atoms(mesh: Mesh, atoms: tuple[Atom, ...]) -> tuple[Axis, ...]:
    """The canonical axes of one dimension laid out as ``atoms`` (major to minor). A pure function
    of the mesh and a tuple of small tuples, memoised per mesh: the planner turns the same few
    atom stacks into axes thousands of times a pair (``from_atoms``, the greedy pass's steps)."""
    return canonical_axes(mesh, tuple(atom_axis(mesh, x) for x in atoms))


@memo(Scope.MESH, maxsize=65536)
def unreduced_of_atoms(mesh: Mesh, atoms: frozenset[Atom]) -> frozenset[Axis]:
    """The canonical unreduced axes made of ``atoms`` (memoised per mesh like ``axes_of_atoms``)."""
    return frozenset(canonical_unreduced(mesh, [atom_axis(mesh, x) for x in sorted(atoms)]))


@memo(Scope.TYPE, maxsize=65536)
def dims_atoms(t: ShardingType) -> tuple[tuple[Atom, ...], ...]:
    return tuple(atoms_of_axes(t.mesh, axes) for axes in t.dims)


@memo(Scope.TYPE, maxsize=65536)
def unreduced_atoms(t: ShardingType) -> frozenset[Atom]:
    return frozenset(x for a in t.unreduced for x in atoms_of(t.mesh, a))


def atoms_size(atoms: tuple[Atom, ...]) -> int:
    return math.prod(a.size for a in atoms)


def from_atoms(
    t: ShardingType, dims: tuple[tuple[Atom, ...], ...], unreduced: frozenset[Atom]
) -> ShardingType:
    """A type like ``t`` (shape, dtype, mesh) with atom-level dims/unreduced (canonicalised).

    Step rules only ever move atoms that are disjoint by construction, so this checks just what
    can still go wrong (divisibility) and builds the type without the full validation."""
    return type_of_atoms(t.shape, t.dtype, t.mesh, dims, unreduced)


def type_of_atoms(
    shape: tuple[int, ...], dtype: str, mesh: Mesh, dims: tuple[tuple[Atom, ...], ...], unreduced: frozenset[Atom]
) -> ShardingType:
    """``from_atoms`` on any shape and mesh (a class quotient's); the atoms must be disjoint."""
    local = []
    for d, (n, atoms) in enumerate(zip(shape, dims)):
        k = atoms_size(atoms)
        if n % k:
            raise IndivisibleDimensionError(
                f"dimension {d} of size {n} is not divisible by {k}, the product of its axes"
            )
        local.append(n // k)  # the canonical axes multiply to the atoms' product
    cdims = tuple(axes_of_atoms(mesh, d) for d in dims)
    return ShardingType.trusted(shape, dtype, cdims, mesh, unreduced_of_atoms(mesh, unreduced), tuple(local))
