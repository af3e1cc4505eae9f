"""The greedy pass: from a type to a destination, one typed step at a time in a fixed order of
preference (slices, reduce-scatters, moves, reductions, gathers; the package docstring lists it).
Each dimension is a stack of atoms whose minor end is where every step acts.
"""

from __future__ import annotations

from redist.atoms import (
    Atom,
    atom_axis,
    axes_of_atoms,
    dims_atoms,
    unreduced_atoms,
)
from redist.errors import RedistError
from redist.steps import (
    AllGather,
    AllReduce,
    AllToAll,
    Discard,
    DynSlice,
    PadUnreduced,
    ReduceScatter,
    Step,
)
from spmd_types import ShardingType

Dims = list[list[Atom]]


class Greedy:
    """The stack pass on atoms; emits one-atom steps (merged afterwards)."""

    def __init__(self, t: ShardingType, dst: ShardingType) -> None:
        self.t = t
        self.dims: Dims = [list(d) for d in dims_atoms(t)]
        self.unred: set[Atom] = set(unreduced_atoms(t))
        self.wanted_dims = dims_atoms(dst)
        self.wanted_unreduced = unreduced_atoms(dst)
        self.needed_at = {a: j for j, d in enumerate(self.wanted_dims) for a in d}
        self.steps: list[Step] = []

    def ax(self, a: Atom) -> tuple:
        return (atom_axis(self.t.mesh, a),)

    def prefix_length(self, i: int) -> int:
        d, t = self.dims[i], self.wanted_dims[i]
        for k, (a, b) in enumerate(zip(d, t)):
            if a != b:
                return k
        return min(len(d), len(t))

    def ready(self, j: int) -> bool:
        return self.prefix_length(j) == len(self.dims[j]) < len(self.wanted_dims[j])

    def removable(self, i: int) -> bool:
        return len(self.dims[i]) > self.prefix_length(i)

    def used(self) -> set[Atom]:
        return {a for d in self.dims for a in d} | self.unred

    def prefix_lengths(self) -> list[int]:
        return [self.prefix_length(j) for j in range(len(self.dims))]

    def slices(self, lengths: list[int] | None = None) -> None:
        """Slice every free destination atom that is next on its dimension. One pass: a slice only
        lengthens its own dimension and uses one more atom, so it never readies another one.
        ``lengths``: the current ``prefix_lengths``, kept current (a slice of the next destination atom
        lengthens its dimension's common prefix by one)."""
        lengths = self.prefix_lengths() if lengths is None else lengths
        used = self.used()
        for j, (d, want) in enumerate(zip(self.dims, self.wanted_dims)):
            # exhaust one dimension before the next, so its slices fuse into one step
            while lengths[j] == len(d) < len(want) and want[len(d)] not in used:
                a = want[len(d)]
                d.append(a)
                used.add(a)
                lengths[j] += 1
                self.steps.append(DynSlice(j, self.ax(a)))

    def step_once(self, lengths: list[int] | None = None) -> bool:
        """One non-slice step; False when done. The rules below are tried in order and the first
        that changes the stacks wins, so every dimension's common prefix (``prefix_length``) is read
        once up front (``lengths``, the current ``prefix_lengths``, where the caller has them)."""
        lengths = self.prefix_lengths() if lengths is None else lengths
        ready = [lengths[j] == len(self.dims[j]) < len(self.wanted_dims[j]) for j in range(len(self.dims))]
        if (self._scatter_wanted(ready) or self._move_run(lengths, ready) or self._reduce_unneeded()
                or self._gather_unneeded(lengths) or self._pad_wanted_unreduced(lengths) or self._discard_wanted()):
            return True
        if [tuple(d) for d in self.dims] == list(self.wanted_dims) and self.unred == set(self.wanted_unreduced):
            return False
        # Stuck: a needed axis is unreduced or buried under axes that cannot move yet.
        if self._reduce_stuck() or self._gather_stuck(lengths):
            return True
        raise RedistError(f"synthesizer made no progress from {self.t}")  # pragma: no cover

    def _scatter_wanted(self, ready: list[bool]) -> bool:
        """A dimension ready for its next wanted axis, which is unreduced: reduce-scatter it there."""
        for j in range(len(self.dims)):
            if ready[j] and self.wanted_dims[j][len(self.dims[j])] in self.unred:
                a = self.wanted_dims[j][len(self.dims[j])]
                self.unred.discard(a)
                self.dims[j].append(a)
                self.steps.append(ReduceScatter(j, self.ax(a)))
                return True
        return False

    def _move_run(self, lengths: list[int], ready: list[bool]) -> bool:
        """The longest minor-most run of dimension i that dimension j wants next, moved at once."""
        for i in range(len(self.dims)):
            for n in range(len(self.dims[i]) - lengths[i], 0, -1):
                run = self.dims[i][-n:]
                want = self.needed_at.get(run[0])
                if want is None or want == i or not ready[want]:
                    continue
                at = len(self.dims[want])
                if list(self.wanted_dims[want][at : at + n]) == run:
                    del self.dims[i][-n:]
                    self.dims[want].extend(run)
                    self.steps.append(AllToAll(i, want, axes_of_atoms(self.t.mesh, tuple(run))))
                    return True
        return False

    def _reduce_unneeded(self) -> bool:
        """A pending sum over an axis no dimension wants: all-reduce it."""
        for a in sorted(self.unred - self.wanted_unreduced):
            if a not in self.needed_at:
                self.unred.discard(a)
                self.steps.append(AllReduce(self.ax(a)))
                return True
        return False

    def _gather_unneeded(self, lengths: list[int]) -> bool:
        """A removable minor axis wanted nowhere: all-gather it."""
        for i in range(len(self.dims)):
            last = self.dims[i][-1] if len(self.dims[i]) > lengths[i] else None
            if last is not None and last not in self.needed_at and last not in self.wanted_unreduced:
                self.steps.append(AllGather(i, self.ax(self.dims[i].pop())))
                return True
        return False

    def _pad_wanted_unreduced(self, lengths: list[int]) -> bool:
        """A removable minor axis wanted as a pending sum: pad into zeros (no communication)."""
        for i in range(len(self.dims)):
            if len(self.dims[i]) > lengths[i] and self.dims[i][-1] in self.wanted_unreduced:
                a = self.dims[i].pop()
                self.unred.add(a)
                self.steps.append(PadUnreduced(i, self.ax(a)))
                return True
        return False

    def _discard_wanted(self) -> bool:
        """A wanted pending sum over an axis nothing uses: keep one copy, zeros elsewhere."""
        used = self.used()
        for a in sorted(self.wanted_unreduced - self.unred):
            if a not in used:
                self.unred.add(a)
                self.steps.append(Discard(self.ax(a)))
                return True
        return False

    def _reduce_stuck(self) -> bool:
        for a in sorted(self.unred - self.wanted_unreduced):
            self.unred.discard(a)
            self.steps.append(AllReduce(self.ax(a)))
            return True
        return False

    def _gather_stuck(self, lengths: list[int]) -> bool:
        for i in range(len(self.dims)):
            if len(self.dims[i]) > lengths[i]:
                self.steps.append(AllGather(i, self.ax(self.dims[i].pop())))
                return True
        return False

    def run(self) -> list[Step]:
        for _ in range(64 * (len(self.dims) + 1) * (len(self.t.mesh.axes) + 1)):
            lengths = self.prefix_lengths()  # read once per round: slices keep them current
            self.slices(lengths)
            if not self.step_once(lengths):
                return self.steps
        raise RedistError(f"synthesizer did not converge from {self.t}")  # pragma: no cover

    def relabel(self) -> list[list[Atom]] | None:
        """Replace atoms to be removed by wanted atoms of equal size, in place (a ``Permute``).

        A wanted atom may still sit in another dimension's removable tail; that spot takes an
        atom displaced by the replacement instead (it is going to be removed anyway)."""
        new = [list(d) for d in self.dims]
        placed: set[Atom] = set()
        displaced: list[Atom] = []
        for i, d in enumerate(self.dims):
            k = self.prefix_length(i)
            while k < len(d) and k < len(self.wanted_dims[i]) and d[k].size == self.wanted_dims[i][k].size:
                if d[k] != self.wanted_dims[i][k]:
                    displaced.append(d[k])
                    placed.add(self.wanted_dims[i][k])
                new[i][k] = self.wanted_dims[i][k]
                k += 1
        if new == self.dims:
            return None
        fixed = set()
        for i, d in enumerate(new):
            for k in range(len(d)):
                if d[k] in placed and self.dims[i][k] == d[k] and k >= self.prefix_length(i):
                    # a removable spot still holding an atom that now sits where it is wanted: it
                    # takes a displaced atom of equal size, preferably one not placed elsewhere
                    held = {a for e in new for a in e}
                    fits = [a for a in displaced if a.size == d[k].size and a not in fixed]
                    swap = next((a for a in fits if a not in held), fits[0] if fits else None)
                    if swap is None:
                        return None
                    fixed.add(swap)
                    d[k] = swap
        flat = [a for d in new for a in d]
        if len(flat) != len(set(flat)) or set(flat) & self.unred:
            return None
        return new

