"""A simulator of the partitioned program: per-device FLOPs, collectives, peak memory, no running.

It reads the lowering's decisions, so each predicted collective is a step of a ``redist`` plan the
emitted program executes; costs (bytes, time) are the plans' own measures, from one cost model.
Peak memory is the largest sum of live local buffers over the program order (a buffer lives from
the step producing it to its last reader; inputs from the start, outputs to the end); a loop or
branch adds its body's own peak while it runs.

Each collective carries two times: ``time_s`` under the partitioner's planning model (what the
lowering minimised) and ``measured_s``, the same step priced by the measured profile of the
running backend (``redist.profile.default_cost_model``: per-kind overhead and bandwidth fitted
to clocks), which is what a predicted step time adds to its compute term
(``auto_profile.predict_s``).

Bytes are counted twice: ``recv_bytes`` at the array's own width (what the plan moves) and
``wire_bytes`` as the backend's collectives carry them: XLA:CPU runs a bf16 all-reduce or
reduce-scatter in f32 (convert, reduce, convert back), so there a reduced bf16 byte costs two
on the wire (``WIDENED``). Copy-only moves (all-gather, all-to-all, permute) of 16-bit floats are
emitted on their bit patterns by ``redist``'s executor and keep their width; the two figures
agree for every other dtype and backend.

A collective inside a ``scan`` body runs ``length`` times: it appears once in the program text
(``hlo_counts``) and ``length`` times in the executed counts, bytes and time. A ``while`` loop's
trip count is unknown before running, so its body counts once; every ``cond`` branch counts
(an upper bound: one of them runs).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, replace

from partir_core.decide import Lowered, Move, OpDecision
from partir_core.ir import Program, Value
from partir_core.rules import COMBINERS
from redist import CostModel, Plan
from redist.profile import default_cost_model
from spmd_types import ShardingType, itemsize

# how each redist step kind appears in StableHLO (exchange/permute: one collective_permute per round)
HLO_OP = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
          "all_reduce_slice": "all_reduce", "all_to_all": "all_to_all", "multi_all_to_all": "all_to_all", "exchange_all_to_all": "all_to_all",
          "permute": "collective_permute",
          "exchange": "collective_permute"}
_MOVEMENT = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "iota", "gather", "slice",
             "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "copy", "copy_p",
             "convert_element_type", "stop_gradient", "split", "select_n"}


WIDENED: dict[str, dict[str, str]] = {"cpu": {"bf16": "f32"}}
"""Per backend, the dtypes whose reductions (all-reduce, reduce-scatter) it runs in a wider
dtype. Read off compiled XLA:CPU programs (jax 0.10.2): a bf16 psum or psum_scatter becomes
convert-to-f32, the f32 collective, convert back; f16 and int8 reductions keep their width."""
REDUCING = frozenset({"all_reduce", "reduce_scatter", "all_reduce_slice"})
"""Step kinds that add values (the rest copy, on bit patterns for 16-bit floats)."""


def wire_scale(kind: str, dtype: str, backend: str) -> float:
    """Bytes on the wire per byte of ``dtype`` for a ``kind`` step on ``backend`` (1 unless widened)."""
    wide = WIDENED.get(backend, {}).get(dtype) if kind in REDUCING else None
    return 1.0 if wide is None else itemsize(wide) / itemsize(dtype)


def default_backend() -> str:
    """The backend a partitioned program runs on here (JAX's default platform)."""
    import jax

    return str(jax.default_backend())


RANDOM_BITS_WORK = 30.0
"""Elementwise-op equivalents of one element of ``random_bits``: a threefry hash is 20 rounds of
add/rotate/xor plus key injections, so counting it as one op hides most of a dropout mask's work
from the predicted time. The timing behind the figure: docs/design.md section 10, "Simulator"."""


@dataclass(frozen=True)
class Collective:
    kind: str
    recv_bytes: float
    time_s: float
    rounds: int
    reason: str
    src: str
    dst: str
    repeat: int = 1
    measured_s: float = 0.0
    """This step's time under the backend's measured profile (see the module docstring)."""
    wire_scale: float = 1.0
    """Bytes the backend moves per byte of the array's dtype (``WIDENED``)."""

    @property
    def wire_bytes(self) -> float:
        """``recv_bytes`` as the backend's collective carries them (bf16 widened on CPU)."""
        return self.recv_bytes * self.wire_scale


@dataclass(frozen=True)
class Simulation:
    """What ``simulate`` predicts of one partitioned program, per device: FLOPs, the collectives
    (each with its bytes and times, repeated per scan iteration), peak bytes, and the collective
    ops the emitted program must contain (``hlo_counts``).

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, partition, simulate
        >>> from spmd_types import Mesh
        >>> x, w = np.ones((64, 128), np.float32), np.ones((128, 256), np.float32)
        >>> p = partition(lambda x, w: x @ w, Mesh({"model": 4}), [Shard("x", dim=1, axis="model")])
        >>> sim = simulate(p.trace(x, w).lowered)  # a contraction over model: one all-reduce
        >>> sim.counts(), sim.hlo_counts(), sim.recv_bytes
        ({'all_reduce': 1}, {'all_reduce': 1}, 98304.0)
    """

    flops: float
    collectives: tuple[Collective, ...]
    peak_bytes: int
    hlo: tuple[tuple[str, int], ...] = ()
    backend: str = "cpu"
    """The backend ``wire_bytes`` is counted for."""
    pad_bytes: int = 0
    """Bytes the padding of uneven dimensions adds to the inputs and outputs (whole arrays)."""
    pad_flops: float = 0.0
    """FLOPs the padding adds to the whole step (padded dimensions and their masks), over all
    devices together; ``flops`` (per device) already includes each device's share."""

    @property
    def recv_bytes(self) -> float:
        """Bytes received per device, at each array's own dtype width."""
        return sum(c.recv_bytes * c.repeat for c in self.collectives)

    @property
    def wire_bytes(self) -> float:
        """Bytes received per device as ``backend``'s collectives move them (``WIDENED``)."""
        return sum(c.wire_bytes * c.repeat for c in self.collectives)

    @property
    def comm_time_s(self) -> float:
        """Communication time under the planning model (``decide.PARTITIONER_COST_MODEL``)."""
        return sum(c.time_s * c.repeat for c in self.collectives)

    @property
    def measured_comm_s(self) -> float:
        """Communication time under the backend's measured profile."""
        return sum(c.measured_s * c.repeat for c in self.collectives)

    def counts(self) -> dict[str, int]:
        """Collectives executed, by redist step kind (one in a scan body counts once per iteration)."""
        out: Counter[str] = Counter()
        for c in self.collectives:
            out[c.kind] += c.repeat
        return dict(out)

    def hlo_counts(self) -> dict[str, int]:
        """The collective ops the emitted StableHLO must contain, by op name."""
        return {k: n for k, n in self.hlo if n}


def hlo_collectives(text: str) -> dict[str, int]:
    """Count collective ops in StableHLO/MLIR text.

    Examples:
        >>> import numpy as np
        >>> from partir_core import Shard, hlo_collectives, partition
        >>> from spmd_types import Mesh
        >>> x, w = np.ones((64, 128), np.float32), np.ones((128, 256), np.float32)
        >>> p = partition(lambda x, w: x @ w, Mesh({"model": 4}), [Shard("x", dim=1, axis="model")])
        >>> hlo_collectives(p.lower_text(x, w))
        {'all_reduce': 1}
    """
    out: Counter[str] = Counter()
    for name in set(HLO_OP.values()):
        n = len(re.findall(rf'"?stablehlo\.{name}"?[ (]', text))
        if n:
            out[name] = n
    return dict(out)


def op_flops(st: OpDecision) -> float:
    """Per-device FLOPs of one op on local shards (a multiply-add is 2)."""
    op = st.op
    if st.bodies:
        return 0.0  # the bodies' own FLOPs are added by simulate, times the trip count
    if op.name == "dot_general":
        (lc, _), _ = op.params["dimension_numbers"]
        lhs = st.in_types[0]
        k = math.prod(lhs.local_shape[d] for d in lc) if lhs is not None else 1
        return 2.0 * math.prod(st.out_types[0].local_shape) * k
    if op.name in _MOVEMENT:
        return 0.0
    if op.name == "random_bits":
        return RANDOM_BITS_WORK * st.out_types[0].local_size
    if op.name.startswith(("reduce_", "arg", "cum")):
        t = st.in_types[0]
        return float(t.local_size) if t is not None else 0.0
    return float(sum(t.local_size for t in st.out_types))


def program_flops(program: Program) -> float:
    """FLOPs of the whole (unpartitioned) program on its global shapes, by ``op_flops``'s
    formulas; loop bodies count once per trip. Padding's extra work is this on the padded program
    minus this on the true one."""
    total = 0.0
    for op in program.ops:
        if op.bodies:
            trips = int(op.params["length"]) if op.name == "scan" else 1
            total += trips * sum(program_flops(b) for b in op.bodies)
        elif op.name == "dot_general":
            (lc, _), _ = op.params["dimension_numbers"]
            k = math.prod(op.inputs[0].shape[d] for d in lc)
            total += 2.0 * math.prod(op.outputs[0].shape) * k
        elif op.name in _MOVEMENT:
            continue
        elif op.name == "random_bits":
            total += RANDOM_BITS_WORK * math.prod(op.outputs[0].shape)
        elif op.name.startswith(("reduce_", "arg", "cum")):
            total += math.prod(op.inputs[0].shape)
        else:
            total += sum(math.prod(v.shape) for v in op.outputs)
    return total


def _collectives(mv: Move, measured: CostModel, backend: str) -> list[Collective]:
    out = []
    again = replace(mv.plan, cost_model=measured).measures
    for s, m, mm in zip(mv.plan.steps, mv.plan.measures, again):
        if m.rounds > 0:
            out.append(Collective(s.kind, m.recv_bytes, m.time_s, m.rounds, mv.reason, str(mv.src),
                                  str(mv.dst), 1, mm.time_s, wire_scale(s.kind, mv.src.dtype, backend)))
    return out


def _hlo_ops(mv: Move) -> Counter[str]:
    """The move's collective ops in program text: one per typed collective, and the plan's own
    count (``Plan.n_collectives``) for the rest, which are collective-permute rounds."""
    typed = Counter(HLO_OP[s.kind] for s, m in zip(mv.plan.steps, mv.plan.measures)
                    if m.rounds > 0 and HLO_OP.get(s.kind) != "collective_permute")
    permutes = mv.plan.n_collectives - sum(typed.values())
    if permutes:
        typed["collective_permute"] += permutes
    return typed


def _combine(st: OpDecision, measured: CostModel, backend: str) -> list[Collective]:
    """The all-reduce(max/min) finishing a reduction over a sharded dimension (arg*: two)."""
    assert st.combine_plan is not None
    rounds = 2 if st.op.name in ("argmax", "argmin") else 1
    m: Plan = st.combine_plan
    reason = f"op #{st.op.index} {st.op.name} all-reduce({COMBINERS[st.op.name]}) over {','.join(st.combine)}"
    return [Collective("all_reduce", m.recv_bytes, m.time_s, 1, reason, str(m.src), str(m.dst), 1,
                       replace(m, cost_model=measured).time_s, wire_scale("all_reduce", m.src.dtype, backend))] * rounds


def _trips(st: OpDecision) -> int:
    return int(st.op.params["length"]) if st.op.name == "scan" else 1


def simulate(low: Lowered, measured: CostModel | None = None, backend: str | None = None) -> Simulation:
    """Predict the partitioned program's per-device cost without running it (collectives priced
    by the planning model and by ``measured``, default: the backend's measured profile; wire
    bytes for ``backend``, default: the one JAX runs on here).

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, partition, simulate
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> p = partition(f, Mesh({"data": 2, "model": 4}), [Shard("x", 0, "data"), Shard("w", 0, "model")])
        >>> sim = simulate(p.trace(x, w).lowered)  # w's rows over model: x @ w is a pending sum
        >>> sim.counts(), sim.recv_bytes, sim.wire_bytes
        ({'all_reduce': 1}, 768.0, 768.0)
    """
    measured = measured if measured is not None else default_cost_model()
    backend = backend if backend is not None else default_backend()
    moves = [mv for st in low.steps for mv in st.moves] + list(low.out_moves)
    hlo: Counter[str] = Counter()
    for mv in moves:
        hlo.update(_hlo_ops(mv))
    colls: list[Collective] = []
    flops = 0.0
    extra: dict[int, int] = {}
    for i, st in enumerate(low.steps, start=1):
        colls += [c for mv in st.moves for c in _collectives(mv, measured, backend)]
        flops += op_flops(st)
        if st.combine_plan is not None:
            combined = _combine(st, measured, backend)
            colls += combined
            hlo["all_reduce"] += len(combined)
        for body in st.bodies:
            sub = simulate(body, measured, backend)
            k = _trips(st)
            colls += [replace(c, repeat=c.repeat * k) for c in sub.collectives]
            flops += sub.flops * k
            hlo.update(dict(sub.hlo))
            extra[i] = max(extra.get(i, 0), sub.peak_bytes)
    colls += [c for mv in low.out_moves for c in _collectives(mv, measured, backend)]
    return Simulation(flops, tuple(colls), _peak(low, extra), tuple(sorted(hlo.items())), backend)


def _peak(low: Lowered, extra: dict[int, int]) -> int:
    """Largest sum of live local buffers (plus a running body's own peak) over program order."""
    n = len(low.steps)
    end = n + 1
    born: dict[tuple[int, ShardingType], int] = {}
    last: dict[tuple[int, ShardingType], int] = {}
    for v, t in zip(low.program.inputs, low.in_types):
        born[(v.id, t)] = 0
    for cid, t in low.const_types.items():
        born[(cid, t)] = 0
    for i, st in enumerate(low.steps, start=1):
        for mv in st.moves:
            last[(mv.value, mv.src)] = i
            born.setdefault((mv.value, mv.dst), i)
        for a, ta in zip(st.op.inputs, st.in_types):
            if isinstance(a, Value) and ta is not None:
                last[(a.id, ta)] = i
        for r, tr in zip(st.op.outputs, st.out_types):
            born[(r.id, tr)] = i
    for mv in low.out_moves:
        last[(mv.value, mv.src)] = end
        born.setdefault((mv.value, mv.dst), end)
    for o, t in zip(low.program.outputs, low.out_types):
        if isinstance(o, Value):
            last[(o.id, t)] = end
    delta = [0] * (end + 2)
    for key, b in born.items():
        size = key[1].local_bytes
        delta[b] += size
        delta[max(b, last.get(key, b)) + 1] -= size
    for i, e in extra.items():
        delta[i] += e
        delta[i + 1] -= e
    peak = cur = 0
    for d in delta:
        cur += d
        peak = max(peak, cur)
    return peak
