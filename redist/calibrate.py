"""Timing each kind of step on the running backend, for a measured cost profile (``redist.profile``).

Every sample is one single-step plan compiled by our own executor (so the timed program is
exactly what plans run, local passes included), each call paired with an empty program; the
sample is the median of the pairs' differences. All samples of one block size are timed
together, round-robin (``samples``), so a load phase of a shared machine hits every kind alike. Typed collectives are timed over
groups of 2, 4 and 8 devices (as many as exist) and several sizes; permutes and exchanges on
2-axis meshes, where their rounds vary. The local copy bandwidth comes from a reversal (one pass).

Under ``jax.distributed`` (several processes, e.g. CPU collectives over Gloo) every process runs
the same samples in the same order (each collective needs all of them), and each group is timed
twice: as the major mesh axis (spanning processes) and as the minor one (inside a process where
it fits). Samples are marked by whether their axes span processes, and the profile gets a fit per
kind for each class (``Profile.kinds`` in-process, ``Profile.cross_kinds`` across). A call's time
is by default its span, from the last process's start to the last one's end, as
``benchmarks.multiprocess`` times the plans it compares (``CLOCKS``); process 0 writes the file
(``redist_cli.cmd_calibrate``). Why the span: process 0's own clock misranked plans across
processes (docs/design.md section 11)."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from redist.coordination import CLOCKS, barrier, gather_spans
from redist.cost import CostModel, KindCost, crosses
from redist.errors import CalibrationError, StepError
from redist.exchange import closed_form
from redist.executor import compile_plan
from redist.measure import profile_kind, written
from redist.plan import Plan
from redist.profile import Profile, Sample, fit_kind, kind_cost, process_crossing_axes, regressors
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Comm,
    Exchange,
    ExchangeAllToAll,
    ReduceScatter,
    Step,
)
from redist.synth import synthesize
from redist.timing import balanced_order
from spmd_types import Axis, Mesh, ShardingType, parse
from spmd_types.dtypes import numpy_dtype
from spmd_types.jax_interop import to_partition_spec

SIZES_KIB = (4, 64, 512, 2048)
"""Per-device local block sizes timed for every kind: no sample moves a larger block. Why: larger
blocks ran superlinearly and pulled the fitted all-to-all bandwidth down, overpricing the 2 MiB
all-to-alls the planner weighs against exchanges (docs/design.md 4.2)."""


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


def _input(t: ShardingType, jm: jax.sharding.Mesh | None = None) -> jax.Array:
    """Ones laid out as ``t`` (also unreduced: every device's partial is its block of ones); under
    ``jax.distributed`` each process supplies the blocks of its own devices."""
    jm = t.mesh.to_jax() if jm is None else jm
    ones = jnp.ones(t.local_shape, numpy_dtype(t.dtype))  # type: ignore[arg-type]
    shards = [jax.device_put(ones, d) for d in jm.devices.reshape(-1) if d.process_index == jax.process_index()]
    return jax.make_array_from_single_device_arrays(t.shape, NamedSharding(jm, to_partition_spec(t)), shards)


class _Empty:
    """The baseline: an empty program on a tiny array of the same mesh (the fixed dispatch cost).
    Not the identity on ``x`` itself: XLA copies an un-donated input into the output, a full pass
    that a collective, which writes its own output, does not add on top."""

    def __init__(self, t: ShardingType, jm: jax.sharding.Mesh | None = None) -> None:
        tiny = parse(f"f32[{t.mesh.size}@({','.join(t.mesh.names)})]", t.mesh)
        spec = to_partition_spec(tiny)
        jm = t.mesh.to_jax() if jm is None else jm
        self.x = _input(tiny, jm)
        self.fn = jax.jit(jax.shard_map(lambda v: v + 1, mesh=jm, in_specs=spec, out_specs=spec,
                                        check_vma=False))

    def __call__(self, _: Any) -> Any:
        return self.fn(self.x)


def _empty(t: ShardingType, jm: jax.sharding.Mesh | None = None) -> Callable[[Any], Any]:
    return _Empty(t, jm)


def _terms(plan: Plan) -> tuple[float, float]:
    """(latency terms, bytes) of a single-step plan, as ``redist.measure`` charges them."""
    step, before, after = plan.steps[0], plan.src, plan.dst
    m = plan.measures[0]
    if step.comm is Comm.POINT_TO_POINT:
        return float(m.rounds), float(m.rounds * closed_form(before, after).cell * before.itemsize)
    return float(m.rounds), m.recv_bytes  # a ring collective's rounds: phases * ceil(log2 p)


def _meshes(n: int, g: int, local: int) -> Iterator[Mesh]:
    """Meshes of ``n`` devices whose axis ``a`` groups ``g`` of them: ``a`` major (spanning
    processes when there are several), and where ``g`` fits in a process's ``local`` devices and
    that differs, ``a`` minor (inside one process)."""
    yield Mesh({"a": g, "b": n // g}) if n > g else Mesh({"a": g})
    if local < n and g <= local:
        yield Mesh({"b": n // g, "a": g})


def _typed(n: int, local: int, sizes_kib: Sequence[int] = SIZES_KIB) -> Iterator[Plan]:
    """Single typed collectives over groups of 2, 4, 8 (of ``n`` devices, ``local`` per process)
    and ``sizes_kib``."""
    for p in (g for g in (2, 4, 8) if n % g == 0 and g <= n):
        yield from (plan for mesh in _meshes(n, p, local) for plan in _typed_on(mesh, p, sizes_kib))


def _typed_on(mesh: Mesh, p: int, sizes_kib: Sequence[int]) -> Iterator[Plan]:
    """Every typed kind over axis ``a`` (size ``p``) of ``mesh``, f32 and bf16."""
    for kib in sizes_kib:
        rows, cols = 8 * p, kib * 1024 // (4 * 8)  # local block [8, cols] after any split
        for dtype in ("f32", "bf16"):  # 16-bit data: the same number of elements
            plain = parse(f"{dtype}[{rows}@a,{cols}]", mesh)
            part = parse(f"{dtype}[{rows // p},{cols}]{{U:a}}", mesh)
            yield Plan.build(plain, (AllGather(0, ("a",)),))
            yield Plan.build(plain, (AllToAll(0, 1, ("a",)),))
            if dtype == "f32":  # the same bytes received as short rows (``redist.measure.written``)
                for row, n in _short_rows(kib, p, MOVE_SHORT_ROWS):  # written so, and read so: blocks of ``kib``
                    yield Plan.build(parse(f"f32[{n},{row * p}@a]", mesh), (AllToAll(1, 0, ("a",)),))
                    yield Plan.build(parse(f"f32[{n}@a,{row * p}]", mesh), (AllToAll(0, 1, ("a",)),))
            yield Plan.build(part, (ReduceScatter(0, ("a",)),))
            yield Plan.build(part, (AllReduceSlice(0, ("a",)),))
            yield Plan.build(part, (AllReduce(("a",)),))
            if dtype == "f32":  # on dimension 1: its copy in rows (``redist.measure.written``)
                for row, n in _short_rows(kib, p):
                    yield Plan.build(parse(f"f32[{n},{row * p}@a]", mesh), (AllGather(1, ("a",)),))
                    yield Plan.build(parse(f"f32[{n},{row * p}]{{U:a}}", mesh), (ReduceScatter(1, ("a",)),))


def _p2p(n: int, local: int, sizes_kib: Sequence[int] = SIZES_KIB) -> Iterator[Plan]:
    """Permutes and exchanges: (a, b) -> (b, a) orders and 2-D transposes on 2-axis meshes."""
    bytes_cm = CostModel(objective="bytes")
    for a, b in ((2, n // 2), (n // 2, 2)):
        if a * b != n or min(a, b) < 2:
            continue
        mesh = Mesh({"a": a, "b": b})
        for kib in sizes_kib:
            cols = kib * 1024 // (4 * 8)
            for src, dst in ((f"f32[{8 * n}@(a,b),{cols}]", f"f32[{8 * n}@(b,a),{cols}]"),
                             (f"f32[{8 * n}@a,{cols * b}@b]", f"f32[{8 * n}@b,{cols * b}@a]")):
                plan = synthesize(parse(src, mesh), parse(dst, mesh), bytes_cm)
                if len(plan.steps) == 1 and plan.steps[0].comm is Comm.POINT_TO_POINT:
                    yield plan
    yield from _exchanges(n, local, sizes_kib)


def _exchanges(n: int, local: int, sizes_kib: Sequence[int] = SIZES_KIB) -> Iterator[Plan]:
    """Exchanges doing an all-to-all's move (``g - 1`` rounds over a group of ``g``): the rounds
    and sizes at which the planner weighs them against typed collectives."""
    for g in (g for g in (2, 4, 8) if n % g == 0):
        for mesh in _meshes(n, g, local):
            for kib in sizes_kib:
                cols = kib * 1024 // 32
                for dtype in ("f32", "bf16"):
                    src, dst = parse(f"{dtype}[{8 * g}@a,{cols}]", mesh), parse(f"{dtype}[{8 * g},{cols}@a]", mesh)
                    yield Plan.build(src, (Exchange(dst.dims, None),))
                yield from _short_row_exchanges(mesh, g, kib)
                yield from _box_cell_moves(mesh, g, kib)
                yield from _summing_exchanges(mesh, g, cols)


SHORT_ROWS = (64, 1024)
"""Row lengths (f32 elements: 256 B, 4 KiB) of the short-row samples: with whole rows they
separate a kind's per-byte cost of short-row writes from its per-row cost (``KindCost``)."""

MOVE_SHORT_ROWS = (8, *SHORT_ROWS)
"""The all-to-all and exchange samples' row lengths, 32 B rows too (``redist.measure.
SHORTEST_CELL_ROW_BYTES``): moves of rank-3 and rank-4 blocks split on their last dimension land
cells as rows of 16-32 B, which longer samples misprice (docs/design.md 4.2)."""


def _short_rows(kib: int, g: int, lengths: Sequence[int] = SHORT_ROWS) -> Iterator[tuple[int, int]]:
    """(row length, rows) of ``kib`` KiB f32 blocks with ``lengths`` columns whose rows split
    over ``g`` devices into at least 2 each."""
    for row in lengths:
        rows = kib * 1024 // (4 * row)
        if rows % g == 0 and rows >= 2 * g:
            yield row, rows


def _short_row_exchanges(mesh: Mesh, g: int, kib: int) -> Iterator[Plan]:
    """Exchanges doing an all-to-all's move whose cells land as ``rows / g`` short rows each
    (``[rows, row@a]`` -> ``[rows@a, row]``) and the reverse (cells read so), for the fit of
    ``KindCost.strided_s_per_byte`` and ``run_s``."""
    for row, rows in _short_rows(kib, g, MOVE_SHORT_ROWS):
        short, tall = f"f32[{rows},{row * g}@a]", f"f32[{rows}@a,{row * g}]"
        for src, dst in ((short, tall), (tall, short)):  # written so, and read so
            yield Plan.build(parse(src, mesh), (Exchange(parse(dst, mesh).dims, None),))


def _box_cell_moves(mesh: Mesh, g: int, kib: int) -> Iterator[Plan]:
    """An attention layout change, ``[4, 4g@a, r, 64] -> [4, 4g, r@a, 64]`` (heads to sequence),
    as one all-to-all and as an exchange: cells are boxes narrower than the block in two
    dimensions (4 runs of ``r/g * 256`` B per cell), where the samples above land rank-2 pieces.
    Why: rank-2 samples misprice such moves (docs/design.md 4.2)."""
    r = kib * 1024 // (4 * 4 * 4 * 64)
    if r % g or r < 2 * g:
        return
    src, dst = parse(f"f32[4,{4 * g}@a,{r},64]", mesh), parse(f"f32[4,{4 * g},{r}@a,64]", mesh)
    yield Plan.build(src, (AllToAll(1, 2, ("a",)),))
    yield Plan.build(src, (Exchange(dst.dims, None),))


def _summing_exchanges(mesh: Mesh, g: int, cols: int) -> Iterator[Plan]:
    """16-bit exchanges that add partial sums, in rounds and as one all-to-all: they run in the
    dtype (XLA:CPU widens it), unlike 16-bit moves (bit patterns), so they need keys of their own
    (``exchange:2``, ``all_to_all:2``; ``redist.measure.moved_kind``)."""
    src, dst = parse(f"bf16[{8 * g},{cols}]{{U:a}}", mesh), parse(f"bf16[{8 * g}@a,{cols}]", mesh)
    for step in (Exchange(dst.dims, ()), ExchangeAllToAll(dst.dims, ())):
        try:
            yield Plan.build(src, (step,))
        except StepError:  # a layout the all-to-all form refuses: the rounds still calibrate
            continue


def _own_key(plan: Plan) -> bool:
    """Whether a plan's data type has a profile key of its own: 16-bit data only where the step
    adds in it (``redist.measure.profile_kind``; moves run on bit patterns, the plain kind)."""
    return plan.src.itemsize == 4 or ":" in profile_kind(plan.steps[0], plan.src)


def _crosses(plan: Plan, crossing: Sequence[Axis]) -> bool:
    """Whether the step's axes (those either layout names, as ``redist.measure`` charges them)
    include one whose groups span processes (``redist.cost.crosses``)."""
    return crosses(crossing, {a for t in (plan.src, plan.dst) for axes in (*t.dims, t.unreduced) for a in axes})


def sample(plan: Plan, reps: int) -> Sample:
    """One plan's sample, timed on its own against the empty program."""
    return samples([plan], reps)[0]


def samples(plans: Sequence[Plan], reps: int, warmup: int = 1, clock: str = "span") -> list[Sample]:
    """The plans' samples, timed together: ``reps`` rounds, each calling every plan once (in
    ``redist.timing.balanced_order``), each call paired with the empty program right after it; a sample
    is the median of its pairs' differences. Why together: on a shared machine the load changes
    over seconds, and kinds timed one after another were misranked (docs/design.md 4.4). Every
    process runs the same calls in the same order; ``clock`` (``redist.coordination.CLOCKS``) says
    whose time a call takes: the span, as ``benchmarks.multiprocess`` times the plans it compares, or
    process 0's own."""
    if clock not in CLOCKS:
        raise CalibrationError(f"clock {clock!r} is not one of {CLOCKS}; pass one of them")
    empties: dict[Mesh, Callable[[Any], Any]] = {}  # one baseline per mesh
    for plan in plans:
        if plan.src.mesh not in empties:
            empties[plan.src.mesh] = _empty(plan.src)
    progs = [(compile_plan(plan), empties[plan.src.mesh], _input(plan.src)) for plan in plans]
    for _ in range(warmup):
        for fn, base, x in progs:
            _call(fn, x)
            _call(base, x)
    calls: list[tuple[list[tuple[float, float]], list[tuple[float, float]]]] = [([], []) for _ in plans]
    for r in range(reps):
        for i in balanced_order(range(len(progs)), r):
            fn, base, x = progs[i]
            calls[i][0].append(_call(fn, x))
            calls[i][1].append(_call(base, x))
    out = []
    for plan, (ours, empty) in zip(plans, calls):
        d = [a - b for a, b in zip(_seconds(ours, clock), _seconds(empty, clock))]
        out.append(_sample(plan, max(statistics.median(d), 0.0)))
    return out


def _call(fn: Callable[[Any], Any], x: Any) -> tuple[float, float]:
    """(start, end) of one call on CLOCK_MONOTONIC (shared by the processes of one host)."""
    _align()
    t = time.clock_gettime(time.CLOCK_MONOTONIC)
    fn(x).block_until_ready()
    return t, time.clock_gettime(time.CLOCK_MONOTONIC)


_GATHERS = itertools.count()


def _seconds(calls: Sequence[tuple[float, float]], clock: str) -> list[float]:
    """Each call's seconds under ``clock``: the spans gather every process's times, so every
    process must ask for them in the same order."""
    if clock == "span" and jax.process_count() > 1:
        return gather_spans(f"calibrate-spans-{next(_GATHERS)}", [s for s, _ in calls], [e for _, e in calls])
    return [e - s for s, e in calls]


_BARRIERS = itertools.count()


def _align() -> None:
    """Across processes, all of them start the call together (``redist.coordination.barrier``):
    without it a process's time also counts the wait for a peer still finishing its previous call
    (docs/design.md 13.3; ``benchmarks.multiprocess.Timer`` measures the same way)."""
    if jax.process_count() > 1:
        barrier(f"calibrate-{next(_BARRIERS)}")


def _sample(plan: Plan, secs: float) -> Sample:
    terms, recv = _terms(plan)
    cross = jax.process_count() > 1 and _crosses(plan, process_crossing_axes(plan.src.mesh))
    w = written(plan.steps[0], plan.src, plan.dst)
    return Sample(profile_kind(plan.steps[0], plan.src), terms, recv, secs, cross, w.strided_bytes, w.runs)


def size_classes(plans: Sequence[Plan]) -> list[list[Plan]]:
    """Plans grouped by local block size (elements), smallest first: each group is timed together
    (plans the planner weighs against each other move blocks of one size; one group's inputs at
    a time keep memory bounded)."""
    groups: dict[int, list[Plan]] = {}
    for plan in plans:
        groups.setdefault(max(plan.src.local_size, plan.dst.local_size), []).append(plan)
    return [groups[k] for k in sorted(groups)]


def copy_bandwidth(n: int, reps: int, sizes_kib: Sequence[int] = SIZES_KIB) -> float:
    """Bytes per second of one local pass (an elementwise scaling of the local block), on this
    process's own ``n`` devices (no collective: processes need not keep step)."""
    mesh = Mesh({"a": n})
    jm = mesh.to_jax(jax.local_devices()[:n])
    rates = []
    for kib in sizes_kib:
        t = parse(f"f32[{8 * n},{kib * 1024 // 32}@a]", mesh)
        spec = to_partition_spec(t)
        fn = jax.jit(jax.shard_map(lambda v: v * 2, mesh=jm, in_specs=spec, out_specs=spec, check_vma=False))
        secs = _median_diff(fn, _empty(t, jm), _input(t, jm), reps)
        rates.append(t.local_bytes / secs if secs > 0 else math.inf)
    return float(statistics.median(rates))


def calibrate(reps: int = 30, kinds: Sequence[str] | None = None,
              progress: Callable[[str], None] | None = None,
              sizes_kib: Sequence[int] = SIZES_KIB, clock: str = "span") -> Profile:
    """Time every kind (or those in ``kinds``, profile keys such as ``"all_to_all:2"``) on the
    running backend's devices, all processes' under ``jax.distributed`` (``clock``: ``CLOCKS``),
    and fit a profile."""
    n = jax.device_count()
    local = jax.local_device_count()
    if n < 2:
        raise CalibrationError(f"calibration needs at least 2 devices, the backend has {n}; on CPU, set "
                               "XLA_FLAGS=--xla_force_host_platform_device_count=8 before importing jax")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise CalibrationError(f"calibrate: reps={reps!r} is not a count of timed runs; give an integer >= 1")
    if not sizes_kib or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in sizes_kib):
        raise CalibrationError(f"calibrate: sizes_kib={list(sizes_kib)!r}: give block sizes as integers >= 1 (KiB)")
    own = [plan for plan in (*_typed(n, local, sizes_kib), *_p2p(n, local, sizes_kib)) if _own_key(plan)]
    known = {profile_kind(plan.steps[0], plan.src) for plan in own}
    unknown = sorted(set(kinds or ()) - known)
    if unknown:
        raise CalibrationError(f"calibrate: kinds {unknown} are not profile keys timed on {n} devices; "
                               f"known: {', '.join(sorted(known))}")
    chosen = [plan for plan in own if not kinds or profile_kind(plan.steps[0], plan.src) in kinds]
    timed: list[Sample] = []
    for group in size_classes(chosen):
        for plan, s in zip(group, samples(group, reps, clock=clock)):
            timed.append(s)
            if progress:
                where = " across processes" if s.cross else ""
                step: Step = plan.steps[0]
                progress(f"{step.kind:18s} {plan.src} -> {plan.dst}{where}: {s.seconds * 1e6:9.1f} us")
    return _fit(timed, copy_bandwidth(local, reps, sizes_kib))


def _fit(samples: Sequence[Sample], copy_Bps: float) -> Profile:
    """Per kind, one fit in-process and one across processes (where any sample crossed)."""
    dev = jax.devices()[0]

    def fits(group: Sequence[Sample]) -> tuple[tuple[str, KindCost], ...]:
        return tuple((k, robust_fit([s for s in group if s.kind == k])) for k in sorted({s.kind for s in group}))

    return Profile(jax.default_backend(), str(dev.device_kind), fits([s for s in samples if not s.cross]),
                   copy_Bps, tuple(samples), fits([s for s in samples if s.cross]))


def refit(profiles: Sequence[Profile]) -> Profile:
    """One profile fitted from the samples of several runs on the same backend (a loaded machine's
    runs disagree; their union, stalls dropped, is steadier than any one); copy bandwidth the median."""
    if not profiles or len({(p.backend, p.device_kind) for p in profiles}) != 1:
        raise CalibrationError(f"refit needs profiles of one backend, got {[(p.backend, p.device_kind) for p in profiles]}; "
                               "refit each backend's profiles apart")
    samples = [s for p in profiles for s in p.samples]
    return _fit(samples, float(statistics.median(p.copy_Bps for p in profiles)))


OUTLIER = 3.0
"""A sample this many times slower than one of the same kind that moves at least as many bytes in
as many rounds is a stall (of the machine, or of a socket), not the kind's cost (docs/design.md
section 11)."""


def robust_fit(samples: Sequence[Sample]) -> KindCost:
    """``log_fit`` of the samples that are not stalls (``OUTLIER``): even a relative-error fit bends
    for a stall (docs/design.md section 11)."""
    kept = [s for s in samples if not any(
        o.latency_terms == s.latency_terms and o.recv_bytes >= s.recv_bytes and s.seconds > OUTLIER * o.seconds
        for o in samples)]
    return log_fit(kept if len(kept) >= 3 else samples)


def log_fit(samples: Sequence[Sample], iterations: int = 60) -> KindCost:
    """Least squares of ``log seconds`` over ``(overhead, latency, 1 / bandwidth) >= 0``: projected
    Gauss-Newton steps from ``fit_kind``'s relative-error fit, halved until they help. Why log:
    relative error is lopsided (over-predicting a fast sample costs without bound, under-predicting
    a slow one at most 1), so slow samples were fitted far too fast (docs/design.md section 11)."""
    x = regressors(samples)
    logy = np.log(np.maximum([s.seconds for s in samples], 1e-7))
    kc = fit_kind(samples)
    c = np.array([kc.overhead_s, kc.latency_s, 1.0 / kc.bandwidth_Bps, kc.strided_s_per_byte, kc.run_s])
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)  # columns of similar size for lstsq

    def loss(c: np.ndarray) -> float:
        return float(((np.log(np.maximum(x @ c, 1e-9)) - logy) ** 2).sum())

    for _ in range(iterations):
        p = np.maximum(x @ c, 1e-9)
        step, *_ = np.linalg.lstsq(x / scale / p[:, None], logy - np.log(p), rcond=None)
        step, t = step / scale, 1.0
        while t > 1e-4 and loss(np.maximum(c + t * step, 0.0)) >= loss(c):
            t /= 2
        if t <= 1e-4:
            break
        c = np.maximum(c + t * step, 0.0)
    return kind_cost(c)


__all__ = ["CLOCKS", "SIZES_KIB", "calibrate", "copy_bandwidth", "refit", "robust_fit", "sample", "samples", "size_classes"]
