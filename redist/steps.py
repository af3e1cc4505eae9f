"""The steps of a plan and their typing rules (docs/design.md section 3).

Each step acts on all devices at once (SPMD). ``step.apply(t)`` returns the type after the step or
raises ``StepError`` naming what is wrong; rules compare prime sub-axes (``redist.atoms``), so
"the minor-most axes of a dimension" also works when they are a part of one mesh axis. A step over
several axes is one collective over the flattened group (major-to-minor order of ``axes``).

Typing is the one facet that lives on the class; every other facet (measure, simulate, lower,
fuse, search, z3 semantics...) is a ``redist.facets.FacetTable`` in the layer that owns it.
``ALL_STEPS`` is the list every table must cover, and ``KINDS`` derives from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from redist.atoms import Atom, atoms_of_axes, dims_atoms, from_atoms, unreduced_atoms
from redist.errors import StepError
from redist.facets import FacetTable
from spmd_types import Axis, Mesh, ShardingType, ShardingTypeError
from spmd_types.memo import Scope, memo
from spmd_types.mesh import format_axis, spans_overlap


class Comm(Enum):
    """How a step communicates: decides how its collectives are counted (``redist.measure``).

    Example:

    ```pycon
    >>> import redist
    >>> redist.DynSlice.comm, redist.AllGather.comm, redist.Exchange.comm
    (<Comm.LOCAL: 'local'>, <Comm.COLLECTIVE: 'collective'>, <Comm.POINT_TO_POINT: 'point_to_point'>)

    ```
    """

    LOCAL = "local"
    """No communication (slices, zero-padding)."""
    COLLECTIVE = "collective"
    """One typed collective over a flattened group of devices."""
    POINT_TO_POINT = "point_to_point"
    """A schedule of ``ppermute`` rounds (``redist.exchange``): one collective per round."""


def _fmt(axes: tuple[Axis, ...]) -> str:
    return ",".join(format_axis(a) for a in axes)


def _check_dim(step: Step, t: ShardingType, dim: int) -> None:
    if not 0 <= dim < t.rank:
        raise StepError(f"{step}: dimension {dim} out of range for rank-{t.rank} type {t}")


def _suffix(step: Step, t: ShardingType, dim: int, axes: tuple[Axis, ...]) -> tuple[Atom, ...]:
    """The dim's atoms without the minor-most ``axes``; raises if they are not its minor-most axes."""
    _check_dim(step, t, dim)
    have = dims_atoms(t)[dim]
    want = atoms_of_axes(t.mesh, axes)
    if not want or len(want) > len(have) or have[len(have) - len(want):] != want:
        raise StepError(
            f"{step}: axes ({_fmt(axes)}) are not the minor-most axes of dimension {dim} of {t}"
        )
    return have[: len(have) - len(want)]


def _unused(step: Step, t: ShardingType, axes: tuple[Axis, ...]) -> tuple[Atom, ...]:
    want = atoms_of_axes(t.mesh, axes)
    used = {x for d in dims_atoms(t) for x in d} | unreduced_atoms(t)
    names = {x.name for x in used}
    for x in want:
        # An atom is in use if it or any overlapping factor of its axis is used.
        if x in used or (x.name in names and any(spans_overlap(x.pre, x.size, u.pre, u.size)
                                                 for u in used if u.name == x.name)):
            raise StepError(f"{step}: axis {_fmt(axes)} is already used in {t}")
    return want


def _build(step: Step, t: ShardingType, dims: tuple[tuple[Atom, ...], ...], unred: frozenset[Atom]) -> ShardingType:
    try:
        return from_atoms(t, dims, unred)
    except ShardingTypeError as e:
        raise StepError(f"{step} on {t}: {e}") from None


@dataclass(frozen=True)
class Step:
    """Base class; subclasses set ``kind`` and ``comm`` and implement ``apply``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> plan = redist.redistribute("f32[64@x,64]", "f32[64,64@x]", mesh)
    >>> all(isinstance(s, redist.Step) for s in plan.steps)
    True
    >>> [s.kind for s in redist.ALL_STEPS][:3]
    ['dynamic_slice', 'all_gather', 'all_to_all']

    ```

    ``apply(t)`` raises ``StepError`` for a type the step does not fit.
    """

    kind: ClassVar[str] = "step"
    comm: ClassVar[Comm] = Comm.COLLECTIVE

    @property
    def is_collective(self) -> bool:
        """Whether the step communicates at all."""
        return self.comm is not Comm.LOCAL

    def apply(self, t: ShardingType) -> ShardingType:  # pragma: no cover - abstract
        raise NotImplementedError

    def group_axes(self) -> tuple[Axis, ...]:
        """Mesh (sub-)axes the step communicates over (empty for local steps)."""
        return getattr(self, "axes", ())


@dataclass(frozen=True)
class DynSlice(Step):
    """Local slice: each device keeps the block of ``dim`` given by its coordinates on ``axes``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.DynSlice(1, ("x",)).apply(parse("f32[8@y,8]", mesh)))
    f32[8@y,8@x]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    dim: int
    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "dynamic_slice"
    comm: ClassVar[Comm] = Comm.LOCAL

    def apply(self, t: ShardingType) -> ShardingType:
        _check_dim(self, t, self.dim)
        new = _unused(self, t, self.axes)
        dims = list(dims_atoms(t))
        dims[self.dim] = dims[self.dim] + new
        return _build(self, t, tuple(dims), unreduced_atoms(t))

    def __str__(self) -> str:
        return f"dynamic_slice(dim={self.dim}, axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class AllGather(Step):
    """Gather the minor-most ``axes`` of ``dim`` (tiled): the dimension gets ``|axes|`` times longer.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.AllGather(0, ("x",)).apply(parse("f32[8@x,8@y]", mesh)))
    f32[8,8@y]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    dim: int
    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "all_gather"

    def apply(self, t: ShardingType) -> ShardingType:
        rest = _suffix(self, t, self.dim, self.axes)
        dims = list(dims_atoms(t))
        dims[self.dim] = rest
        return _build(self, t, tuple(dims), unreduced_atoms(t))

    def __str__(self) -> str:
        return f"all_gather(dim={self.dim}, axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class AllToAll(Step):
    """Move the minor-most ``axes`` of ``src_dim`` to the minor side of ``dst_dim``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.AllToAll(0, 1, ("x",)).apply(parse("f32[8@x,8]", mesh)))
    f32[8,8@x]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    src_dim: int
    dst_dim: int
    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "all_to_all"

    def apply(self, t: ShardingType) -> ShardingType:
        if self.src_dim == self.dst_dim:
            raise StepError(f"{self}: source and destination dimension must differ")
        _check_dim(self, t, self.dst_dim)
        rest = _suffix(self, t, self.src_dim, self.axes)
        moved = atoms_of_axes(t.mesh, self.axes)
        dims = list(dims_atoms(t))
        dims[self.src_dim] = rest
        dims[self.dst_dim] = dims[self.dst_dim] + moved
        return _build(self, t, tuple(dims), unreduced_atoms(t))

    def __str__(self) -> str:
        return f"all_to_all(dim {self.src_dim} -> {self.dst_dim}, axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class MultiAllToAll(Step):
    """Several all-to-all moves at once: ONE all-to-all over the flattened group of all their axes.

    Each move takes the minor-most ``axes`` of its ``src_dim`` to the minor side of its
    ``dst_dim``, all read off the type before the step. Source dimensions are distinct,
    destination dimensions are distinct and no dimension is both, and the moves' axes are disjoint. Why a step of its own: XLA moves two dimensions
    in one all-to-all over the whole group (``rank4_move_two_axes``), where two ``AllToAll`` steps
    pay two launches and move ``(p1-1)/p1 + (p2-1)/p2`` of the block instead of ``(p-1)/p``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> moves = (redist.AllToAll(0, 2, ("x",)), redist.AllToAll(1, 3, ("y",)))
    >>> print(redist.MultiAllToAll(moves).apply(parse("f32[8@x,8@y,8,8]", mesh)))
    f32[8,8,8@x,8@y]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    moves: tuple[AllToAll, ...]
    kind: ClassVar[str] = "multi_all_to_all"

    def apply(self, t: ShardingType) -> ShardingType:
        self._check_moves()
        dims = list(dims_atoms(t))
        moved = []
        for m in self.moves:
            _check_dim(self, t, m.dst_dim)
            dims[m.src_dim] = _suffix(m, t, m.src_dim, m.axes)
            moved.append(atoms_of_axes(t.mesh, m.axes))
        flat = [x for ms in moved for x in ms]
        if len(flat) != len(set(flat)):
            raise StepError(f"{self}: the moves' axes overlap")
        for m, atoms in zip(self.moves, moved):
            dims[m.dst_dim] = dims[m.dst_dim] + atoms
        return _build(self, t, tuple(dims), unreduced_atoms(t))

    def _check_moves(self) -> None:
        srcs, dsts = [m.src_dim for m in self.moves], [m.dst_dim for m in self.moves]
        if len(self.moves) < 2:
            raise StepError(f"{self}: needs at least two moves (one move is an AllToAll)")
        if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
            raise StepError(f"{self}: source dimensions and destination dimensions must each be distinct")
        if set(srcs) & set(dsts):
            # A dimension that both receives and sends would need, on each device, pieces from
            # only some members (a swap of two dimensions' axes): not one uniform all-to-all.
            raise StepError(f"{self}: a dimension cannot be both a source and a destination of the moves")

    def group_axes(self) -> tuple[Axis, ...]:
        return tuple(a for m in self.moves for a in m.axes)

    def __str__(self) -> str:
        parts = ", ".join(f"{m.src_dim} -> {m.dst_dim} ({_fmt(m.axes)})" for m in self.moves)
        return f"all_to_all(dims {parts})"


def _need_unreduced(step: Step, t: ShardingType, axes: tuple[Axis, ...]) -> tuple[Atom, ...]:
    want = atoms_of_axes(t.mesh, axes)
    have = unreduced_atoms(t)
    missing = [x for x in want if x not in have]
    if not want or missing:
        raise StepError(f"{step}: axes ({_fmt(axes)}) are not unreduced in {t}")
    return want


@dataclass(frozen=True)
class ReduceScatter(Step):
    """Sum over unreduced ``axes`` and keep this device's block: they become minor shard axes of ``dim``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.ReduceScatter(0, ("y",)).apply(parse("f32[8,8]{U:y}", mesh)))
    f32[8@y,8]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    dim: int
    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "reduce_scatter"

    def apply(self, t: ShardingType) -> ShardingType:
        _check_dim(self, t, self.dim)
        want = _need_unreduced(self, t, self.axes)
        dims = list(dims_atoms(t))
        dims[self.dim] = dims[self.dim] + want
        return _build(self, t, tuple(dims), unreduced_atoms(t) - set(want))

    def __str__(self) -> str:
        return f"reduce_scatter(dim={self.dim}, axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class AllReduceSlice(ReduceScatter):
    """``ReduceScatter``'s typing, run as an all-reduce followed by a local slice.

    Twice the traffic of a reduce-scatter in the ring model, so the bytes objective never picks
    it; backends that run reduce-scatter as all-reduce + slice anyway (XLA:CPU), or whose
    reduce-scatter on an inner dimension adds layout copies, can make it the faster choice under
    a calibrated cost model. The synthesizer offers it as a variant of ``ReduceScatter``.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.AllReduceSlice(0, ("y",)).apply(parse("f32[8,8]{U:y}", mesh)))
    f32[8@y,8]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    kind: ClassVar[str] = "all_reduce_slice"

    def __str__(self) -> str:
        return f"all_reduce_slice(dim={self.dim}, axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class AllReduce(Step):
    """Sum over unreduced ``axes``; the result is replicated over them.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.AllReduce(("y",)).apply(parse("f32[8,8]{U:y}", mesh)))
    f32[8,8]

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "all_reduce"

    def apply(self, t: ShardingType) -> ShardingType:
        want = _need_unreduced(self, t, self.axes)
        return _build(self, t, dims_atoms(t), unreduced_atoms(t) - set(want))

    def __str__(self) -> str:
        return f"all_reduce(axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class Discard(Step):
    """Replicated -> unreduced over ``axes``: coordinate 0 keeps its copy, the others hold zeros.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.Discard(("y",)).apply(parse("f32[8,8]", mesh)))
    f32[8,8]{U:y}

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "discard"
    comm: ClassVar[Comm] = Comm.LOCAL

    def apply(self, t: ShardingType) -> ShardingType:
        new = _unused(self, t, self.axes)
        return _build(self, t, dims_atoms(t), unreduced_atoms(t) | set(new))

    def __str__(self) -> str:
        return f"discard(axes=({_fmt(self.axes)}))"


@dataclass(frozen=True)
class PadUnreduced(Step):
    """Sharded -> unreduced: each device places its block in zeros of the unsharded size (no traffic).

    The sum over ``axes`` of the padded blocks is the unsharded value, which is exactly the
    unreduced type's meaning; it replaces a gather when the destination wants a pending sum.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.PadUnreduced(0, ("y",)).apply(parse("f32[8@y,8]", mesh)))
    f32[8,8]{U:y}

    ```

    :raises StepError: from ``apply``, for a type the step does not fit, naming the step and the type.
    """

    dim: int
    axes: tuple[Axis, ...]
    kind: ClassVar[str] = "pad_unreduced"
    comm: ClassVar[Comm] = Comm.LOCAL

    def apply(self, t: ShardingType) -> ShardingType:
        rest = _suffix(self, t, self.dim, self.axes)
        dims = list(dims_atoms(t))
        dims[self.dim] = rest
        return _build(self, t, tuple(dims), unreduced_atoms(t) | set(atoms_of_axes(t.mesh, self.axes)))

    def __str__(self) -> str:
        return f"pad_unreduced(dim={self.dim}, axes=({_fmt(self.axes)}))"


def _target(step: Permute | Exchange, t: ShardingType) -> ShardingType:
    unreduced = getattr(step, "unreduced", None)
    u = t.unreduced if unreduced is None else frozenset(unreduced)
    try:
        return _validated(t.shape, t.dtype, step.dims, t.mesh, u)
    except ShardingTypeError as e:
        raise StepError(f"{step} on {t}: {e}") from None


@memo(Scope.TYPE, maxsize=8192)
def _validated(shape: tuple, dtype: str, dims: tuple, mesh: Mesh, unreduced: frozenset) -> ShardingType:  # type: ignore[type-arg]
    """The planner asks for the same destination type many times per plan: validate it once."""
    return ShardingType(shape, dtype, dims, mesh, unreduced)


@dataclass(frozen=True)
class Permute(Step):
    """Collective permute of whole local blocks to a type with the same local shape.

    Every block of the new type is a block of the old one (same grid), so each device receives
    at most one block from one peer: a single ``ppermute`` round.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 2})
    >>> print(redist.Permute((("y",), ("x",))).apply(parse("f32[8@x,8@y]", mesh)))
    f32[8@y,8@x]

    ```

    :raises StepError: from ``apply``, where the new type's local shape differs from the old one's.
    """

    dims: tuple[tuple[Axis, ...], ...]
    kind: ClassVar[str] = "permute"
    comm: ClassVar[Comm] = Comm.POINT_TO_POINT

    def apply(self, t: ShardingType) -> ShardingType:
        out = _target(self, t)
        if out.local_shape != t.local_shape:
            raise StepError(
                f"{self}: a permute keeps the local shape, but {t} has {list(t.local_shape)} "
                f"and {out} has {list(out.local_shape)}"
            )
        return out

    def group_axes(self) -> tuple[Axis, ...]:
        return ()

    def __str__(self) -> str:
        return "permute(-> [" + ",".join("(" + _fmt(a) + ")" for a in self.dims) + "])"


@dataclass(frozen=True)
class Exchange(Step):
    """Any type to any type, by point-to-point rounds (``redist.exchange``).

    Each device receives exactly the cells of its new block that it lacks (one per missing
    partial where unreduced axes are summed), one cell per ``ppermute`` round. Axes that become
    unreduced need data on only one device of each group (the others hold zeros), so an exchange
    with nothing to receive is a free local re-layout.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.Exchange((("y",), ("x",))).apply(parse("f32[8@x,8@y]", mesh)))
    f32[8@y,8@x]
    >>> print(redist.Exchange(((), ("x",)), ("y",)).apply(parse("f32[8@x,8]", mesh)))
    f32[8,8@x]{U:y}

    ```

    :raises StepError: from ``apply``, where the new type is not valid on the mesh.
    """

    dims: tuple[tuple[Axis, ...], ...]
    unreduced: tuple[Axis, ...] | None = None
    kind: ClassVar[str] = "exchange"
    comm: ClassVar[Comm] = Comm.POINT_TO_POINT

    def apply(self, t: ShardingType) -> ShardingType:
        return _target(self, t)

    def group_axes(self) -> tuple[Axis, ...]:
        return ()

    def __str__(self) -> str:
        u = "" if not self.unreduced else " {U:" + _fmt(self.unreduced) + "}"
        return "exchange(-> [" + ",".join("(" + _fmt(a) + ")" for a in self.dims) + "]" + u + ")"


@dataclass(frozen=True)
class ExchangeAllToAll(Exchange):
    """``Exchange``'s typing and values, run as one all-to-all over the mesh axes its messages
    cross (``redist.exchange_a2a``) instead of rounds of ``ppermute``.

    Each device sends every group member the same number of cell slots; slots a pair does not
    use are padding and count as received bytes, so only a regular exchange (every pair moving
    the same number of cells, e.g. an all-to-all's move) meets the transfer bound. The
    synthesizer offers it as a variant of ``Exchange``, chosen where the cost model prices it
    faster. Refused (``StepError``) when the exchange forwards completed sums or its slot buffers
    would exceed the memory bound. Its ``comm`` stays point-to-point: the cells, hence the values
    and their proofs, are the schedule's; ``redist.measure`` counts it as one collective.

    Example:

    ```pycon
    >>> from spmd_types import Mesh, parse
    >>> import redist
    >>> mesh = Mesh({"x": 2, "y": 4})
    >>> print(redist.ExchangeAllToAll(((), ("x",))).apply(parse("f32[64@x,64]", mesh)))
    f32[64,64@x]

    ```

    :raises StepError: from ``apply``, where the exchange forwards sums or its slots exceed the memory bound.
    """

    kind: ClassVar[str] = "exchange_all_to_all"

    def apply(self, t: ShardingType) -> ShardingType:
        out = _target(self, t)
        ADMIT[type(self)](self, t, out)
        return out

    def __str__(self) -> str:
        return "exchange_all_to_all" + super().__str__()[len("exchange"):]


ALL_STEPS: tuple[type[Step], ...] = (
    DynSlice, AllGather, AllToAll, MultiAllToAll, ReduceScatter, AllReduceSlice, AllReduce, Discard, PadUnreduced,
    Permute, Exchange, ExchangeAllToAll,
)
"""Every step class: each facet table has an entry for each (``tests/test_architecture.py``)."""

KINDS: tuple[str, ...] = tuple(cls.kind for cls in ALL_STEPS)

Admit = Callable[[Any, ShardingType, ShardingType], None]
ADMIT: FacetTable[Admit] = FacetTable("admission", "redist.steps.ADMIT")
"""What a step checks beyond its typing rule before ``apply`` returns ``after`` (raising
``StepError``): nothing for most steps; an ``ExchangeAllToAll`` must fit one all-to-all, decided by
its slots (``redist.exchange_a2a``) and registered from above by ``redist.exchange_facets``, which
prices them, so this vocabulary imports no scheduler. ``ExchangeAllToAll.apply`` reads it."""


@ADMIT.register(*(c for c in ALL_STEPS if c is not ExchangeAllToAll))
def _typing_suffices(step: Step, before: ShardingType, after: ShardingType) -> None:
    """The typing rule is the whole check."""
