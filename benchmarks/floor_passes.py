"""The local passes XLA:CPU cannot avoid around a side's collectives: the refined floor.

Why: the collective floor (``benchmarks.floor``) times a program's collectives alone, so its
ceiling assumes the lowering does no local work at all. On XLA:CPU some passes are forced by the
backend whatever the lowering does, and the refined floor adds a bare program for each (one
``kLoop`` fusion over a flat buffer, timed in the same round robin). The rules, each from
compiled HLO (docs/design.md section 11):

- ``bits-out``: XLA:CPU has no bf16 collective (float normalization widens every bf16
  all-gather, all-to-all, permute and reduction to f32; f16 is native). Moving bf16 as ``u16``
  bits still needs a ``bitcast-convert`` u16 -> bf16 of the result, which XLA:CPU emits as a
  ``kLoop`` fusion (``zero3_full_gather``: ``all-gather u16[2048,512]`` then
  ``wrapped_bitcast-convert``). So when a bf16 destination comes out of a gather or permute, the
  destination block is written in one more pass. Not after an all-to-all: XLA:CPU's all-to-all is
  the tuple form (one buffer per peer) joined by a concatenate fusion, which the bare all-to-all
  already contains and the bitcast fuses into (``seq_to_hidden``: ``copy_bitcast_fusion``).
- ``narrow-out``: a bf16 sum is reduced in f32, so when the last collective reduces, its f32
  result is converted to bf16 over the destination block (``tp_allreduce`` under Shardy:
  ``all-reduce f32`` then ``wrapped_convert.1``).
- ``widen-in``: for the same reason a bf16 source whose first collective reduces is converted to
  f32 over that collective's operand before it (``convert_bitcast_fusion`` / ``wrapped_convert``).
- ``interleave``: a single all-gather delivers peer ``i``'s operand as the ``i``-th contiguous
  chunk of its result (XLA:CPU gives the gathered dimension the major layout: ``hidden_gather``
  under Shardy gathers ``f32[4,256,512]{1,0,2}`` between two copy fusions; our executor gathers
  on a new leading dimension and copies). When a destination block is not ``p`` chunks each held
  by one group member in the source, every program with that one all-gather writes the
  destination in an interleaving pass (fused with ``bits-out`` for bf16).
- ``slice-out``: a collective's result is its own buffer and the program's output another, so
  where the last collective (not an all-to-all, whose join is in the bare one) yields more than
  the destination block, the block is cut out in one pass (``unreduced_to_hidden`` on both sides:
  ``all-reduce f32[4,256,512]`` then a ``dynamic-slice`` fusion to ``f32[4,256,128]``), timed as
  the cheapest cut, a contiguous one. The bf16 rules above write the destination anyway and fuse it.
- ``all-to-all`` (strides): the bare all-to-all already holds XLA:CPU's slice fusions (one send
  buffer per peer) and its concatenate join, but on a flat buffer, where each piece is one
  contiguous run. A lone all-to-all between real types reads each peer's piece in runs of ``b``
  out of the source block seen as ``[a, p, b]`` and writes it in runs of ``b'`` into the
  destination seen as ``[a', p, b']`` (``seq_to_hidden``: ``bitcast_slice_fusion``
  ``u16[4,128,1,128]`` out of ``[4,128,512]``); those runs are fixed by the two types, so the
  refined floor times the same all-to-all on those strides in place of the flat one (the bitcast
  fused into the join for bf16, the join written in the destination block's shape).
- ``split``: the mirror image for a single reduce-scatter: peer ``i`` receives the reduced
  ``i``-th contiguous chunk of the operand, so when a source block is not ``p`` chunks each
  destined to one member, it is reordered in one pass before (fused with ``widen-in``).

Only what the side's own collective sequence forces is added (a pass that a cleverer lowering of
the same collectives could skip is not), so the refined floor stays a lower bound over those
collective sequences; passes between collectives are left out (conservative).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.floor import _BITS, _REDUCING, Bare, _compiled, _grouped_mesh
from redist.hlo import Collective, HloCollectives
from spmd_types import ShardingType

_NAMES = {"bf16": jnp.bfloat16, "f32": jnp.float32}


class Pass(NamedTuple):
    """One unavoidable local pass: ``elements`` per device read as ``src`` and written as ``dst``
    (dtype names: ``u16``, ``bf16``, ``f32``, or bits of another width), optionally through a
    reorder of ``(a, p, b)``: ``[p, a, b] -> [a, p, b]`` (``interleave``) or the reverse (``split``)."""

    rule: str
    elements: int
    src: str
    dst: str
    shape: tuple[int, int, int] | None = None
    read: int = 0  # ``slice-out``: the elements of the collective result the destination is cut from
    join: tuple[int, int, int] | None = None  # ``all-to-all``: the destination's ``(a, p, b)``
    groups: tuple[tuple[int, ...], ...] = ()  # ``all-to-all``: its device groups
    out_shape: tuple[int, ...] = ()  # ``all-to-all``: the destination block's shape


def _dtype(name: str) -> Any:
    return _NAMES.get(name) or jnp.dtype(name.replace("u", "uint") if name[0] == "u" else name)


def _bits(itemsize: int) -> str:
    return jnp.dtype(_BITS[itemsize]).name.replace("uint", "u")


def _body(p: Pass) -> Callable[[Any], Any]:
    """The pass on one device's block: the reorder, then the conversion (one fusion)."""
    src, dst = _dtype(p.src), _dtype(p.dst)
    same_width = jnp.dtype(src).itemsize == jnp.dtype(dst).itemsize

    def body(v: Any) -> Any:
        if p.shape is not None:
            v = v.transpose(1, 0, 2)
        if p.read:
            v = v[: p.elements]
        if src == dst:
            return v
        return jax.lax.bitcast_convert_type(v, dst) if same_width else v.astype(dst)

    return body


def _strided_all_to_all(p: Pass, devices: np.ndarray) -> Bare | None:
    """A lone all-to-all on the strides its types force: each peer's piece read out of the
    source block as ``[a, p, b]`` (runs of ``b``), sent, and joined into the destination as
    ``[a', p, b']`` (fused with the bitcast for bf16), as XLA:CPU's tuple all-to-all does it. The
    join is written in the destination block's shape: the same join into ``[a', p, b']`` ran about
    2x faster (``hidden_to_seq``), but XLA folds any later reshape to the destination's shape into
    the fusion (an ``optimization_barrier`` between them is dropped too), so no program gets it."""
    mesh = _grouped_mesh(devices, p.groups)
    if mesh is None or p.shape is None or p.join is None:
        return None
    (_, n, _), (a2, _, b2) = p.shape, p.join
    src, dst = _dtype(p.src), _dtype(p.dst)

    def body(v: Any) -> Any:
        y = jax.lax.all_to_all(v, "g", 1, 1, tiled=True)  # [a, p, b]: peer j's piece at [:, j, :]
        y = y.transpose(1, 0, 2).reshape(n, a2, b2).transpose(1, 0, 2).reshape(p.out_shape)
        return y if src == dst else jax.lax.bitcast_convert_type(y, dst)

    return _compiled("all-to-all", body, mesh, ("o", "g"), p.shape, src)


def pass_program(p: Pass, devices: np.ndarray) -> Bare | None:
    """``p`` alone on every device, as its own ``shard_map`` program. A reorder runs on its 3-D
    block (``[p, a, b]`` for ``interleave``, ``[a, p, b]`` for ``split``), as lowerings write it:
    XLA:CPU runs the same transpose 4x slower from a flat buffer (the index arithmetic of
    reading a 3-D order out of one dimension), which would overstate the pass."""
    if p.rule == "all-to-all":
        return _strided_all_to_all(p, devices)
    flat = jax.sharding.Mesh(devices, ("d",))
    block: int | tuple[int, ...] = p.read or p.elements
    if p.shape is not None:
        a, n, b = p.shape
        block = (n, a, b) if p.rule == "interleave" else (a, n, b)
    return _compiled(p.rule, _body(p), flat, "d", block, _dtype(p.src))


def side_passes(src: ShardingType, dst: ShardingType, h: HloCollectives) -> tuple[Pass, ...]:
    """The passes the rules of the module docstring force on a side running ``h``'s collectives."""
    cs = h.collectives
    if not cs:
        return ()
    first, last, bf16 = cs[0], cs[-1], src.dtype == "bf16"
    out: list[Pass] = []
    split = _chunk_reorder(src, dst, first, "split") if len(cs) == 1 and first.kind == "reduce-scatter" else None
    if first.kind in _REDUCING and (bf16 or split):
        kind = "f32" if bf16 else _bits(src.itemsize)
        out.append(Pass("split" if split else "widen-in", first.operand_elements, "bf16" if bf16 else kind, kind,
                        split))
    if len(cs) == 1 and first.kind == "all-to-all":
        return _lone_all_to_all(src, dst, first)
    inter = _chunk_reorder(src, dst, last, "interleave") if len(cs) == 1 and last.kind == "all-gather" else None
    n = dst.local_size
    if inter:
        out.append(Pass("interleave", n, _bits(src.itemsize), "bf16" if bf16 else _bits(src.itemsize), inter))
    elif bf16 and last.kind in _REDUCING:
        out.append(Pass("narrow-out", n, "f32", "bf16"))
    elif bf16 and last.kind in ("all-gather", "collective-permute"):
        out.append(Pass("bits-out", n, "u16", "bf16"))
    elif last.kind != "all-to-all" and _result_elements(last) > n:
        out.append(Pass("slice-out", n, _bits(src.itemsize), _bits(src.itemsize), read=_result_elements(last)))
    return tuple(out)


def _lone_all_to_all(src: ShardingType, dst: ShardingType, c: Collective) -> tuple[Pass, ...]:
    """The strided all-to-all that replaces a lone all-to-all's flat bare form, where each
    device's source and destination blocks are a clean ``[a, p, b]`` of its group's pieces."""
    split, join = _pieces(src, dst, c), _pieces(dst, src, c)
    if split is None or join is None or c.operand_elements != src.local_size:
        return ()
    bits = _bits(src.itemsize)
    return (Pass("all-to-all", dst.local_size, bits, "bf16" if src.dtype == "bf16" else bits, split, join=join,
                 groups=c.groups, out_shape=dst.local_shape),)


def _pieces(mine: ShardingType, theirs: ShardingType, c: Collective) -> tuple[int, int, int] | None:
    """``(a, p, b)`` such that every device's block of ``mine``, viewed as ``[a, p, b]``, holds at
    ``[:, j, :]`` what the ``j``-th member (in order of appearance) holds in ``theirs``; ``None``
    where the blocks are not all so, alike."""
    shapes = set()
    for g in c.groups:
        for d in g:
            held = _held(mine, theirs, d, g)
            if (held.sum(axis=0) != 1).any() or held.shape[1] % len(g):
                return None
            owner = held.argmax(axis=0)
            shape = _runs(owner, len(g))
            order = owner.reshape(shape)[0, :, 0]
            if len(set(order.tolist())) != len(g) or not (owner.reshape(shape) == order[None, :, None]).all():
                return None
            shapes.add(shape)
    return shapes.pop() if len(shapes) == 1 else None


def _result_elements(c: Collective) -> int:
    """Elements of a (non-tuple) collective's result per device."""
    p = max(len(g) for g in c.groups) if c.kind != "collective-permute" else 1
    return {"all-gather": c.operand_elements * p, "reduce-scatter": c.operand_elements // p}.get(
        c.kind, c.operand_elements)


def _chunk_reorder(src: ShardingType, dst: ShardingType, c: Collective, rule: str) -> tuple[int, int, int] | None:
    """For a lone all-gather (``interleave``) or reduce-scatter (``split``) over ``c``'s groups:
    ``None`` where each device's destination (source) block is ``p`` contiguous chunks, each held
    whole in the source (destination) by one group member, else the reorder ``(a, p, b)`` with
    ``b`` the gcd of the runs one member holds. ``None`` too where the sizes do not match a lone
    collective (then no rule is claimed)."""
    mine, theirs = (dst, src) if rule == "interleave" else (src, dst)
    p = max(len(g) for g in c.groups)
    if c.operand_elements * (p if rule == "interleave" else 1) != mine.local_size:
        return None
    shapes: set[tuple[int, int, int]] = set()
    for g in c.groups:
        for d in g:
            held = _held(mine, theirs, d, g)
            if not held.any(axis=0).all() or held.shape[1] % len(g):
                return None
            chunks = held.reshape(len(g), len(g), -1).all(axis=2)  # [member, chunk]: member holds the chunk
            if not chunks.any(axis=0).all():
                shapes.add(_runs(held.argmax(axis=0), len(g)))
    return min(shapes, key=lambda s: s[2]) if shapes else None


def _runs(owner: np.ndarray, p: int) -> tuple[int, int, int]:
    """``(a, p, b)`` with ``b`` the gcd of the runs of equal ``owner`` (row-major)."""
    b = math.gcd(*np.diff(np.flatnonzero(np.diff(owner, prepend=-2, append=-3))).tolist())
    return owner.size // (p * b), p, b


def _held(mine: ShardingType, theirs: ShardingType, d: int, group: Sequence[int]) -> np.ndarray:
    """``[member, element]``: whether ``group``'s member holds in ``theirs`` each element of
    ``d``'s block of ``mine`` (row-major)."""
    ranges = [np.arange(a, b) for a, b in mine.block(d)]
    rows = []
    for m in group:
        held = np.ones((), bool)
        for r, (a, b) in zip(ranges, theirs.block(m)):
            held = np.multiply.outer(held, (r >= a) & (r < b))
        rows.append(held.reshape(-1))
    return np.array(rows)


def pass_thunks(passes: dict[str, tuple[Pass, ...]], devices: np.ndarray) -> tuple[dict[str, Callable[[], Any]],
                                                                                  dict[str, list[str]]]:
    """One thunk per distinct pass of the sides (named ``pass:<rule>:<n>``), and per side the
    names its refined floor adds to its collective floor."""
    thunks: dict[str, Callable[[], Any]] = {}
    names: dict[Pass, str] = {}
    for ps in passes.values():
        for p in ps:
            if p not in names:
                names[p] = f"pass:{p.rule}:{len(names)}"
                if (b := pass_program(p, devices)) is not None:
                    thunks[names[p]] = b.run
    return thunks, {side: [names[p] for p in ps if names[p] in thunks] for side, ps in passes.items()}


def refined_names(collectives: list[str], passes: list[str]) -> list[str]:
    """The programs a side's refined floor sums: its bare collectives and its passes, where a
    strided all-to-all (``pass:all-to-all:*``) stands in for the flat one it refines."""
    strided = any(n.startswith("pass:all-to-all:") for n in passes)
    return [*(n for n in collectives if not (strided and n.startswith("bare:all-to-all:"))), *passes]
