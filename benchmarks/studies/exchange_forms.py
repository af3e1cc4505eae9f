"""Forms of lowering a one-round pairwise exchange (``redist.executor._point_to_point``), timed.

Why: every ``Exchange`` in the named cases' plans and in 200 seeded random pairs' plans (besides
whole-block permutes, rounds without a cell to send, and two two-round exchanges) is a *pairwise
swap*: one ``ppermute`` round over an involution of the devices, each device keeping one cell of
its new block and receiving the other from its partner. No device ever sends two cells to one
peer, so packing a peer's cells into one buffer has nothing to pack; the open questions are how
the received cell is joined to the kept one, and whether the round is better run as an
all-to-all over the pairs (``redist.exchange_a2a.slots`` groups whole mesh axes, so it offers no
all-to-all for a swap across a sub-axis such as ``tp2d_transpose_2x4``'s ``y:(2)2``: a group of 4
needs 4 slots per device, above the memory bound). Each form below is checked against NumPy.

``python -m benchmarks.studies.exchange_forms [--seconds S] [--runs R]``: per case, the whole plan compiled
with its exchange lowered in each form, interleaved in one process on 8 simulated CPU devices,
``R`` runs of ``S`` seconds; the medians, the median and quartiles of the per-iteration ratio
(current / form: above 1 is faster than today's lowering) and the compiled program's local writes.

Forms:

- ``current``: the executor's lowering (zeros + a ``dynamic_update_slice`` per cell, or one
  concatenate where the cells are leading slabs or the block moves as 16-bit bits, ``_assemble``);
- ``zeros``: always the zero-filled block (``_owners`` off; the lowering before the 16-bit rule);
- ``all-to-all``: one ``lax.all_to_all`` over the pairs (``axis_index_groups``), slots in the
  static order both members share, the executor's in-place form where it is a one-dimension move;
- ``select+concat``: both candidate cells cut by static slices and picked per device by a select,
  the new block one concatenate along its cell grid;
- ``exchange first`` (plan order, not a lowering: the synthesizer's choice): where the plan is a
  whole-block permute and then the swap, the same two collectives the other way round.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from benchmarks.cases import NAMED_CASES, Case  # noqa: E402
from benchmarks.harness import at_least, round_robin_times, suite_parser, thunk  # noqa: E402
from benchmarks.random_pairs import PairSpec, random_pairs  # noqa: E402
from redist import executor as ex  # noqa: E402
from redist import redistribute  # noqa: E402
from redist.arrays import check_output, make_input  # noqa: E402
from redist.exchange import schedule  # noqa: E402
from redist.hlo import local_writes, parse_collectives  # noqa: E402
from redist.plan import Plan  # noqa: E402
from redist.steps import Exchange  # noqa: E402
from spmd_types import Mesh, ShardingType, parse  # noqa: E402
from spmd_types.jax_interop import to_partition_spec  # noqa: E402

CASES: tuple[tuple[str, str | None], ...] = (
    ("tp2d_transpose_2x4", "f32[1024@(x,y:(2)2),1024@(y:(1)2)]"),
    ("tp2d_transpose_4x2", "f32[1024@(x:(1)2),1024@(y,x:(2)2)]"),
    ("rand013_2x4_r2", None),
    ("rand029_4x2_r4", None),
    ("rand054_2x4_r3", None),
)
"""(case, the type between the swap and the permute when the swap runs first)."""

SWAPS: tuple[tuple[dict[str, int], str, str], ...] = tuple(
    (mesh, src.replace("T", dt), dst.replace("T", dt))
    for dt in ("f32", "bf16", "f16")
    for mesh, src, dst in (({"x": 2, "y": 4}, "T[512,512@x]", "T[512@x,512]"),
                           ({"x": 2, "y": 4}, "T[2048,128@x]", "T[2048@x,128]"),
                           ({"x": 2, "y": 4}, "T[64,64,64@x]", "T[64@x,64,64]"),
                           ({"x": 4, "y": 2}, "T[32,256@y,4,8]", "T[32,256,4,8@y]"))
)
"""(mesh, src, dst): one ``Exchange`` step that is a pairwise swap, 32- and 16-bit, its cells
splitting a non-leading dimension (the zero-filled form in 32 bits; joined in 16, see
``redist.executor._slab_grid``)."""

Form = Callable[[ShardingType, ShardingType, jax.Array], jax.Array]


class Swap(NamedTuple):
    """A one-round pairwise exchange: per device, where its kept cell is cut and placed, where the
    cell it sends is cut, where the cell it receives is placed, and its partner."""

    cell: tuple[int, ...]
    keep_from: np.ndarray  # [devices, rank]
    keep_to: np.ndarray
    send_from: np.ndarray
    recv_to: np.ndarray
    partner: np.ndarray  # [devices]
    pairs: tuple[tuple[int, int], ...]


def swap_of(before: ShardingType, after: ShardingType) -> Swap | None:
    """The exchange as a ``Swap``, ``None`` when it is none (sums, forwarding, several rounds,
    a device idle in the round, or more than the two cells)."""
    sch = schedule(before, after)
    if before.unreduced or len(sch.rounds) != 1 or len(sch.local_copies) != 1:
        return None
    keep, r = sch.local_copies[0], sch.rounds[0]
    n = before.mesh.size
    partner = np.full(n, -1)
    for s, t in r.pairs:
        partner[t] = s
    if r.from_output or not (keep.recv_valid.all() and r.recv_valid.all()):
        return None
    if sorted(r.pairs) != sorted((t, s) for s, t in r.pairs) or (partner < 0).any():
        return None
    if np.prod(after.local_shape) != 2 * np.prod(sch.cell):
        return None
    return Swap(sch.cell, keep.send_offset, keep.recv_offset, r.send_offset, r.recv_offset, partner, r.pairs)


def _zeros(before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    owners = ex._owners
    ex._owners = lambda *a: None  # type: ignore[assignment]
    try:
        return ex._point_to_point(before, after, x)
    finally:
        ex._owners = owners  # type: ignore[assignment]


def _all_to_all(before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """Slot ``j`` of a device goes to member ``j`` of its pair (members in device order)."""
    sw = swap_of(before, after)
    assert sw is not None
    n = before.mesh.size
    me = (np.arange(n) > sw.partner).astype(int)  # this device's member index in its pair
    send = np.where(me[:, None, None] == np.arange(2)[None, :, None], sw.keep_from[:, None], sw.send_from[:, None])
    recv = np.where(me[:, None, None] == np.arange(2)[None, :, None], sw.keep_to[:, None], sw.recv_to[:, None])
    groups = sorted({tuple(sorted((d, int(sw.partner[d])))) for d in range(n)})
    args = {"axis_name": ex._axis_name(before.mesh.names), "axis_index_groups": [list(g) for g in groups]}
    if (send == send[:1]).all() and (recv == recv[:1]).all():
        moved = ex._one_dim_move(send[0], recv[0], sw.cell, x.shape, after.local_shape)
        if moved is not None:
            return ex._all_to_all_in_place(x, moved[0], moved[1], 2, args)
        y = lax.all_to_all(ex._cells_to_slots(x, send[0], sw.cell), 0, 0, tiled=True, **args)
        return ex._slots_to_cells(y, recv[0], sw.cell, after.local_shape)
    lin = ex._linear_index(before.mesh)
    pieces = jnp.stack([lax.dynamic_slice(x, ex._offsets(send[:, j], lin, x.ndim), sw.cell) for j in range(2)])
    y = lax.all_to_all(pieces, 0, 0, tiled=True, **args)
    out = jnp.zeros(after.local_shape, x.dtype)
    for j in range(2):
        out = lax.dynamic_update_slice(out, y[j], ex._offsets(recv[:, j], lin, x.ndim))
    return out


def _static_pick(x: jax.Array, offsets: np.ndarray, cell: Sequence[int], lin: jax.Array,
                 where: np.ndarray, other: jax.Array) -> jax.Array:
    """The cell at each device's offset where ``where`` holds (static slices picked per device by a
    select), ``other`` elsewhere."""
    out = other
    for o in np.unique(offsets[where], axis=0):
        piece = lax.slice(x, [int(v) for v in o], [int(v) + c for v, c in zip(o, cell)])
        out = jnp.where(ex._lookup(where & (offsets == o).all(axis=1), lin), piece, out)
    return out


def _select_concat(before: ShardingType, after: ShardingType, x: jax.Array) -> jax.Array:
    """Each position of the new block's two-cell grid: the kept cell (a static slice) on the devices
    that keep it there, the received one elsewhere; joined by one concatenate."""
    sw = swap_of(before, after)
    assert sw is not None
    lin = ex._linear_index(before.mesh)
    everyone = np.ones(before.mesh.size, dtype=bool)
    zeros = jnp.zeros(sw.cell, x.dtype)
    got = lax.ppermute(_static_pick(x, sw.send_from, sw.cell, lin, everyone, zeros),
                       ex._axis_name(before.mesh.names), perm=list(sw.pairs))
    k = next(d for d, (n, c) in enumerate(zip(after.local_shape, sw.cell)) if n > c)
    split = [*sw.cell[:k], 1, *sw.cell[k:]]
    cells = [_static_pick(x, sw.keep_from, sw.cell, lin, sw.keep_to[:, k] == q * sw.cell[k], got).reshape(split)
             for q in range(2)]
    return lax.concatenate(cells, k).reshape(after.local_shape)


FORMS: dict[str, Form | None] = {"current": ex._point_to_point, "zeros": _zeros, "all-to-all": _all_to_all,
                                 "select+concat": _select_concat}


def _body(plan: Plan, form: Form | None) -> Callable[[jax.Array], jax.Array]:
    """The plan's per-device program with its pairwise exchanges lowered by ``form``."""
    def run(x: jax.Array) -> jax.Array:
        ts = plan.all_types
        for i, step in enumerate(plan.steps):
            if form is not None and type(step) is Exchange and swap_of(ts[i], ts[i + 1]) is not None:
                x = ex._values_moved(form, ts[i], ts[i + 1], x)
            else:
                x = ex.LOWER[type(step)].fn((step,), ts[i], ts[i + 1], x, ex.step_after(plan.steps, i + 1))
        return x
    return run


def _compile(plan: Plan, form: Form | None, x: jax.Array) -> Any:
    jmesh = plan.src.mesh.to_jax()
    body = jax.shard_map(_body(plan, form), mesh=jmesh, in_specs=to_partition_spec(plan.src),
                         out_specs=to_partition_spec(plan.dst), check_vma=False)
    return jax.jit(body, out_shardings=NamedSharding(jmesh, to_partition_spec(plan.dst))).lower(x).compile()


def _case(name: str) -> Case:
    pool = list(NAMED_CASES) + list(random_pairs(PairSpec(seed=0, count=60)))
    return next(c for c in pool if c.name == name)


def programs(plan: Plan, alt: Plan | None = None, forms: dict[str, Form | None] | None = None) -> tuple[dict[str, Any], Any]:
    """Each form's compiled program of ``plan`` (and ``alt``, another plan to the same type, as
    ``exchange first``), each checked against NumPy, and the input they run on."""
    x, expected = make_input(plan.src, plan.src.mesh.to_jax())
    progs = {k: _compile(plan, f, x) for k, f in (FORMS if forms is None else forms).items()}
    if alt is not None:
        progs["exchange first"] = _compile(alt, None, x)
    for k, p in progs.items():
        err = check_output(p(x), expected, plan.dst)
        if err is not None:
            raise RuntimeError(f"{plan}: form {k} is wrong: {err}")
    return progs, x


def case_plans(name: str, first: str | None) -> tuple[Plan, Plan | None]:
    """The case's plan and, with ``first`` (the type between them), its swap run before its permute."""
    case = _case(name)
    src, dst = case.src_type, case.dst_type
    plan = redistribute(src, dst, src.mesh)
    if first is None:
        return plan, None
    mid = parse(first, src.mesh)
    return plan, Plan.build(src, redistribute(src, mid, src.mesh).steps + redistribute(mid, dst, src.mesh).steps)


def _plans() -> list[tuple[str, Plan, Plan | None]]:
    out = [(name, *case_plans(name, first)) for name, first in CASES]
    for axes, src, dst in SWAPS:
        mesh = Mesh(axes)
        s, d = parse(src, mesh), parse(dst, mesh)
        out.append((f"{src} -> {dst}", Plan.build(s, (Exchange(d.dims),)), None))
    return out


def table(seconds: float, runs: int) -> list[str]:
    lines = ["| case | form | median ms | current / form: median [quartiles] | per-run medians | "
             "collectives | local writes KiB | layout ops |", "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for name, plan, alt in _plans():
        progs, x = programs(plan, alt)
        pooled: dict[str, list[float]] = {k: [] for k in progs}
        ms: dict[str, list[float]] = {k: [] for k in progs}
        per_run: dict[str, list[float]] = {k: [] for k in progs}
        for _ in range(runs):
            t = round_robin_times({n: thunk(p, x) for n, p in progs.items()}, seconds)
            for k in progs:
                r = [a / b for a, b in zip(t["current"], t[k])]
                pooled[k] += r
                ms[k] += t[k]
                per_run[k].append(statistics.median(r))
        for k, p in progs.items():
            text = p.as_text()
            kinds = " + ".join(c.kind for c in parse_collectives(text).collectives)
            lw = local_writes(text)
            q = np.quantile(pooled[k], [0.25, 0.5, 0.75])
            layout = ", ".join(op for op, _ in lw.layout_ops) or "-"
            lines.append(f"| {name} | {k} | {statistics.median(ms[k]) * 1e3:.3f} | {q[1]:.3f} "
                         f"[{q[0]:.3f}, {q[2]:.3f}] | {', '.join(f'{v:.3f}' for v in per_run[k])} | {kinds} | "
                         f"{lw.bytes_written // 1024} | {layout} |")
            print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = suite_parser("studies.exchange_forms", __doc__)
    parser.add_argument("--seconds", type=at_least(0, float), default=4.0, help="timing budget per case and run")
    parser.add_argument("--runs", type=at_least(1, int), default=3, help="interleaved runs per case")
    args = parser.parse_args(argv)
    print(f"Command: `python -m benchmarks.studies.exchange_forms --seconds {args.seconds} --runs {args.runs}`")
    table(args.seconds, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
