"""The measured cost profile ``auto`` scores schedules with: what a lowered program costs on a
machine, as a linear model of the simulator's quantities, fitted to clocks.

The simulator counts what a partitioned step does (per-device FLOPs, each collective with its
bytes and rounds); a profile prices it:

    time = overhead + dot_flops / dot_rate + other_flops / other_rate
           + sum over collectives of repeat * (rounds * latency[kind] + wire_bytes / bandwidth)

(``wire_bytes``: the bytes as the backend's collectives carry them; XLA:CPU runs bf16 ones in f32.)

Why these terms: matmuls and elementwise ops run at very different rates on a CPU (an
elementwise op is memory-bound), and a collective between simulated devices costs mostly its
launch, so one FLOP rate and one latency (the first ``auto``) ranked schedules with many small
collectives (ZeRO over eight devices) above Megatron, against the clock. ``fit`` finds the
coefficients by non-negative least squares on measured schedules (``python -m benchmarks.auto
--calibrate``); ``CPU8`` is that fit for this project's CI machine (2 cores, 8 simulated devices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from partir_core.decide import Lowered
from partir_core.simulate import Simulation, op_flops

KINDS: dict[str, str] = {"all_reduce": "all_reduce", "all_reduce_slice": "all_reduce",
                         "all_gather": "gather_scatter", "reduce_scatter": "gather_scatter",
                         "all_to_all": "all_to_all", "exchange_all_to_all": "all_to_all", "permute": "permute", "exchange": "permute"}
"""Collective kinds priced alike (a kind's latency is one coefficient of the fit)."""
KIND_ORDER: tuple[str, ...] = ("all_reduce", "gather_scatter", "all_to_all", "permute")


class Features(NamedTuple):
    """What the profile prices, read from one lowering and its simulation."""

    dot_flops: float
    other_flops: float
    rounds: tuple[float, ...]
    """Collective rounds executed, per kind in ``KIND_ORDER``."""
    recv_bytes: float
    """Bytes received per device as the backend moves them (``Simulation.wire_bytes``)."""

    def vector(self) -> list[float]:
        """The regressors of ``fit``, in the order of ``CostProfile.coefficients``."""
        return [1.0, self.dot_flops, self.other_flops, *self.rounds, self.recv_bytes]


def dot_flops(low: Lowered) -> float:
    """Per-device matmul FLOPs, a loop body's times its trip count (as ``simulate`` counts)."""
    total = 0.0
    for st in low.steps:
        if st.op.name == "dot_general":
            total += op_flops(st)
        trips = int(st.op.params["length"]) if st.op.name == "scan" else 1
        total += sum(dot_flops(b) for b in st.bodies) * trips
    return total


def features(low: Lowered, sim: Simulation) -> Features:
    dots = dot_flops(low)
    rounds = dict.fromkeys(KIND_ORDER, 0.0)
    for c in sim.collectives:
        rounds[KINDS.get(c.kind, "permute")] += c.rounds * c.repeat
    return Features(dots, max(0.0, sim.flops - dots), tuple(rounds[k] for k in KIND_ORDER), sim.wire_bytes)


@dataclass(frozen=True)
class CostProfile:
    """Seconds per unit of each feature (see the module docstring); all non-negative."""

    overhead_s: float
    s_per_dot_flop: float
    s_per_other_flop: float
    latency_s: tuple[float, ...]
    """Per round, per kind in ``KIND_ORDER``."""
    s_per_byte: float

    def __post_init__(self) -> None:
        if min(self.coefficients()) < 0 or len(self.latency_s) != len(KIND_ORDER):
            raise ValueError(f"a cost profile needs {len(KIND_ORDER)} latencies and no negative "
                             f"coefficient, got {self}")

    def coefficients(self) -> list[float]:
        return [self.overhead_s, self.s_per_dot_flop, self.s_per_other_flop, *self.latency_s, self.s_per_byte]

    def compute_s(self, f: Features) -> float:
        return self.overhead_s + f.dot_flops * self.s_per_dot_flop + f.other_flops * self.s_per_other_flop

    def comm_s(self, f: Features) -> float:
        return sum(r * lat for r, lat in zip(f.rounds, self.latency_s)) + f.recv_bytes * self.s_per_byte

    def time_s(self, f: Features) -> float:
        return self.compute_s(f) + self.comm_s(f)


def fit(samples: Sequence[tuple[Features, float]]) -> CostProfile:
    """Non-negative least squares of measured seconds on features, relative error weighted (a
    fast schedule's 10% matters as much as a slow one's). Active set: refit without the
    coefficients that come out negative until none does."""
    x = np.array([f.vector() for f, _ in samples], dtype=float)
    y = np.array([t for _, t in samples], dtype=float)
    w = 1.0 / y
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
    xs = x / scale * w[:, None]
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(xs[:, active], y * w, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0.0
            coef[active] = sol
            break
        active = [a for a, s in zip(active, sol) if s >= 0]
    c = (coef / scale).tolist()
    n = len(KIND_ORDER)
    return CostProfile(c[0], c[1], c[2], tuple(c[3:3 + n]), c[3 + n])


def legacy(flops_per_s: float, sim: Simulation) -> float:
    """The first ``auto``'s time: one FLOP rate plus the partitioner cost model's communication."""
    return sim.flops / flops_per_s + sim.comm_time_s


CPU8 = CostProfile(overhead_s=0.0, s_per_dot_flop=1.1131532968894993e-10, s_per_other_flop=1.966284523084028e-09,
                   latency_s=(4.806294761608877e-05, 0.00020960652877584715, 0.0005480820957319796, 0.0),
                   s_per_byte=1.5435336925299e-09)
"""Fitted by ``python -m benchmarks.auto --calibrate --models mlp transformer gpt --random 10 --runs 9``
on 53 schedules (hand strategies and random ones); the samples and the score's rank correlation
with the clock, before and after the fit: benchmarks/results/auto_calibration.md."""


def predict_s(low: Lowered, sim: Simulation, profile: CostProfile = CPU8) -> float:
    """A partitioned step's predicted seconds: local work by the profile's calibrated compute
    rates (matmul FLOPs, elementwise work) plus every collective priced by the backend's measured
    profile (``Simulation.measured_comm_s``: per-kind overhead and bandwidth from
    ``redist calibrate``), rather than one FLOP rate and the planning model's latencies."""
    return profile.compute_s(features(low, sim)) + sim.measured_comm_s
