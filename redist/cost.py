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
from dataclasses import dataclass, field

from spmd_types import Axis, axis_name


@dataclass(frozen=True)
class CostModel:
    """Latency (s) and bandwidth (bytes/s) per collective, with per-axis overrides sorted by axis
    name (build it with ``make`` or ``with_slow_axes``), and the objective plans are ranked by."""

    latency_s: float = 5e-6
    bandwidth_Bps: float = 50e9
    axis_latency_s: tuple[tuple[str, float], ...] = field(default=())
    axis_bandwidth_Bps: tuple[tuple[str, float], ...] = field(default=())
    objective: str = "bytes"
    """``"bytes"``: least received bytes, then least time (the synthesizer's contract: meet the
    transfer bound). ``"time"``: least estimated time, then bytes (for compilers, where a few
    latency-bound collectives on tiny arrays should not become many point-to-point rounds)."""
    kind_time_factor: tuple[tuple[str, float], ...] = field(default=())
    """Per step kind (``"reduce_scatter"``, ...), a factor on the estimated time of its collective:
    where a backend runs one kind worse than the alpha-beta model says (a calibrated profile)."""

    def __post_init__(self) -> None:
        if self.objective not in ("bytes", "time"):
            raise ValueError(f"objective must be 'bytes' or 'time', got {self.objective!r}")
        for kind, factor in self.kind_time_factor:
            if not factor > 0:
                raise ValueError(f"kind_time_factor for {kind!r} must be > 0, got {factor}")

    def order(self, recv_bytes: float, time_s: float) -> tuple[float, float]:
        """The comparison key of a plan's (bytes, time) under this objective."""
        r, t = round(recv_bytes, 6), round(time_s, 15)
        return (r, t) if self.objective == "bytes" else (t, r)

    @staticmethod
    def make(
        latency_s: float = 5e-6,
        bandwidth_Bps: float = 50e9,
        axis_latency_s: Mapping[str, float] | None = None,
        axis_bandwidth_Bps: Mapping[str, float] | None = None,
        objective: str = "bytes",
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
        """Axes that cross hosts: ``factor`` times less bandwidth and more latency."""
        b = base or CostModel()
        axes = list(axes)
        return CostModel.make(
            b.latency_s, b.bandwidth_Bps,
            {a: b.latency_s * factor for a in axes}, {a: b.bandwidth_Bps / factor for a in axes},
        )

    def latency(self, names: Iterable[str]) -> float:
        lat = dict(self.axis_latency_s)
        return max((lat.get(n, self.latency_s) for n in names), default=self.latency_s)

    def inv_bandwidth(self, names: Iterable[str]) -> float:
        bw = dict(self.axis_bandwidth_Bps)
        return max((1.0 / bw.get(n, self.bandwidth_Bps) for n in names), default=1.0 / self.bandwidth_Bps)

    def collective_time(self, axes: Iterable[Axis], group: int, recv_bytes: float, phases: int = 1,
                        kind: str = "") -> float:
        """Time of a collective over ``group`` devices spanning ``axes`` (``phases=2`` for all-reduce)."""
        if group <= 1:
            return 0.0
        names = {axis_name(a) for a in axes}
        t = phases * math.ceil(math.log2(group)) * self.latency(names) + recv_bytes * self.inv_bandwidth(names)
        return t * self.kind_factor(kind)

    def kind_factor(self, kind: str) -> float:
        """The calibrated factor on the estimated time of steps of ``kind`` (1 by default)."""
        return dict(self.kind_time_factor).get(kind, 1.0)


DEFAULT_COST_MODEL = CostModel()
