"""The space ``auto`` searches: "shard this group of input dimensions over this mesh axis".

Static analysis cuts the space before any candidate is costed:

- **Groups.** Dimensions that propagation shards alike (a weight's column, its optimizer moments,
  its updated copy, the bias it feeds...) are one choice. A group is found by *probing*: shard one
  input dimension over a mesh axis in an otherwise replicated program, propagate, and collect
  every input dimension that received the axis. Dimensions already inside an earlier group are not
  probed again, so the cost is one propagation per group, not per dimension. Probing uses the
  propagator itself, so whatever the rules tie (scan bodies included) is tied here too.
- **Representatives.** A group is named by its first member in input order, which puts
  parameters (the function's first argument) first: the schedule reads ``Shard(params/w1, ...)``.
- **Reach.** The probe also measures a group's *reach*: the bytes of every value of the program
  (inputs, activations, gradients, optimizer state, loop bodies included) that propagation gives
  the axis. Parameter bytes alone rank the batch and the sequence last (they shard almost no
  input), yet they shard most activations; reach ranks them with the heads, the MLP width and
  the model width, the dimensions that contract in the program's dots, and ranks a stacked layer
  dimension (sliced off by the loop, sharding only its own weight and optimizer state) last.
- **Order.** Actions are tried largest first: ``SearchSpace.ordered`` sorts them by the reach
  bytes the sharding removes from each device, so a budget-limited search meets the big
  decisions first.
- **Negligible groups.** A group whose reach is under ``1 / NEGLIGIBLE`` of the largest group's
  is offered no action (``SearchSpace.dropped``): it cannot change the step's time or peak by
  more than a few percent of what the main choices change.
- **Feasibility.** A group is offered over an axis only if the axis divides its representative
  dimension; at search time an action that raises, changes nothing, or only records conflicts
  without sharding any computed value is pruned (``State.apply``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from partir_core.ir import Program
from partir_core.propagate import Layout, Propagator, clashes
from partir_core.rules import Rule
from partir_core.tactics import Shard, Tactic, apply_schedule
from spmd_types import Axis, Mesh, ShardingTypeError, itemsize


@dataclass(frozen=True)
class Group:
    """Input dimensions propagation shards alike; ``path``/``dim`` is the representative."""

    path: str
    dim: int
    size: int
    members: tuple[tuple[str, int], ...]
    axes: tuple[str, ...]
    """Mesh axes that divide the representative dimension (those offered to the search)."""
    nbytes: int = 0
    """Bytes of the input tensors the group's dimensions belong to (each tensor once)."""
    reach: int = 0
    """Bytes of every program value propagation shards when the representative is sharded."""

    def __str__(self) -> str:
        more = len(self.members) - 1
        return f"{self.path}:{self.dim} (size {self.size}{f', +{more} tied' if more else ''})"


@dataclass(frozen=True)
class Action:
    """Shard group ``group`` (an index into ``SearchSpace.groups``) over mesh axis ``axis``."""

    group: int
    axis: str


@dataclass(frozen=True)
class SearchSpace:
    groups: tuple[Group, ...]
    actions: tuple[Action, ...]
    dropped: tuple[int, ...] = ()
    """Groups offered no action: their reach is negligible (see the module docstring)."""

    def tactic(self, a: Action) -> Shard:
        """The group's dimensions in its representative's argument, named explicitly (readable,
        and independent of how far propagation would carry the representative alone)."""
        g = self.groups[a.group]
        arg = g.path.split("/")[0]
        paths = [p for p, _ in g.members if p.split("/")[0] == arg]
        if len(set(paths)) < len(paths):  # a tensor tied to itself: its representative dim only
            return Shard(g.path, dim=g.dim, axis=a.axis)
        return Shard({p: d for p, d in g.members if p.split("/")[0] == arg}, axis=a.axis)

    def saved_bytes(self, a: Action, mesh: Mesh) -> float:
        """Static estimate of what ``a`` is worth: the reach bytes it removes from each device."""
        return self.groups[a.group].reach * (1.0 - 1.0 / mesh.axis_size(a.axis))

    def ordered(self, mesh: Mesh) -> tuple[Action, ...]:
        """The actions, largest ``saved_bytes`` first (stable: ties keep group order)."""
        return tuple(sorted(self.actions, key=lambda a: -self.saved_bytes(a, mesh)))

    def describe(self) -> str:
        lines = [f"{len(self.groups)} groups of input dimensions, {len(self.actions)} actions"]
        for i, g in enumerate(self.groups):
            over = "negligible reach, not offered" if i in self.dropped else f"over {' or '.join(g.axes)}"
            lines.append(f"  g{i}: {g}, reach {g.reach:,} B  {over}")
        return "\n".join(lines)


def clone(prop: Propagator) -> Propagator:
    """An independent copy of a propagator's state (layouts, pins, conflicts...), sharing the
    immutable program and rules: the search branches from a state without re-propagating."""
    new = copy.copy(prop)
    for k, v in vars(prop).items():
        if isinstance(v, (dict, set, list)):
            setattr(new, k, type(v)(v))
    return new


def _shardable(mesh: Mesh, size: int, layout_dim: tuple[Axis, ...], axis: str) -> bool:
    k = math.prod(mesh.axis_size(a) for a in layout_dim) * mesh.axis_size(axis)
    return size % k == 0


NEGLIGIBLE = 32
"""A group reaching under 1/NEGLIGIBLE of the largest group's bytes is offered no action."""


def build_space(program: Program, mesh: Mesh, rules: Sequence[Rule]) -> SearchSpace:
    """Probe every not-yet-grouped input dimension once (see the module docstring)."""
    axes = sorted(mesh.names, key=lambda a: (mesh.axis_size(a), a))
    covered: set[tuple[str, int]] = set()
    groups: list[Group] = []
    for path, v in zip(program.input_paths, program.inputs):
        for d, n in enumerate(v.shape):
            if (path, d) in covered:
                continue
            ok = tuple(a for a in axes if n % mesh.axis_size(a) == 0)
            if not ok:
                continue
            members, reach = _probe(program, mesh, rules, path, d, ok[0])
            covered.update(members)
            groups.append(Group(path, d, n, members, ok, _nbytes(program, members), reach))
    top = max((g.reach for g in groups), default=0)
    dropped = tuple(i for i, g in enumerate(groups) if g.reach * NEGLIGIBLE < top)
    actions = tuple(Action(i, a) for i, g in enumerate(groups) if i not in dropped for a in g.axes)
    return SearchSpace(tuple(groups), actions, dropped)


def _nbytes(program: Program, members: Sequence[tuple[str, int]]) -> int:
    by_path = dict(zip(program.input_paths, program.inputs))
    return sum(math.prod(by_path[p].shape) * itemsize(by_path[p].dtype)
               for p in dict.fromkeys(p for p, _ in members))


def _probe(program: Program, mesh: Mesh, rules: Sequence[Rule], path: str, dim: int,
           axis: str) -> tuple[tuple[tuple[str, int], ...], int]:
    """The input dimensions that take ``axis`` with ``path:dim``, and the group's reach."""
    prop = Propagator(program, mesh, rules)
    apply_schedule(program, mesh, prop, [Shard(path, dim=dim, axis=axis)])
    found = [(p, d) for p, v in zip(program.input_paths, program.inputs)
             for d, ax in enumerate(prop.layouts[v.id]) if axis in ax]
    reach = sum(math.prod(v.shape) * itemsize(v.dtype) for v in program.values()
                if any(axis in ax for ax in prop.layouts.get(v.id, ())))
    return (tuple(found) if (path, dim) in found else ((path, dim),) + tuple(found)), reach


class State:
    """A partial schedule and the propagator state it leads to (layouts of every value)."""

    def __init__(self, prop: Propagator, actions: tuple[Action, ...]) -> None:
        self.prop, self.actions = prop, actions
        ins = prop.program.inputs
        self.key: tuple[Layout, ...] = tuple(prop.layouts[v.id] for v in ins)

    def full_key(self) -> tuple[Any, ...]:
        """Everything lowering reads: the layout of every value (inputs alone can tie two states
        whose propagation order left different intermediate layouts)."""
        return tuple(sorted(self.prop.layouts.items()))

    def apply(self, space: SearchSpace, a: Action) -> State | None:
        """The state after ``a``, or None when ``a`` is pruned: it raises (indivisible, axis used
        twice, pinned), changes no input layout, or only adds conflicts (no computed value
        takes the axis, so the sharding would be gathered straight back)."""
        g = space.groups[a.group]
        v = self.prop.program.inputs[self.prop.program.input_paths.index(g.path)]
        lay = self.prop.layouts[v.id]
        if any(clashes(self.prop.mesh, [a.axis], ax) for ax in lay) or not _shardable(self.prop.mesh, g.size, lay[g.dim], a.axis):
            return None
        new = clone(self.prop)
        try:
            apply_schedule(new.program, new.mesh, new, [space.tactic(a)])
        except ShardingTypeError:
            return None
        st = State(new, self.actions + (a,))
        if st.key == self.key:
            return None
        input_ids = {x.id for x in new.program.inputs}
        computed = any(lay != self.prop.layouts.get(k) for k, lay in new.layouts.items() if k not in input_ids)
        if not computed and len(new.conflicts) > len(self.prop.conflicts):
            return None
        return st

    def schedule(self, space: SearchSpace) -> list[Tactic]:
        return [space.tactic(a) for a in self.actions]
