"""Plans in words: whole bytes with units, each step's communication described, counts explained.

``format_plan(plan)`` is the text ``print(plan)`` shows (registered as the plan's formatter here,
so ``redist.plan`` imports no renderer). It reads only a plan's public attributes
(``steps``, ``all_types``, ``measures``, the byte measures) and ``redist.exchange.schedule``, so it
describes what the executor runs: for an exchange, the cells each device receives and from how
many peers; for a typed collective, the device groups it runs over.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from redist.atoms import Atom, atoms_of_axes
from redist.exchange import Schedule, class_schedule, schedule
from redist.exchange_a2a import slots
from redist.facets import FacetTable
from redist.groups import coords as mesh_coords
from redist.measure import StepMeasure
from redist.plan import Plan, register_formatter
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Axis, Mesh, ShardingType
from spmd_types.mesh import format_axis

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
    """The device groups a collective over ``axes`` runs in: ``{0-3} {4-7}``, the first four
    in order of their first device and a count of the rest, computed from the device numbering
    (no table of the mesh: printing costs the same on 8 devices and on 2**46)."""
    digits = _digits(mesh, tuple(atoms_of_axes(mesh, axes)))
    size = math.prod(d.size for d in digits if d.atom is not None)
    n_groups = mesh.size // size
    shown = " ".join("{" + _members_text(digits, _leader(digits, k), size) + "}" for k in range(min(n_groups, 4)))
    return shown + (f" and {n_groups - 4} more" if n_groups > 4 else "")


class _Digit(NamedTuple):
    """One digit of a device id, major first: an atom of the group's (``atom`` its index in the
    group's order) or a run of other coordinates (``atom`` None), and its place value."""

    size: int
    atom: int | None
    weight: int


def _digits(mesh: Mesh, atoms: tuple[Atom, ...]) -> list[_Digit]:
    """Device ids (row-major over the axes) as mixed-radix digits: each axis split at the group's
    atoms (an atom ``(pre)size`` is the digit after the ``pre`` major coordinates)."""
    raw: list[tuple[int, int | None]] = []
    for name, n in mesh.axes:
        done = 1
        for a in sorted((a for a in atoms if a.name == name), key=lambda a: a.pre):
            raw += [(a.pre // done, None), (a.size, atoms.index(a))]
            done = a.pre * a.size
        raw.append((n // done, None))
    out, weight = [], 1
    for size, atom in reversed(raw):
        out.append(_Digit(size, atom, weight))
        weight *= size
    return list(reversed(out))


def _leader(digits: list[_Digit], k: int) -> int:
    """The first device of the ``k``-th group: ``k`` written in the digits outside the group's atoms."""
    device = 0
    for d in reversed(digits):
        if d.atom is None:
            k, digit = divmod(k, d.size)
            device += digit * d.weight
    return device


MAX_LISTED = 1 << 12
"""Groups larger than this are described by their size and first device, not listed."""


def _members_text(digits: list[_Digit], leader: int, size: int) -> str:
    if size > MAX_LISTED:
        return f"{size:,} devices from {leader}"
    ordered = sorted((d for d in digits if d.atom is not None), key=lambda d: d.atom or 0)
    members = [leader + sum(i * d.weight for i, d in zip(idx, ordered))
               for idx in itertools.product(*(range(d.size) for d in ordered))]
    return device_list(members)


@dataclass(frozen=True)
class StepText:
    """One step in words: a title, what moves between which devices, and why it counts so."""

    title: str
    moves: str
    collectives: int
    why_count: str


Describe = Callable[[Any, ShardingType, ShardingType, StepMeasure], StepText]
DESCRIBE: FacetTable[Describe] = FacetTable("describe", "redist.render.DESCRIBE")
"""Each step class in words (the CLI's plan output and the pictures' captions)."""


def describe_step(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    return DESCRIBE[type(step)](step, before, after, m)


NOTHING_SENT = "no communication"


@DESCRIBE.register(DynSlice)
def _slice(step: DynSlice, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    p = math.prod(before.mesh.axis_size(a) for a in step.axes)
    return StepText(f"slice dimension {step.dim} over {axes_text(step.axes)}",
                    f"each device keeps its 1/{p} of dimension {step.dim}, chosen by its coordinate "
                    f"along {axes_text(step.axes)}; nothing is sent", 0, NOTHING_SENT)


@DESCRIBE.register(Discard)
def _discard(step: Discard, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    return StepText(f"discard copies over {axes_text(step.axes)}",
                    f"along {axes_text(step.axes)} the devices at coordinate 0 keep their copy and the "
                    f"others hold zeros: a pending sum over {axes_text(step.axes)}; nothing is sent", 0, NOTHING_SENT)


@DESCRIBE.register(PadUnreduced)
def _pad(step: PadUnreduced, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    return StepText(f"pad dimension {step.dim} into a partial sum over {axes_text(step.axes)}",
                    f"each device places its block in zeros of the full dimension {step.dim}: the sum "
                    f"over {axes_text(step.axes)} is the array; nothing is sent", 0, NOTHING_SENT)


def _collective(title: str, moves: Callable[[Any, int], str]) -> Describe:
    """A typed collective: ``title`` formatted with the step's fields, ``moves(step, p)`` in words."""

    def describe(step: Step, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
        axes = step.group_axes()
        p = math.prod(before.mesh.axis_size(a) for a in axes)
        head = title.format(**{**vars(step), "kind": step.kind.replace("_", "-"), "axes": axes_text(axes)})
        if m.collectives == 0:
            return StepText(head, f"the group along {axes_text(axes)} has one device: nothing moves", 0, NOTHING_SENT)
        groups = f"groups of {p} devices {groups_text(before.mesh, axes)}"
        return StepText(head, moves(step, p) + f"; {groups}", m.collectives,
                        f"one {step.kind.replace('_', '-')} runs in every group at once")

    return describe


def _gather_moves(step: AllGather, p: int) -> str:
    if p == 2:
        return f"each device receives the block of dimension {step.dim} its partner holds"
    return f"each device receives the {p - 1} blocks of dimension {step.dim} held by the other devices of its group"


def _sum_moves(step: ReduceScatter, p: int) -> str:
    return (f"the {p} devices of a group hold partial sums; each receives the other "
            f"{plural(p - 1, 'partial')} of its 1/{p} of dimension {step.dim} and adds them")


def _all_reduce_moves(step: AllReduce, p: int) -> str:
    return (f"the {p} devices of a group hold partial sums; every device ends with the full sum: "
            f"a reduce-scatter then an all-gather, so twice the bytes of either")


def _all_reduce_slice_moves(step: AllReduceSlice, p: int) -> str:
    return _all_reduce_moves(step, p) + f"; then each keeps its 1/{p} of dimension {step.dim}"  # type: ignore[arg-type]


def _all_to_all_moves(step: AllToAll, p: int) -> str:
    return (f"each device splits its block along dimension {step.dst_dim} into {p} pieces, keeps "
            f"one and sends one to each other device of its group; the pieces received are "
            f"joined along dimension {step.src_dim}")


DESCRIBE.register(AllGather)(_collective("{kind} dimension {dim} over {axes}", _gather_moves))
DESCRIBE.register(ReduceScatter)(_collective("{kind} dimension {dim} over {axes}", _sum_moves))
DESCRIBE.register(AllReduceSlice)(_collective("all-reduce + slice dimension {dim} over {axes}",
                                              _all_reduce_slice_moves))
DESCRIBE.register(AllReduce)(_collective("{kind} over {axes}", _all_reduce_moves))
@DESCRIBE.register(ExchangeAllToAll)
def _exchange_all_to_all(step: ExchangeAllToAll, before: ShardingType, after: ShardingType,
                         m: StepMeasure) -> StepText:
    sl = slots(before, after)
    cell = "x".join(map(str, sl.cell)) or "1"
    padding = sl.g * (sl.g - 1) * sl.k * (before.mesh.size // sl.g) - sl.received
    moves = (f"the cells an exchange would move in rounds ({cell} elements each) travel in one all-to-all "
             f"over {', '.join(sl.names)}: each device sends {plural(sl.k, 'cell')} to every device of its "
             f"group of {sl.g} (itself included: its local copies)" + (f", {plural(padding, 'slot')} of them padding" if padding else ""))
    return StepText("exchange as one all-to-all", moves, m.collectives,
                    "one all-to-all replaces the exchange's collective-permute rounds")


DESCRIBE.register(AllToAll)(_collective("all-to-all dimension {src_dim} -> {dst_dim} over {axes}", _all_to_all_moves))


def _multi_all_to_all_moves(step: MultiAllToAll, p: int) -> str:
    moves = "; ".join(f"dimension {m.dst_dim} split over {axes_text(m.axes)} is sent, pieces received are "
                      f"joined along dimension {m.src_dim}" for m in step.moves)
    return f"one all-to-all over the whole group of {p}: {moves}"


_multi_text = _collective("all-to-all of several dimensions over {axes}", _multi_all_to_all_moves)


@DESCRIBE.register(MultiAllToAll)
def _multi_all_to_all(step: MultiAllToAll, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    text = _multi_text(step, before, after, m)
    return replace(text, why_count="one all-to-all runs in every group at once") if m.collectives else text


@DESCRIBE.register(Permute)
def _permute(step: Permute, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    if m.collectives == 0:
        return StepText("permute", "every device already holds what its new block needs: a local copy", 0, NOTHING_SENT)
    moves = f"each device that lacks its new block receives it whole from one holder: {_pairs(_described(before, after))}"
    return StepText("permute", moves, m.collectives,
                    "one collective-permute: every device sends and receives at most one block")


@DESCRIBE.register(Exchange)
def _exchange(step: Exchange, before: ShardingType, after: ShardingType, m: StepMeasure) -> StepText:
    n = m.collectives
    if n == 0:
        return StepText("exchange", "every device already holds what its new block needs: a local copy",
                        0, NOTHING_SENT)
    d = _described(before, after)
    sch = d.schedule
    cell = "x".join(map(str, sch.cell)) or "1"
    cells, senders = sch.recv_cells, _senders(sch, len(sch.recv_cells))
    got = cells > 0
    receivers = int(got.sum()) * d.n_classes
    every = receivers == before.mesh.size
    who = (f"{_range(cells[got], 'cell')} of {cell} elements ({fmt_size(math.prod(sch.cell) * before.itemsize)} "
           f"each) that {'its' if every else 'their'} new block lacks, from {_range(senders[got], 'other device')}, across "
           f"{_axes_crossed(sch, d.mesh)}")
    moves = ("each device receives " if every
             else f"{plural(receivers, 'device')} of {before.mesh.size} receive ") + who
    summed = sorted(set(before.unreduced) - set(after.unreduced), key=str)
    if summed:
        moves += f"; the partial sums over {axes_text(summed)} are added on arrival"
    forward = sum(r.from_output for r in sch.rounds)
    if forward:
        moves += (f"; partials to be summed go to one device per cell, which adds them and forwards "
                  f"the sum ({plural(forward, 'round')})")
    why = f"{plural(n, 'collective-permute')}, one per round: in a round each device sends and receives at most one cell"
    return StepText("exchange", moves, n, why)


LIFTED_DEVICES = 1 << 12
"""Meshes up to this size are described from the whole schedule; larger ones from one class of
devices (``redist.exchange.class_schedule``): every class receives alike, so the counts are the
same, and describing costs no more than planning (docs/design.md 13.3)."""


class _Described(NamedTuple):
    """The schedule a step is described from: the whole one, or one class's."""

    schedule: Schedule
    n_classes: int
    mesh: Mesh
    """The mesh its device ids number (the quotient's for one class)."""
    device: Callable[[int], int]
    """Its device id as a device of the whole mesh."""


def _described(before: ShardingType, after: ShardingType) -> _Described:
    if before.mesh.size <= LIFTED_DEVICES:
        return _Described(schedule(before, after), 1, before.mesh, int)
    cs = class_schedule(before, after)
    mesh = before.mesh if cs.classes is None else cs.classes.quotient_old.mesh
    return _Described(cs.schedule, cs.n_classes, mesh, cs.device)


def _range(v: np.ndarray, word: str) -> str:
    """``1 cell``, ``3 cells``, ``1 to 2 cells``."""
    lo, hi = int(v.min()), int(v.max())
    return plural(lo, word) if lo == hi else f"{lo:,} to {plural(hi, word)}"


def _round_pairs(sch: Schedule) -> np.ndarray:
    """Every (src, dst) pair of every round, as an [n, 2] array."""
    pairs = [np.asarray(r.pairs, dtype=np.int64).reshape(-1, 2) for r in sch.rounds]
    return np.concatenate(pairs) if pairs else np.zeros((0, 2), dtype=np.int64)


def _senders(sch: Schedule, n_dev: int) -> np.ndarray:
    """Distinct peers each device receives from (one NumPy pass: meshes of 65,536 devices)."""
    distinct = np.unique(_round_pairs(sch), axis=0)
    return np.bincount(distinct[:, 1], minlength=n_dev)


def _axes_crossed(sch: Schedule, mesh: Mesh) -> str:
    """The mesh axes along which senders and receivers differ (what the links cross)."""
    table, pairs = mesh_coords(mesh), _round_pairs(sch)
    crossed = (table[pairs[:, 0]] != table[pairs[:, 1]]).any(axis=0)
    names = [n for n, c in zip(mesh.names, crossed.tolist()) if c]
    return ("axis " if len(names) == 1 else "axes ") + ",".join(names)


def _pairs(d: _Described) -> str:
    """The first 8 (sender, receiver) pairs, of one class where the schedule is one class's, and a
    count of all of them."""
    pairs = sorted(p for r in d.schedule.rounds for p in r.pairs)
    text = ", ".join(f"{d.device(s)}->{d.device(t)}" for s, t in pairs[:8])
    total = len(pairs) * d.n_classes
    return text + (f" and {total - 8} more" if total > 8 else "")


def step_texts(plan: Plan) -> list[StepText]:
    ts = plan.all_types
    return [describe_step(s, ts[i], ts[i + 1], m) for i, (s, m) in enumerate(zip(plan.steps, plan.measures))]


def recv_text(mean: float, most: float) -> str:
    """Bytes received, labelled: ``on every device`` where the busiest device receives the mean,
    else the mean and the busiest device's figure."""
    if abs(most - mean) <= 1e-6 * max(1.0, most):
        return f"{fmt_bytes(mean)} on every device"
    return f"{fmt_bytes(mean)} per device on average, {fmt_bytes(most)} on the busiest device"


def totals_text(plan: Plan) -> str:
    """The plan's measures against their bounds, in one sentence: received bytes as the mean over
    devices and the busiest device's of each step summed, each beside its lower bound."""
    mean, most = plan.recv_bytes, plan.recv_bytes_max
    bound, bound_max = plan.lower_bound_bytes, plan.lower_bound_bytes_max
    uniform = abs(most - mean) <= 1e-6 * max(1.0, most) and abs(bound_max - bound) <= 1e-6 * max(1.0, bound_max)
    if uniform:
        at = "the lower bound" if abs(mean - bound) < 1e-6 else f"lower bound {fmt_bytes(bound)}"
        recv = f"receives {fmt_bytes(mean)} on every device ({at})"
    else:
        at = "the lower bound" if abs(mean - bound) < 1e-6 else f"lower bound {fmt_bytes(bound)}"
        at_max = "its lower bound" if abs(most - bound_max) < 1e-6 else f"lower bound {fmt_bytes(bound_max)}"
        recv = (f"receives {fmt_bytes(mean)} per device on average ({at}), {fmt_bytes(most)} on the busiest "
                f"device of each step summed ({at_max})")
    mem = ("= max(source, destination)" if plan.peak_bytes == plan.memory_bound_bytes
           else f"bound max(source, destination) = {fmt_bytes(plan.memory_bound_bytes)}")
    return (f"{recv}; peak {fmt_bytes(plan.peak_bytes)} "
            f"per device ({mem}); estimated time {fmt_time(plan.time_s)}")


def format_plan(plan: Plan) -> str:
    """The plan as text: a header, each step with what it moves and why it counts so, the totals."""
    texts = step_texts(plan)
    lines = [f"plan {plan.src} -> {plan.dst} on mesh {plan.src.mesh}: "
             f"{plural(len(plan.steps), 'step')}, {plural(plan.n_collectives, 'collective')}"]
    for i, (st, m, most) in enumerate(zip(texts, plan.measures, plan.step_recv_bytes_max)):
        cost = (f"receives {recv_text(m.recv_bytes, most)}, {plural(st.collectives, 'collective')}"
                if st.collectives else "local, no communication")
        lines.append(f"  {i + 1}. {st.title} to {plan.types[i]}: {cost}")
        lines.append(f"     {st.moves}")
        if st.collectives:
            lines.append(f"     {st.why_count}")
    lines.append("  " + totals_text(plan))
    return "\n".join(lines)


register_formatter(format_plan)
