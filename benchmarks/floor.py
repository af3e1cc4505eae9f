"""The collective floor of a compiled program: its collectives alone, with no local work.

Why: a structural tie (``benchmarks.speed.Row.structural_tie``) says where 1.0x is the best
either side can reach, but not what the other cases could reach. Whatever a lowering does around
its collectives, the program cannot run faster than the collectives themselves on their cheapest
layout. So each collective of a compiled module is rebuilt bare (``bare_program``): the same kind,
the same device groups (or permute pairs), the same element count and item size, on a flat buffer
whose split or gathered dimension is the leading one (no slicing, transposing or joining around
it), as its own ``shard_map`` program. The floor of a module is the sum of its collectives' bare
times less one dispatch per extra program (a real program dispatches once), measured interleaved
with the programs it bounds (``benchmarks.harness.round_robin``).

A plan's ceiling against XLA is then ``t_xla / min(floor(ours), floor(xla))``: no lowering of
either side's collectives beats it on this backend. It is not a bound over every conceivable
program (other collectives might be cheaper still), only over the two collective sequences the
two partitioners chose. ``benchmarks.floor_passes`` tightens it with the local passes XLA:CPU
forces around those collectives (the refined floor); this collective-only floor is kept beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from redist.hlo import Collective, HloCollectives, collective_key

_FLOATS = {2: jnp.bfloat16, 4: jnp.float32, 8: jnp.float64}
_BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}
_REDUCING = ("all-reduce", "reduce-scatter")


class Bare(NamedTuple):
    """One collective rebuilt alone: its compiled program and the input it runs on."""

    kind: str
    run: Callable[[], Any]
    hlo: str  # the compiled program's text (tests read its one collective)
    device_ids: tuple[int, ...]  # the device of each of its partition ids (a grouped mesh reorders them)


def _dtype(c: Collective) -> Any:
    """A float of the operand's width where the collective adds (XLA:CPU widens 16-bit float sums
    as it would in the program), else unsigned bits of that width: moving values needs no
    arithmetic, and 16-bit floats would be widened around the collective (``redist.executor``
    moves them as bits too)."""
    size = c.operand_bytes // max(c.operand_elements, 1)
    return (_FLOATS if c.kind in _REDUCING else _BITS).get(size, jnp.float32)


def _grouped_mesh(devices: np.ndarray, groups: tuple[tuple[int, ...], ...]) -> jax.sharding.Mesh | None:
    """A mesh whose rows are the replica groups (partition ids index ``devices``), or ``None``
    when the groups are not an equal-size partition of every device."""
    sizes = {len(g) for g in groups}
    members = sorted(i for g in groups for i in g)
    if len(sizes) != 1 or members != list(range(devices.size)):
        return None
    return jax.sharding.Mesh(np.array([[devices[i] for i in g] for g in groups]), ("o", "g"))


def _body(c: Collective, p: int) -> Callable[[Any], Any]:
    """The bare collective on one device's flat buffer, split or gathered along its leading dim."""
    if c.kind == "all-gather":
        return lambda v: jax.lax.all_gather(v, "g", tiled=True)
    if c.kind == "all-to-all":
        return lambda v: jax.lax.all_to_all(v.reshape(p, -1), "g", 0, 0, tiled=True).reshape(-1)
    if c.kind == "all-reduce":
        return lambda v: jax.lax.psum(v, "g")
    if c.kind == "reduce-scatter":
        return lambda v: jax.lax.psum_scatter(v, "g", scatter_dimension=0, tiled=True)
    raise ValueError(f"no bare form for {c.kind}")


def _compiled(kind: str, fn: Callable[[Any], Any], mesh: jax.sharding.Mesh, axes: Any, elements: int | tuple[int, ...],
              dtype: Any) -> Bare:
    """``fn`` under ``shard_map`` on a buffer of ``elements`` per device (a flat count, or a block
    shape whose leading dimension is split over the devices)."""
    spec = P(axes)
    block = (elements,) if isinstance(elements, int) else elements
    shape = (mesh.size * block[0], *block[1:])
    # from a host callback, not device_put: across jax.distributed processes each one builds only
    # its addressable blocks (benchmarks.multiprocess --floor)
    x = jax.make_array_from_callback(shape, NamedSharding(mesh, spec), lambda i: _ones(shape, i, dtype))
    prog = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    exe = prog.lower(x).compile()
    return Bare(kind, lambda: exe(x), exe.as_text() or "", tuple(d.id for d in mesh.devices.flat))


def _ones(shape: tuple[int, ...], index: Any, dtype: Any) -> np.ndarray:
    """Ones in the block ``index`` (a tuple of slices) of an array of ``shape``."""
    return np.ones([len(range(*k.indices(n))) for k, n in zip(index, shape)], dtype)


def bare_program(c: Collective, devices: np.ndarray) -> Bare | None:
    """``c`` alone on its cheapest layout, or ``None`` where it has no bare form here (groups that
    do not partition the devices, or a kind without one)."""
    elements, dtype = max(c.operand_elements, 1), _dtype(c)
    if c.kind == "collective-permute":
        pairs = [(s, t) for s, t in c.groups if s != t]
        if not pairs:
            return None
        flat = jax.sharding.Mesh(devices, ("d",))
        return _compiled(c.kind, lambda v: jax.lax.ppermute(v, "d", pairs), flat, "d", elements, dtype)
    mesh = _grouped_mesh(devices, c.groups)
    if mesh is None or c.kind not in ("all-gather", "all-to-all", *_REDUCING):
        return None
    p = mesh.shape["g"]
    if c.kind in ("all-to-all", "reduce-scatter") and elements % p:
        return None
    return _compiled(c.kind, _body(c, p), mesh, ("o", "g"), elements, dtype)


def bare_thunks(sides: dict[str, HloCollectives], devices: np.ndarray) -> tuple[dict[str, Callable[[], Any]],
                                                                              dict[str, list[str]]]:
    """One thunk per distinct collective of the sides' modules (named ``bare:<kind>:<n>``) plus
    ``dispatch``, and per side the names its floor sums; a side with a collective that has no
    bare form gets no floor."""
    thunks: dict[str, Callable[[], Any]] = {"dispatch": dispatch_program(devices).run}
    names: dict[tuple[Any, ...], str | None] = {}
    uses: dict[str, list[str]] = {}
    for side, h in sides.items():
        mine: list[str] | None = []
        for c in h.collectives:
            key = (*collective_key(c), c.operand_bytes)
            if key not in names:
                b = bare_program(c, devices)
                names[key] = None if b is None else f"bare:{c.kind}:{len(thunks)}"
                if b is not None and (n := names[key]) is not None:
                    thunks[n] = b.run
            name = names[key]
            mine = None if mine is None or name is None else [*mine, name]
        if mine is not None:
            uses[side] = mine
    return thunks, uses


def dispatch_program(devices: np.ndarray) -> Bare:
    """A program doing nearly nothing on every device: the cost of one dispatch, which a sum of
    separately run bare collectives counts once per collective and a real program once."""
    flat = jax.sharding.Mesh(devices, ("d",))
    return _compiled("dispatch", lambda v: v + 1, flat, "d", 1, jnp.float32)


def ceiling_over(xla_s: float, floors: list[float], speedup: float) -> float:
    """The speedup no lowering of either side's collectives beats: XLA's time over the lesser
    floor, at least the speedup measured (``nan`` without a floor)."""
    return max(speedup, xla_s / min(floors)) if floors else math.nan


def floor_s(times: list[float], dispatch_s: float) -> float:
    """A module's floor from its bare collectives' median times (see the module docstring)."""
    return sum(times) - max(len(times) - 1, 0) * dispatch_s if times else dispatch_s
