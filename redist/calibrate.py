"""Timing each kind of step on the running backend, for a measured cost profile (``redist.profile``).

Every sample is one single-step plan compiled by our own executor (so the timed program is
exactly what plans run, local passes included), timed interleaved against an empty program on
the same input; the sample is the difference of the medians. Typed collectives are timed over
groups of 2, 4 and 8 devices (as many as exist) and several sizes; permutes and exchanges on
2-axis meshes, where their rounds vary. The local copy bandwidth comes from a reversal (one pass).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from redist.cost import CostModel, sized_kind
from redist.executor import compile_plan
from redist.measure import closed_form
from redist.plan import Plan
from redist.profile import Profile, Sample, fit_profile
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Comm,
    Exchange,
    ReduceScatter,
    Step,
)
from redist.synth import synthesize
from spmd_types import Mesh, ShardingType, parse
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import to_partition_spec

SIZES_KIB = (64, 512, 2048)
"""Per-device local block sizes timed for every kind."""


def _median_diff(fn: Callable[[Any], Any], base: Callable[[Any], Any], x: Any, reps: int) -> float:
    """Time ``fn(x)`` adds over ``base(x)``, interleaved (A B B A ...)."""
    ta: list[float] = []
    tb: list[float] = []
    for f in (fn, base):
        f(x).block_until_ready()
    for i in range(reps):
        for f, acc in ((fn, ta), (base, tb)) if i % 2 == 0 else ((base, tb), (fn, ta)):
            t = time.perf_counter()
            f(x).block_until_ready()
            acc.append(time.perf_counter() - t)
    # the median of adjacent-pair differences: robust to a loaded machine's slow phases
    return max(statistics.median(a - b for a, b in zip(ta, tb)), 0.0)


def _input(t: ShardingType) -> jax.Array:
    """Ones laid out as ``t`` (also unreduced: every device's partial is its block of ones)."""
    jm = t.mesh.to_jax()
    ones = jnp.ones(t.local_shape, numpy_dtype(t.dtype))  # type: ignore[arg-type]
    shards = [jax.device_put(ones, d) for d in jm.devices.reshape(-1)]
    return jax.make_array_from_single_device_arrays(t.shape, NamedSharding(jm, to_partition_spec(t)), shards)


class _Empty:
    """The baseline: an empty program on a tiny array of the same mesh (the fixed dispatch cost).
    Not the identity on ``x`` itself: XLA copies an un-donated input into the output, a full pass
    that a collective, which writes its own output, does not add on top."""

    def __init__(self, t: ShardingType) -> None:
        tiny = parse(f"f32[{t.mesh.size}@({','.join(t.mesh.names)})]", t.mesh)
        spec = to_partition_spec(tiny)
        self.x = _input(tiny)
        self.fn = jax.jit(jax.shard_map(lambda v: v + 1, mesh=t.mesh.to_jax(), in_specs=spec, out_specs=spec,
                                        check_vma=False))

    def __call__(self, _: Any) -> Any:
        return self.fn(self.x)


def _empty(t: ShardingType) -> Callable[[Any], Any]:
    return _Empty(t)


def _terms(plan: Plan) -> tuple[float, float]:
    """(latency terms, bytes) of a single-step plan, as ``redist.measure`` charges them."""
    step, before, after = plan.steps[0], plan.src, plan.dst
    m = plan.measures[0]
    if step.comm is Comm.POINT_TO_POINT:
        return float(m.rounds), float(m.rounds * closed_form(before, after).cell * before.itemsize)
    return float(m.rounds), m.recv_bytes  # a ring collective's rounds: phases * ceil(log2 p)


def _typed(n: int) -> Iterator[Plan]:
    """Single typed collectives over groups of 2, 4, 8 (of ``n`` devices) and ``SIZES_KIB``."""
    for p in (g for g in (2, 4, 8) if n % g == 0 and g <= n):
        mesh = Mesh({"a": p, "b": n // p}) if n > p else Mesh({"a": p})
        for kib in SIZES_KIB:
            rows, cols = 8 * p, kib * 1024 // (4 * 8)  # local block [8, cols] after any split
            plain = parse(f"f32[{rows}@a,{cols}]", mesh)
            part = parse(f"f32[{rows // p},{cols}]{{U:a}}", mesh)
            yield Plan.build(plain, (AllGather(0, ("a",)),))
            yield Plan.build(plain, (AllToAll(0, 1, ("a",)),))
            yield Plan.build(part, (ReduceScatter(0, ("a",)),))
            yield Plan.build(part, (AllReduceSlice(0, ("a",)),))
            yield Plan.build(part, (AllReduce(("a",)),))
            half = parse(f"bf16[{rows}@a,{cols}]", mesh)  # 16-bit data, the same number of elements
            yield Plan.build(half, (AllGather(0, ("a",)),))
            yield Plan.build(half, (AllToAll(0, 1, ("a",)),))
            yield Plan.build(parse(f"bf16[{rows // p},{cols}]{{U:a}}", mesh), (ReduceScatter(0, ("a",)),))
            yield Plan.build(parse(f"bf16[{rows // p},{cols}]{{U:a}}", mesh), (AllReduceSlice(0, ("a",)),))
            yield Plan.build(parse(f"bf16[{rows // p},{cols}]{{U:a}}", mesh), (AllReduce(("a",)),))


def _p2p(n: int) -> Iterator[Plan]:
    """Permutes and exchanges: (a, b) -> (b, a) orders and 2-D transposes on 2-axis meshes."""
    bytes_cm = CostModel(objective="bytes")
    for a, b in ((2, n // 2), (n // 2, 2)):
        if a * b != n or min(a, b) < 2:
            continue
        mesh = Mesh({"a": a, "b": b})
        for kib in SIZES_KIB:
            cols = kib * 1024 // (4 * 8)
            for src, dst in ((f"f32[{8 * n}@(a,b),{cols}]", f"f32[{8 * n}@(b,a),{cols}]"),
                             (f"f32[{8 * n}@a,{cols * b}@b]", f"f32[{8 * n}@b,{cols * b}@a]")):
                plan = synthesize(parse(src, mesh), parse(dst, mesh), bytes_cm)
                if len(plan.steps) == 1 and plan.steps[0].comm is Comm.POINT_TO_POINT:
                    yield plan
    yield from _exchanges(n)


def _exchanges(n: int) -> Iterator[Plan]:
    """Exchanges doing an all-to-all's move (``g - 1`` rounds over a group of ``g``): the rounds
    and sizes at which the planner weighs them against typed collectives."""
    for g in (g for g in (2, 4, 8) if n % g == 0):
        mesh = Mesh({"a": g, "b": n // g}) if n > g else Mesh({"a": g})
        for kib in SIZES_KIB:
            cols = kib * 1024 // 32
            for dtype in ("f32", "bf16"):
                src, dst = parse(f"{dtype}[{8 * g}@a,{cols}]", mesh), parse(f"{dtype}[{8 * g},{cols}@a]", mesh)
                yield Plan.build(src, (Exchange(dst.dims, None),))


def sample(plan: Plan, reps: int) -> Sample:
    x = _input(plan.src)
    secs = _median_diff(compile_plan(plan), _empty(plan.src), x, reps)
    terms, recv = _terms(plan)
    return Sample(sized_kind(plan.steps[0].kind, plan.src.itemsize), terms, recv, secs)


def copy_bandwidth(n: int, reps: int) -> float:
    """Bytes per second of one local pass (an elementwise scaling of the local block)."""
    mesh = Mesh({"a": n})
    rates = []
    for kib in SIZES_KIB:
        t = parse(f"f32[{8 * n},{kib * 1024 // 32}@a]", mesh)
        spec = to_partition_spec(t)
        fn = jax.jit(jax.shard_map(lambda v: v * 2, mesh=mesh.to_jax(), in_specs=spec, out_specs=spec,
                                   check_vma=False))
        secs = _median_diff(fn, _empty(t), _input(t), reps)
        rates.append(t.local_bytes / secs if secs > 0 else math.inf)
    return float(statistics.median(rates))


def calibrate(reps: int = 30, kinds: Sequence[str] | None = None,
              progress: Callable[[str], None] | None = None) -> Profile:
    """Time every kind on the running backend's devices and fit a profile."""
    n = len(jax.devices())
    if n < 2:
        raise ValueError(f"calibration needs at least 2 devices, the backend has {n}")
    samples = []
    for plan in (*_typed(n), *_p2p(n)):
        step: Step = plan.steps[0]
        if kinds and sized_kind(step.kind, plan.src.itemsize) not in kinds:
            continue
        s = sample(plan, reps)
        samples.append(s)
        if progress:
            progress(f"{step.kind:18s} {plan.src} -> {plan.dst}: {s.seconds * 1e6:9.1f} us")
    dev = jax.devices()[0]
    return fit_profile(jax.default_backend(), str(dev.device_kind), samples, copy_bandwidth(n, reps))


__all__ = ["SIZES_KIB", "calibrate", "copy_bandwidth", "sample"]
