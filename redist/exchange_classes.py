"""Exchanges factored by the mesh atoms they leave alone: the work is per class of devices.

Three kinds of atoms split the devices into classes that exchange only among themselves, every
class running the same exchange:

- atoms unreduced in both types (*kept*): class ``p`` holds partial ``p`` and needs partial ``p``;
- *aligned* atoms: an atom sharding the same dimension in both types behind atoms of the same
  total size (a shared major prefix is the simplest case, e.g. ``x`` in ``[(x, y)] -> [(x, z)]``;
  ``y`` in ``[(x, y)] -> [(z, y)]`` is one too): its coordinate is one digit of the element index
  in both types, so class ``c`` holds and needs only the elements whose digit is ``c``;
- *idle* atoms, used by neither type, where no partials are summed: each class holds a whole copy
  of the source and needs a whole copy of the destination. Where partials are summed they stay
  whole: summing once per class costs ``(classes - 1)(k - 2)`` more cells per cell than once.

A class's exchange is the exchange between the *quotient* types: the same local shapes on the
mesh without those atoms, each such dimension cut to the elements of one digit. ``redist.exchange``
routes and schedules the quotient (``mesh.size / classes`` devices) and lifts the result: the cells
received scale by the class count; the rounds are the quotient's, all classes running them at once
(their devices are disjoint). Device order inside a class is the quotient's device order (removing
mesh digits keeps the order of the rest), and every choice the routing makes (replica, root,
sender) for kept and aligned atoms is among devices of one class by that order, so the lifted
figures are those of the unfactored routing (``tests/test_exchange_classes.py`` checks it pair by
pair). Across idle atoms the unfactored routing may pick a sender in another class, but each class
holds ``1/classes`` of every holder group and of its requests, so the busiest sender's load
(``ceil(requests / holders)``) and every device's receipts are the same. One difference is a gain:
where the source's only unreduced atoms are kept ones and the quotient source is plain or an idle
atom is factored, the source's replicas are interchangeable inside a class, so a device may add a
cell another replica holds instead of receiving its own replica's. That stays exact: every class
takes each cell from the same replica, so each group of kept partials still sums to the value (the
simulator test with a decomposition per replica checks it). On the issue-12 ladder this turns
exchanges of millions of (device, cell) triples at 65,536 devices into ones of a few hundred
thousand, under ``redist.exchange.limits.MAX_CELLS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from redist.atoms import Atom, atoms_of, dims_atoms, type_of_atoms, unreduced_atoms
from redist.groups import atoms_index
from spmd_types import Mesh, ShardingType
from spmd_types.memo import Scope, cached_property, memo


@dataclass(frozen=True, eq=False)
class Classes:
    """An exchange ``old -> new`` as ``n_classes`` copies of ``quotient_old -> quotient_new``."""

    mesh: Mesh                  # the whole mesh
    quotient_old: ShardingType
    quotient_new: ShardingType
    n_classes: int
    factored: tuple[Atom, ...]  # the atoms that number the classes, major first
    rest: tuple[Atom, ...]      # the atoms that number the devices of a class

    @cached_property
    def devices(self) -> np.ndarray:
        """``[classes, quotient devices]``: the device of each (class, quotient device). Only
        schedules read it: planning needs the quotient types alone."""
        mesh = self.mesh
        mesh.check_enumerable("a schedule's per-device table")  # typed, before NumPy asks for terabytes
        out = np.empty((self.n_classes, mesh.size // self.n_classes), dtype=np.int64)
        out[atoms_index(mesh, self.factored), atoms_index(mesh, self.rest)] = np.arange(mesh.size)
        out.setflags(write=False)
        return out


def _factored(old: ShardingType, new: ShardingType, merged: bool = False) -> frozenset[Atom]:
    """Atoms both types use alike (size-1 atoms split nothing): kept unreduced atoms, *aligned*
    atoms and, without reduced atoms, *idle* ones. Only on axes whose every used atom is one of
    the mesh's prime atoms (a spelling like ``x:(1)3`` on ``x=6`` factors ``x`` otherwise: those
    axes stay whole). The merging exchange (``merged``) sums the kept partials too, so only
    aligned atoms factor there."""
    ua, ub = unreduced_atoms(old), unreduced_atoms(new)
    out = _aligned(old, new) if merged else set(ua & ub) | _aligned(old, new)
    mesh = old.mesh
    used = {x for t in (old, new) for x in (*unreduced_atoms(t), *(y for d in dims_atoms(t) for y in d))}
    if not merged and not ua - ub:
        out |= {x for name in mesh.names for x in atoms_of(mesh, name)} - used
    odd = {x.name for x in used if x not in atoms_of(mesh, x.name)}
    return frozenset(x for x in out if x.size > 1 and x.name not in odd)


def _aligned(old: ShardingType, new: ShardingType) -> set[Atom]:
    """Atoms that shard the same dimension in both types behind atoms of the same total size (a
    shared major prefix is the simplest case): the atom's coordinate is one digit of the element
    index, the same digit in both types, so every device holds and needs only elements with its
    digit."""
    def places(t: ShardingType) -> dict[Atom, tuple[int, int]]:
        out = {}
        for dim, atoms in enumerate(dims_atoms(t)):
            pre = 1
            for x in atoms:
                out[x] = (dim, pre)
                pre *= x.size
        return out
    a, b = places(old), places(new)
    return {x for x, at in a.items() if b.get(x) == at}


def _remaining(mesh: Mesh, factored: frozenset[Atom]) -> tuple[Atom, ...]:
    """The mesh's atoms not factored out, in device-numbering order (axis, then major first)."""
    return tuple(x for name in mesh.names for x in atoms_of(mesh, name) if x not in factored)


@memo(Scope.MESH, maxsize=256)
def _quotient_mesh(mesh: Mesh, rest: tuple[Atom, ...]) -> Mesh:
    """Each axis keeps the product of its remaining atoms (1 where none remain). Memoised: the
    pairs of a move factor the same few ways."""
    return Mesh([(name, math.prod(x.size for x in rest if x.name == name)) for name in mesh.names])


def _quotient_atom(rest: tuple[Atom, ...], x: Atom, factored: frozenset[Atom]) -> Atom:
    """Atom ``x`` of the original mesh as an atom of the quotient mesh: on an axis that lost
    atoms its ``pre`` becomes the product of the remaining atoms of its axis that are more major."""
    if any(y.name == x.name for y in factored):
        return Atom(x.name, math.prod(y.size for y in rest if y.name == x.name and y.pre < x.pre), x.size)
    return x


def _quotient_type(t: ShardingType, q: Mesh, rest: tuple[Atom, ...], factored: frozenset[Atom]) -> ShardingType:
    """``t`` on the quotient mesh: each dimension cut by its factored atoms, the rest renamed.
    Built from atoms without the validating constructor: dropping atoms from a valid type leaves
    disjoint atoms, each dimension divisible by what remains of its own."""
    shape, dims = [], []
    for n, atoms in zip(t.shape, dims_atoms(t)):
        shape.append(n // math.prod(x.size for x in atoms if x in factored))
        dims.append(tuple(_quotient_atom(rest, x, factored) for x in atoms if x not in factored))
    unred = frozenset(_quotient_atom(rest, x, factored) for x in unreduced_atoms(t) - factored)
    return type_of_atoms(tuple(shape), t.dtype, q, tuple(dims), unred)


@memo(Scope.TYPE, maxsize=256)
def classes(old: ShardingType, new: ShardingType, merged: bool = False) -> Classes | None:
    """The factoring of ``old -> new`` (of its merging exchange with ``merged``), or ``None``
    where no atom factors out."""
    factored = _factored(old, new, merged)
    if not factored:
        return None
    mesh = old.mesh
    rest = _remaining(mesh, factored)
    q = _quotient_mesh(mesh, rest)
    return Classes(mesh, _quotient_type(old, q, rest, factored), _quotient_type(new, q, rest, factored),
                   math.prod(x.size for x in factored), tuple(sorted(factored)), rest)


def lift_rows(c: Classes, rows: np.ndarray) -> np.ndarray:
    """A ``[quotient devices, ...]`` table as the ``[devices, ...]`` table of every class."""
    out = np.empty((c.devices.size, *rows.shape[1:]), dtype=rows.dtype)
    out[c.devices] = rows[None]
    return out


def lift_pairs(c: Classes, pairs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """``(src, dst)`` quotient pairs as the pairs of every class, by sender."""
    if not pairs:
        return ()
    p = np.array(pairs, dtype=np.int64)
    src, dst = c.devices[:, p[:, 0]].reshape(-1), c.devices[:, p[:, 1]].reshape(-1)
    order = np.argsort(src, kind="stable")
    return tuple(zip(src[order].tolist(), dst[order].tolist()))
