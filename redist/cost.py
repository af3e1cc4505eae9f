"""The alpha-beta cost model (docs/design.md section 4) with per-axis latency and bandwidth.

A collective over a group of ``p`` devices costs ``ceil(log2 p)`` latency terms (tree/recursive
latency, so one collective over a flattened group is never slower than the same one split per
axis) plus ``recv_bytes / bandwidth``, where the group's bandwidth and latency are those of its
slowest mesh axis (a ring crosses every link of the group). Meshes spanning hosts declare the
cross-host axes slow with ``CostModel.with_slow_axes``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

from redist.errors import CostModelError
from redist.objective import HOW, Objective, as_objective
from spmd_types import Axis, axis_name
from spmd_types.memo import HASH_KEY, cached_property, state_without_hash, store_hash
from spmd_types.mesh import spans_overlap


class Written(NamedTuple):
    """What a step copies as pieces narrower than a block's rows (``redist.measure.written``):
    the bytes of the new block written so, and the rows (contiguous runs) read and written so."""

    strided_bytes: float
    runs: float


NOTHING_WRITTEN = Written(0.0, 0.0)


class KindCost(NamedTuple):
    """A collective kind's measured cost: ``overhead + phases*ceil(log2 p)*latency + recv/bandwidth
    + strided_bytes*strided_s_per_byte + runs*run_s``."""

    overhead_s: float
    latency_s: float
    bandwidth_Bps: float
    strided_s_per_byte: float = 0.0
    """Seconds per byte of the new block written as pieces narrower than its rows
    (``redist.measure.written``): e.g. an all-to-all whose pieces join on a non-leading dimension
    adds a transposing pass (0: not measured, profiles of format 1)."""
    run_s: float = 0.0
    """Seconds per row of those pieces (read or written): at the same bytes, shorter rows cost more."""


class _Lookup(NamedTuple):
    """``CostModel``'s tables as dicts (``CostModel._lookup``)."""

    latency: dict[str, float]
    inv_bandwidth: dict[str, float]
    kind_factor: dict[str, float]
    kinds: dict[str, KindCost]
    cross_kinds: dict[str, KindCost]
    least_round: dict[str, tuple[float, float]]
    """``CostModel.least_round`` per kind, filled as asked."""
    cross_by_name: dict[str, tuple[Axis, ...]]
    """``cross_axes`` by the mesh axis they belong to (``crosses_any``)."""


@dataclass(frozen=True)
class CostModel:
    """Latency (s) and bandwidth (bytes/s) per collective, with per-axis overrides sorted by axis
    name (build it with ``make`` or ``with_slow_axes``), and the objective plans are ranked by.

    ``objective`` has no default: ``CostModel()`` raises ``CostModelError`` naming the three
    objectives, since a bare model would silently rank by bytes under unmeasured constants. The
    model ``redistribute`` uses for an objective is ``redist.cost_model_for(objective, mesh)``.

    Examples:
        >>> from redist import CostModel, redistribute
        >>> slow_x = CostModel.with_slow_axes(["x"], 10.0, base=CostModel(objective="alpha-beta"))
        >>> plan = redistribute("f32[1024@x,1024@y]", "f32[1024@y,1024@x]", "x=2,y=4", cost_model=slow_x)
        >>> plan.cost_model is slow_x
        True
        >>> CostModel()
        Traceback (most recent call last):
        redist.errors.CostModelError: CostModel() needs an objective: 'measured' ...

    Raises:
        CostModelError: no ``objective``, an unknown one, ``"measured"`` without measured
            ``kind_costs``, a non-positive bandwidth or factor, ``tie_tolerance`` outside [0, 1).
    """

    latency_s: float = 5e-6
    bandwidth_Bps: float = 50e9
    axis_latency_s: tuple[tuple[str, float], ...] = field(default=())
    axis_bandwidth_Bps: tuple[tuple[str, float], ...] = field(default=())
    objective: str = ""
    """A ``redist.Objective`` (stored as its string): ``"bytes"``: least received bytes, then least
    time (the synthesizer's contract: meet the transfer bound). ``"measured"`` (needs measured
    ``kind_costs``) and ``"alpha-beta"``: least estimated time, then bytes (for compilers, where a
    few latency-bound collectives on tiny arrays should not become many point-to-point rounds)."""
    kind_time_factor: tuple[tuple[str, float], ...] = field(default=())
    """Per step kind (``"reduce_scatter"``, ...), a factor on the estimated time of its collective:
    where a backend runs one kind worse than the alpha-beta model says (a calibrated profile)."""
    kind_costs: tuple[tuple[str, KindCost], ...] = field(default=())
    """Per step kind, measured (overhead, latency, bandwidth) from ``redist calibrate``; they replace
    the defaults above for that kind (slow axes still scale them by their ratio to the default)."""
    copy_Bps: float = 0.0
    """Local copy bandwidth (bytes/s): local passes (slices) cost ``bytes / copy_Bps``; 0: free."""
    cross_axes: tuple[Axis, ...] = field(default=())
    """Axes whose device groups span processes (``redist.profile.process_crossing_axes``; sub-axes
    where only some factors of an axis do): a step over any axis sharing a factor with one of them
    (``crosses``) costs its ``cross_kind_costs`` entry where one was measured."""
    cross_kind_costs: tuple[tuple[str, KindCost], ...] = field(default=())
    """Per step kind, (overhead, latency, bandwidth) measured over groups that span processes
    (``redist calibrate`` under ``jax.distributed``): another transport than ``kind_costs``'."""
    tie_tolerance: float = 0.0
    """Time objectives (``measured``, ``alpha-beta``) only: plans whose estimated time is within this fraction of the fastest
    candidate's are ties, ranked by fewest collective ops, then least bytes, then time
    (``redist.synth``). A measured profile sets it to its fit's typical error on its own samples
    (``Profile.fit_error``): inside that error the model cannot tell two plans apart, while every
    collective op is one more rendezvous of all devices, the term that varies most with load.
    ``0``: plain least time. The bytes objective ignores it (its transfer guarantee stands)."""

    def __post_init__(self) -> None:
        if not self.objective:
            raise CostModelError(f"CostModel() needs an objective: {HOW}")
        o = as_objective(self.objective, "CostModel objective")
        object.__setattr__(self, "objective", o.value)  # a plain str: equal models hash alike
        if o is Objective.MEASURED and not self.kind_costs and not self.cross_kind_costs:
            raise CostModelError("CostModel(objective='measured') needs measured kind_costs: use "
                                 "redist.cost_model_for('measured', mesh) (the backend's shipped profile) or "
                                 "redist.profile.load_cost_model(path) (a `redist calibrate` profile); "
                                 "objective='alpha-beta' ranks by time under the unmeasured constants")
        for kind, kc in (*self.kind_costs, *self.cross_kind_costs):
            if not (kc.bandwidth_Bps > 0 and kc.overhead_s >= 0 and kc.latency_s >= 0):
                raise CostModelError(f"kind_costs for {kind!r} need bandwidth > 0 and times >= 0, got {kc}")
        for kind, factor in self.kind_time_factor:
            if not factor > 0:
                raise CostModelError(f"kind_time_factor for {kind!r} must be > 0, got {factor}")
        if not 0 <= self.tie_tolerance < 1:
            raise CostModelError(f"tie_tolerance must be in [0, 1), got {self.tie_tolerance}")

    @property
    def time_first(self) -> bool:
        """Whether plans are ranked by time first (``measured`` and ``alpha-beta``), not bytes."""
        return self.objective != Objective.BYTES.value

    def order(self, recv_bytes: float, time_s: float) -> tuple[float, float]:
        """The comparison key of a plan's (bytes, time) under this objective."""
        r, t = round(recv_bytes, 6), round(time_s, 15)
        return (t, r) if self.time_first else (r, t)

    def key_time(self, key: tuple[float, float]) -> float:
        """The time of a key ``order`` made."""
        return key[0] if self.time_first else key[1]

    def tie_window(self, time_s: float) -> float:
        """The longest time still tied with a plan of ``time_s`` (``tie_tolerance``; the time
        objectives only)."""
        return time_s * (1 + self.tie_tolerance) if self.time_first else time_s

    @staticmethod
    def make(
        latency_s: float = 5e-6,
        bandwidth_Bps: float = 50e9,
        axis_latency_s: Mapping[str, float] | None = None,
        axis_bandwidth_Bps: Mapping[str, float] | None = None,
        objective: str = "",
        kind_time_factor: Mapping[str, float] | None = None,
    ) -> CostModel:
        """A cost model from measured numbers: defaults plus per-axis overrides given as mappings."""
        for name, v in {**(axis_latency_s or {}), **(axis_bandwidth_Bps or {})}.items():
            if v <= 0:
                raise ValueError(f"axis {name!r}: latency and bandwidth must be > 0, got {v}")
        return CostModel(
            latency_s, bandwidth_Bps,
            tuple(sorted((axis_latency_s or {}).items())),
            tuple(sorted((axis_bandwidth_Bps or {}).items())),
            objective,
            tuple(sorted((kind_time_factor or {}).items())),
        )

    @staticmethod
    def with_slow_axes(axes: Iterable[str], factor: float = 10.0, base: CostModel | None = None) -> CostModel:
        """Axes that cross hosts: ``factor`` times less bandwidth and more latency; everything else
        (objective, measured per-kind costs) is kept from ``base`` (default the bytes objective's
        ``CostModel(objective="bytes")``)."""
        b = base or DEFAULT_COST_MODEL
        axes = list(axes)
        slow = CostModel.make(
            b.latency_s, b.bandwidth_Bps,
            {a: b.latency_s * factor for a in axes}, {a: b.bandwidth_Bps / factor for a in axes},
            objective=Objective.BYTES,
        )
        return replace(b, axis_latency_s=slow.axis_latency_s, axis_bandwidth_Bps=slow.axis_bandwidth_Bps)

    def __hash__(self) -> int:
        """Cached: the model is part of most of the planner's memo keys, and hashing its nested tuples
        of floats each time showed in planning (docs/design.md 13.3, "Planning time")."""
        h = self.__dict__.get(HASH_KEY)
        return store_hash(self, tuple(getattr(self, f.name) for f in fields(self))) if h is None else h

    __getstate__ = state_without_hash

    @cached_property
    def _lookup(self) -> _Lookup:
        """The per-axis and per-kind tuples as dicts, built once per model: planning prices a step
        thousands of times a pair (docs/design.md 13.3, "Planning time"). Derived from the fields, so
        outside equality and hashing; a model made with ``replace`` builds its own, and a pickled one
        carries a copy of these."""
        return _Lookup(dict(self.axis_latency_s), {k: 1.0 / v for k, v in self.axis_bandwidth_Bps},
                       dict(self.kind_time_factor), dict(self.kind_costs), dict(self.cross_kind_costs), {},
                       _by_name(self.cross_axes))

    def latency(self, names: Iterable[Axis]) -> float:
        lat = self._lookup.latency
        return max((lat.get(axis_name(n), self.latency_s) for n in names), default=self.latency_s)

    def inv_bandwidth(self, names: Iterable[Axis]) -> float:
        inv, default = self._lookup.inv_bandwidth, 1.0 / self.bandwidth_Bps
        return max((inv.get(axis_name(n), default) for n in names), default=default)

    def collective_time(self, axes: Iterable[Axis], group: int, recv_bytes: float, phases: int = 1,
                        kind: str = "", written: Written = NOTHING_WRITTEN) -> float:
        """Time of a collective over ``group`` devices spanning ``axes`` (``phases=2`` for all-reduce)."""
        if group <= 1:
            return 0.0
        return self.kind_time(kind, set(axes), phases * math.ceil(math.log2(group)), recv_bytes, written=written)

    def kind_time(self, kind: str, names: Iterable[Axis], latency_terms: float, recv_bytes: float,
                  overhead: bool = True, written: Written = NOTHING_WRITTEN) -> float:
        """``latency_terms`` latencies plus ``recv_bytes`` of a ``kind`` step over axes ``names``
        (plus the kind's measured fixed overhead unless ``overhead=False``: later rounds of a step).
        ``kind`` may name an item size, ``"all_to_all:2"``: a backend may run 16-bit data at another
        speed (XLA:CPU widens it to f32 around collectives); without a measurement for it the
        plain kind is used. ``written``: what the step writes as pieces narrower than the new
        block's rows (priced by a measured kind's ``strided_s_per_byte`` and ``run_s``; the
        unmeasured model has no such term)."""
        names = set(names)
        lat, inv_bw = self.latency(names), self.inv_bandwidth(names)
        measured = self.measured_kind(kind, names)
        if measured is None:
            t = latency_terms * lat + recv_bytes * inv_bw
            return t * self._kind_factor(kind)
        slow_lat, slow_bw = lat / self.latency_s, inv_bw * self.bandwidth_Bps
        t = (measured.overhead_s + latency_terms * measured.latency_s) * slow_lat + \
            recv_bytes / measured.bandwidth_Bps * slow_bw
        if not written.runs:
            return t
        return t + written.strided_bytes * measured.strided_s_per_byte + written.runs * measured.run_s

    def measured_kind(self, kind: str, names: Iterable[Axis] = ()) -> KindCost | None:
        """The measured cost of ``kind`` (or its plain kind) over axes ``names``: the cross-process
        measurement where a name is in ``cross_axes``, else the in-process one; either where the
        other was not measured (a kind timed only across processes is no cheaper inside one)."""
        tables = [self._lookup.kinds, self._lookup.cross_kinds]
        if self.crosses_any(names):
            tables.reverse()
        return next((m for m in (_entry(t, kind) for t in tables) if m is not None), None)

    def crosses_any(self, names: Iterable[Axis]) -> bool:
        """``crosses(self.cross_axes, names)``, each name checked against the crossing axes of its
        own mesh axis only: a step is priced thousands of times a pair, and the pairwise test showed in
        planning on large meshes (docs/design.md 13.3, "Planning time")."""
        return _crosses_by_name(self._lookup.cross_by_name, names)

    def least_round(self, kind: str) -> tuple[float, float]:
        """The least latency and inverse bandwidth one latency term of a ``kind`` step can cost in
        ``kind_time``, over any axes: a measured kind's figures (in or across processes, the
        lower), else the fastest link's times the kind's factor. Planning floors price rounds so:
        floors at the links' figures under a measured profile pruned almost nothing (docs/design.md
        6.2). Memoised per model and kind (``_lookup``)."""
        least = self._lookup.least_round
        if kind not in least:
            least[kind] = self._least_round(kind)
        return least[kind]

    def _least_round(self, kind: str) -> tuple[float, float]:
        lat = min([self.latency_s, *(v for _, v in self.axis_latency_s)])
        inv_bw = 1.0 / max([self.bandwidth_Bps, *(v for _, v in self.axis_bandwidth_Bps)])
        found = [m for m in (_entry(t, kind) for t in (self._lookup.kinds, self._lookup.cross_kinds)) if m is not None]
        if not found:
            factor = self._kind_factor(kind)
            return lat * factor, inv_bw * factor
        slow_lat, slow_bw = lat / self.latency_s, inv_bw * self.bandwidth_Bps
        return (min(m.latency_s for m in found) * slow_lat, min(1.0 / m.bandwidth_Bps for m in found) * slow_bw)

    def _kind_factor(self, kind: str) -> float:
        """``kind_time_factor`` of ``kind``'s plain kind (``"exchange:2"`` -> ``"exchange"``), else 1."""
        return self._lookup.kind_factor.get(kind.split(":")[0], 1.0)

    def copy_time(self, nbytes: float) -> float:
        """A local pass writing ``nbytes`` (0 without a measured copy bandwidth)."""
        return nbytes / self.copy_Bps if self.copy_Bps > 0 else 0.0

    @property
    def measured(self) -> bool:
        return bool(self.kind_costs)

    def with_objective(self, objective: Objective | str) -> CostModel:
        return replace(self, objective=objective)


DEFAULT_COST_MODEL = CostModel(objective=Objective.BYTES)
"""The bytes objective under the alpha-beta constants: what a ``Plan`` built by hand is measured by."""


def _entry(costs: dict[str, KindCost], kind: str) -> KindCost | None:
    """``kind``'s entry of a per-kind table, or its plain kind's (``"all_to_all:2"`` -> ``"all_to_all"``)."""
    return costs.get(kind, costs.get(kind.split(":")[0]))


def crosses(crossing: Iterable[Axis], axes: Iterable[Axis]) -> bool:
    """Whether a step over ``axes`` spans processes: one of them shares a factor with a crossing
    axis. A whole axis shares all of its factors; two sub-axes of one axis share one where their
    stride ranges ``[pre, pre * size)`` meet (on 4 processes of 2 devices, ``y:(2)2`` of a 4-device
    axis ``y`` stays inside processes while ``y:(1)2`` crosses them)."""
    return _crosses_by_name(_by_name(crossing), axes)


def _crosses_by_name(crossing: Mapping[str, tuple[Axis, ...]], axes: Iterable[Axis]) -> bool:
    """``crosses``, with the crossing axes grouped by mesh axis (``_by_name``): only axes of one
    mesh axis can share a factor."""
    return any(_share_factor(c, a) for a in axes for c in crossing.get(axis_name(a), ()))


def _by_name(axes: Iterable[Axis]) -> dict[str, tuple[Axis, ...]]:
    out: dict[str, tuple[Axis, ...]] = {}
    for a in axes:
        out[axis_name(a)] = (*out.get(axis_name(a), ()), a)
    return out


def _share_factor(a: Axis, b: Axis) -> bool:
    """Whether ``a`` and ``b`` are overlapping factors of one mesh axis (a whole axis overlaps each
    of its factors; ``spmd_types.mesh.spans_overlap`` decides between two sub-axes)."""
    if axis_name(a) != axis_name(b):
        return False
    if isinstance(a, str) or isinstance(b, str):
        return True
    return spans_overlap(a.pre, a.size, b.pre, b.size)


def sized_kind(kind: str, itemsize: int) -> str:
    """The profile key of ``kind`` on data of ``itemsize`` bytes (4-byte data is the plain kind)."""
    return kind if itemsize == 4 else f"{kind}:{itemsize}"
