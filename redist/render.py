"""Plans in words: whole bytes with units, each step's communication described, counts explained.

``format_plan(plan)`` is the text ``print(plan)`` shows. It reads only a plan's public attributes
(``steps``, ``all_types``, ``measures``, the byte measures) and ``redist.exchange.schedule``, so it
describes what the executor runs: for an exchange, the cells each device receives and from how
many peers; for a typed collective, the device groups it runs over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from redist.atoms import atoms_of_axes
from redist.exchange import Schedule, schedule
from redist.groups import coords as mesh_coords
from redist.groups import members
from redist.measure import StepMeasure
from redist.steps import (
    AllGather,
    AllReduce,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Axis, Mesh, ShardingType
from spmd_types.mesh import format_axis

if TYPE_CHECKING:
    from redist.plan import Plan

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _scaled(n: float) -> tuple[float, str]:
    """``n`` bytes in the largest binary unit it reaches (``B`` below 1 KiB)."""
    for unit, size in _UNITS:
        if n >= size:
            return n / size, unit
    return n, "B"


def fmt_bytes(n: float) -> str:
    """Whole bytes with separators, plus a binary unit from 1 KiB on: ``28,672 B (28 KiB)``.

    Bytes per device are averages over devices and may be fractional; they are rounded to whole
    bytes and marked ``~`` then, since a fraction of a byte is not something a reader can use."""
    whole = round(n)
    text = f"{'~' if abs(n - whole) > 1e-6 else ''}{whole:,} B"
    v, unit = _scaled(whole)
    return text if unit == "B" else f"{text} ({v:.3g} {unit})"


def fmt_size(n: float) -> str:
    """One rounded unit, for sizes inside a sentence: ``512 B``, ``4 KiB``, ``1.5 MiB``."""
    v, unit = _scaled(n)
    return f"{round(n):,} B" if unit == "B" else f"{v:.3g} {unit}"


def fmt_compact(n: float) -> str:
    """A short byte count for matrix cells: ``512``, ``4K``, ``1.5M`` (binary units)."""
    v, unit = _scaled(n)
    return f"{v:.3g}" if unit == "B" else f"{v:.3g}{unit[0]}"


def fmt_time(s: float) -> str:
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 collectives``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def axes_text(axes: Iterable[Axis]) -> str:
    return ",".join(format_axis(a) for a in axes) or "-"


def device_list(devices: Iterable[int]) -> str:
    """``0-3``, ``0,2,4,6``, ``0-3,8-11``: runs of consecutive ids collapsed."""
    ds = sorted(set(devices))
    parts: list[str] = []
    i = 0
    while i < len(ds):
        j = i
        while j + 1 < len(ds) and ds[j + 1] == ds[j] + 1:
            j += 1
        parts.append(f"{ds[i]}-{ds[j]}" if j - i >= 2 else ",".join(map(str, ds[i:j + 1])))
        i = j + 1
    return ",".join(parts)


def groups_text(mesh: Mesh, axes: tuple[Axis, ...]) -> str:
    """The device groups a collective over ``axes`` runs in: ``{0-3} {4-7}``."""
    seen: list[list[int]] = []
    for g in members(mesh, atoms_of_axes(mesh, axes)):
        if g not in seen:
            seen.append(g)
    shown = " ".join("{" + device_list(g) + "}" for g in seen[:4])
    return shown + (f" and {len(seen) - 4} more" if len(seen) > 4 else "")


def step_collectives(step: Step, m: StepMeasure) -> int:
    """Collective ops a step runs: one per typed collective, one per round of a point-to-point
    step (each round is one ``collective-permute``); local steps and empty groups run none."""
    if not step.is_collective or m.rounds == 0:
        return 0
    return m.rounds if isinstance(step, (Permute, Exchange)) else 1


@dataclass(frozen=True)
class StepText:
    """One step in words: a title, what moves between which devices, and why it counts so."""

    title: str
    moves: str
    collectives: int
    why_count: str


def describe_step(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    n = step_collectives(step, m)
    if isinstance(step, (Permute, Exchange)):
        return _describe_p2p(step, before, after, m, n)
    if not step.is_collective:
        return StepText(_local_title(step), _local_moves(step, before), 0, "no communication")
    axes = step.group_axes()
    p = math.prod(before.mesh.axis_size(a) for a in axes)
    title = f"{step.kind.replace('_', '-')} over {axes_text(axes)}"
    if isinstance(step, (AllGather, ReduceScatter)):
        title = f"{step.kind.replace('_', '-')} dimension {step.dim} over {axes_text(axes)}"
    elif isinstance(step, AllToAll):
        title = f"all-to-all dimension {step.src_dim} -> {step.dst_dim} over {axes_text(axes)}"
    if n == 0:
        return StepText(title, f"the group along {axes_text(axes)} has one device: nothing moves", 0,
                        "no communication")
    groups = f"groups of {p} devices {groups_text(before.mesh, axes)}"
    return StepText(title, _collective_moves(step, p) + f"; {groups}", 1,
                    f"one {step.kind.replace('_', '-')} runs in every group at once")


def _collective_moves(step: Step, p: int) -> str:
    if isinstance(step, AllGather):
        if p == 2:
            return f"each device receives the block of dimension {step.dim} its partner holds"
        return (f"each device receives the {p - 1} blocks of dimension {step.dim} "
                f"held by the other devices of its group")
    if isinstance(step, AllToAll):
        return (f"each device splits its block along dimension {step.dst_dim} into {p} pieces, keeps "
                f"one and sends one to each other device of its group; the pieces received are "
                f"joined along dimension {step.src_dim}")
    if isinstance(step, ReduceScatter):
        return (f"the {p} devices of a group hold partial sums; each receives the other "
                f"{plural(p - 1, 'partial')} of its 1/{p} of dimension {step.dim} and adds them")
    if isinstance(step, AllReduce):
        return (f"the {p} devices of a group hold partial sums; every device ends with the full sum: "
                f"a reduce-scatter then an all-gather, so twice the bytes of either")
    raise TypeError(f"no description for {step!r}")  # pragma: no cover - every collective is listed


def _local_title(step: Step) -> str:
    if isinstance(step, DynSlice):
        return f"slice dimension {step.dim} over {axes_text(step.axes)}"
    if isinstance(step, Discard):
        return f"discard copies over {axes_text(step.axes)}"
    if isinstance(step, PadUnreduced):
        return f"pad dimension {step.dim} into a partial sum over {axes_text(step.axes)}"
    return str(step)  # pragma: no cover - every local step is listed


def _local_moves(step: Step, before: ShardingType) -> str:
    if isinstance(step, DynSlice):
        p = math.prod(before.mesh.axis_size(a) for a in step.axes)
        return (f"each device keeps its 1/{p} of dimension {step.dim}, chosen by its coordinate "
                f"along {axes_text(step.axes)}; nothing is sent")
    if isinstance(step, Discard):
        return (f"along {axes_text(step.axes)} the devices at coordinate 0 keep their copy and the "
                f"others hold zeros: a pending sum over {axes_text(step.axes)}; nothing is sent")
    if isinstance(step, PadUnreduced):
        return (f"each device places its block in zeros of the full dimension {step.dim}: the sum "
                f"over {axes_text(step.axes)} is the array; nothing is sent")
    return "nothing is sent"  # pragma: no cover


def _describe_p2p(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure, n: int) -> StepText:
    kind = "permute" if isinstance(step, Permute) else "exchange"
    title = kind
    if n == 0:
        return StepText(title, "every device already holds what its new block needs: a local copy",
                        0, "no communication")
    sch = schedule(before, after)
    cell = "x".join(map(str, sch.cell)) or "1"
    cell_bytes = math.prod(sch.cell) * before.itemsize
    if isinstance(step, Permute):
        moves = f"each device that lacks its new block receives it whole from one holder: {_pairs(sch)}"
        why = "one collective-permute: every device sends and receives at most one block"
        return StepText(title, moves, n, why)
    cells = sch.recv_cells
    senders = _senders(sch, before.mesh.size)
    span = _axes_crossed(sch, before.mesh)
    got = cells > 0
    who = (f"{_range(cells[got])} cells of {cell} elements ({fmt_size(cell_bytes)} each) that its new "
           f"block lacks, from {_range(senders[got])} other devices, across {span}")
    receivers = int(got.sum())
    moves = ("each device receives " if receivers == before.mesh.size
             else f"{plural(receivers, 'device')} of {before.mesh.size} receive ") + who
    summed = sorted(set(before.unreduced) - set(after.unreduced), key=str)
    if summed:
        moves += f"; the partial sums over {axes_text(summed)} are added on arrival"
    forward = sum(r.from_output for r in sch.rounds)
    if forward:
        moves += (f"; partials to be summed go to one device per cell, which adds them and forwards "
                  f"the sum ({plural(forward, 'round')})")
    why = (f"{plural(n, 'collective-permute')}, one per round: in a round each device sends and "
           f"receives at most one cell")
    return StepText(title, moves, n, why)


def _range(v: np.ndarray) -> str:
    lo, hi = int(v.min()), int(v.max())
    return str(lo) if lo == hi else f"{lo} to {hi}"


def _senders(sch: Schedule, n_dev: int) -> np.ndarray:
    """Distinct peers each device receives from."""
    peers: list[set[int]] = [set() for _ in range(n_dev)]
    for r in sch.rounds:
        for s, d in r.pairs:
            peers[d].add(s)
    return np.array([len(p) for p in peers])


def _axes_crossed(sch: Schedule, mesh: Mesh) -> str:
    """The mesh axes along which senders and receivers differ (what the links cross)."""
    table = mesh_coords(mesh)
    names = sorted({mesh.names[i] for r in sch.rounds for s, d in r.pairs
                    for i in range(len(mesh.names)) if table[s, i] != table[d, i]},
                   key=mesh.position)
    return ("axis " if len(names) == 1 else "axes ") + ",".join(names)


def _pairs(sch: Schedule) -> str:
    pairs = sorted(p for r in sch.rounds for p in r.pairs)
    text = ", ".join(f"{s}->{d}" for s, d in pairs[:8])
    return text + (f" and {len(pairs) - 8} more" if len(pairs) > 8 else "")


def step_texts(plan: Plan) -> list[StepText]:
    ts = plan.all_types
    return [describe_step(s, ts[i], ts[i + 1], m) for i, (s, m) in enumerate(zip(plan.steps, plan.measures))]


def totals_text(plan: Plan) -> str:
    """The plan's measures against their bounds, in one sentence."""
    bound = plan.lower_bound_bytes
    at = ("the lower bound" if abs(plan.recv_bytes - bound) < 1e-6
          else f"lower bound {fmt_bytes(bound)}")
    mem = ("= max(source, destination)" if plan.peak_bytes == plan.memory_bound_bytes
           else f"bound max(source, destination) = {fmt_bytes(plan.memory_bound_bytes)}")
    return (f"receives {fmt_bytes(plan.recv_bytes)} per device ({at}); peak {fmt_bytes(plan.peak_bytes)} "
            f"per device ({mem}); estimated time {fmt_time(plan.time_s)}")


def format_plan(plan: Plan) -> str:
    """The plan as text: a header, each step with what it moves and why it counts so, the totals."""
    texts = step_texts(plan)
    lines = [f"plan {plan.src} -> {plan.dst} on mesh {plan.src.mesh}: "
             f"{plural(len(plan.steps), 'step')}, {plural(plan.n_collectives, 'collective')}"]
    for i, (st, m) in enumerate(zip(texts, plan.measures)):
        cost = (f"receives {fmt_bytes(m.recv_bytes)} per device, {plural(st.collectives, 'collective')}"
                if st.collectives else "local, no communication")
        lines.append(f"  {i + 1}. {st.title} to {plan.types[i]}: {cost}")
        lines.append(f"     {st.moves}")
        if st.collectives:
            lines.append(f"     {st.why_count}")
    lines.append("  " + totals_text(plan))
    return "\n".join(lines)
