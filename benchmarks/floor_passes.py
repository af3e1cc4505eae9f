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

from benchmarks.floor import _BITS, Bare, _compiled
from benchmarks.hlo import Collective, HloCollectives
from spmd_types import ShardingType

_REDUCING = ("all-reduce", "reduce-scatter")
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


def _dtype(name: str) -> Any:
    return _NAMES.get(name) or jnp.dtype(name.replace("u", "uint") if name[0] == "u" else name)


def _bits(itemsize: int) -> str:
    return jnp.dtype(_BITS[itemsize]).name.replace("uint", "u")


def _body(p: Pass) -> Callable[[Any], Any]:
    """The pass on one device's flat buffer: the reorder, then the conversion (one fusion)."""
    src, dst = _dtype(p.src), _dtype(p.dst)
    same_width = jnp.dtype(src).itemsize == jnp.dtype(dst).itemsize

    def body(v: Any) -> Any:
        if p.shape is not None:
            a, n, b = p.shape
            v = v.reshape(n, a, b) if p.rule == "interleave" else v.reshape(a, n, b)
            v = v.transpose(1, 0, 2).reshape(-1)
        if src == dst:
            return v
        return jax.lax.bitcast_convert_type(v, dst) if same_width else v.astype(dst)

    return body


def pass_program(p: Pass, devices: np.ndarray) -> Bare:
    """``p`` alone on every device, as its own ``shard_map`` program."""
    flat = jax.sharding.Mesh(devices, ("d",))
    return _compiled(p.rule, _body(p), flat, "d", p.elements, _dtype(p.src))


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
    inter = _chunk_reorder(src, dst, last, "interleave") if len(cs) == 1 and last.kind == "all-gather" else None
    n = dst.local_size
    if inter:
        out.append(Pass("interleave", n, _bits(src.itemsize), "bf16" if bf16 else _bits(src.itemsize), inter))
    elif bf16 and last.kind in _REDUCING:
        out.append(Pass("narrow-out", n, "f32", "bf16"))
    elif bf16 and last.kind in ("all-gather", "collective-permute"):
        out.append(Pass("bits-out", n, "u16", "bf16"))
    return tuple(out)


def _chunk_reorder(src: ShardingType, dst: ShardingType, c: Collective, rule: str) -> tuple[int, int, int] | None:
    """For a lone all-gather (``interleave``) or reduce-scatter (``split``) over ``c``'s groups:
    ``None`` where each device's destination (source) block is ``p`` contiguous chunks, each held
    in the source (destination) by one group member in order, else the reorder ``(a, p, b)`` with
    ``b`` the gcd of the runs one member holds. ``None`` too where the sizes do not match a lone
    collective (then no rule is claimed)."""
    mine, theirs = (dst, src) if rule == "interleave" else (src, dst)
    p = max(len(g) for g in c.groups)
    if c.operand_elements * (p if rule == "interleave" else 1) != mine.local_size:
        return None
    shapes: set[tuple[int, int, int]] = set()
    for g in c.groups:
        for d in g:
            owner = _owners(mine, theirs, d, g)
            if owner is None or owner.size % len(g):
                return None
            if not _in_chunks(owner, len(g)):
                b = math.gcd(*np.diff(np.flatnonzero(np.diff(owner, prepend=-2, append=-3))).tolist())
                shapes.add((owner.size // (len(g) * b), len(g), b))
    return min(shapes, key=lambda s: s[2]) if shapes else None


def _owners(mine: ShardingType, theirs: ShardingType, d: int, group: Sequence[int]) -> np.ndarray | None:
    """For each element of ``d``'s block of ``mine`` (row-major), the position in ``group`` of a
    member whose block of ``theirs`` holds it; ``None`` where some element has no holder."""
    lo = [np.arange(a, b) for a, b in mine.block(d)]
    owner = np.full(math.prod(len(r) for r in lo), -1)
    for i, m in reversed(list(enumerate(group))):
        masks = [(r >= a) & (r < b) for r, (a, b) in zip(lo, theirs.block(m))]
        held = np.ones((), bool)
        for mk in masks:
            held = np.multiply.outer(held, mk)
        owner[held.reshape(-1)] = i
    return None if (owner < 0).any() else owner


def _in_chunks(owner: np.ndarray, p: int) -> bool:
    """``owner`` is ``p`` equal chunks, each held by one member, no member twice (the groups are
    compared as sets, so a program may order a group's members as it likes)."""
    chunks = owner.reshape(p, -1)
    return bool((chunks == chunks[:, :1]).all()) and len(set(chunks[:, 0].tolist())) == p


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
                thunks[names[p]] = pass_program(p, devices).run
    return thunks, {side: [names[p] for p in ps] for side, ps in passes.items()}
