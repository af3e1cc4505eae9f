"""Tactics: how users say which inputs to shard, kept apart from the model code.

Values are named by pytree path, ``argname/key/...`` for inputs (``params/w1``, ``batch/x``) and
``out/...`` for outputs. A name matches a path equal to it, a path ending in ``/name``, or every
path under it (``opt_state`` matches all optimizer state leaves). Tactics are applied in order,
each followed by propagation to a fixpoint; a tactic may only add axes (refine), so a later one
never undoes an earlier one: asking for an axis a value already uses is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from partir_core.control import stacked_inputs
from partir_core.errors import AxisUsedTwiceError, IndivisibleDimError, TacticError, UnknownInputError
from partir_core.experts import by_expert, expert_region
from partir_core.ir import Program, Value, is_key
from partir_core.propagate import Layout, Propagator, clashes
from spmd_types import Axis, Mesh


@dataclass(frozen=True)
class TacticRecord:
    """What one tactic did: its own settings and every layout that changed (by propagation too)."""

    tactic: str
    set_by_tactic: tuple[tuple[str, Layout], ...]
    changed: tuple[tuple[int, Layout], ...]
    notes: tuple[str, ...] = ()


def _axes(axis: str | Sequence[str]) -> tuple[str, ...]:
    return (axis,) if isinstance(axis, str) else tuple(axis)


def matching(program: Program, name: str) -> list[tuple[str, Value]]:
    """Values whose path matches ``name`` (inputs, or outputs for ``out/...``); raises if none."""
    pairs: list[tuple[str, Value]] = list(zip(program.input_paths, program.inputs))
    pairs += [(p, v) for p, v in zip(program.output_paths, program.outputs) if isinstance(v, Value)]
    hits = [(p, v) for p, v in pairs if p == name or p.endswith("/" + name) or p.startswith(name + "/")]
    if not hits:
        known = ", ".join(program.input_paths)
        raise UnknownInputError(f"no input or output path matches {name!r}; inputs are: {known}")
    return hits


class _Ctx:
    def __init__(self, program: Program, mesh: Mesh, prop: Propagator) -> None:
        self.program, self.mesh, self.prop = program, mesh, prop
        self.set: list[tuple[str, Layout]] = []
        self.notes: list[str] = []

    def add_axes(self, path: str, v: Value, dim: int, axes: tuple[str, ...]) -> None:
        if not -len(v.shape) <= dim < len(v.shape):
            raise TacticError(f"{path} has rank {len(v.shape)} (shape {list(v.shape)}); dimension {dim} does not exist")
        dim %= len(v.shape)
        if is_key(v.dtype):
            raise TacticError(f"{path} is a PRNG key ({v.dtype}); keys stay replicated, shard the values "
                              "drawn from it instead")
        for a in axes:
            self.mesh.axis_size(a)  # UnknownAxisError names it
        if v.id in self.prop.pinned:
            raise TacticError(f"{path} is pinned by an earlier Pin tactic; it cannot be sharded further")
        cur = list(self.prop.layouts[v.id])
        used = [a for ax in cur for a in ax]
        for a in axes:
            if clashes(self.mesh, [a], used) or axes.count(a) > 1:
                where = next((d for d, ax in enumerate(cur) if clashes(self.mesh, [a], ax)), dim)
                raise AxisUsedTwiceError(
                    f"{path} already uses mesh axis {a!r} (dimension {where}, layout "
                    f"{_fmt(tuple(cur))}); sharding dimension {dim} over it too would use it twice")
        new: tuple[Axis, ...] = cur[dim] + axes
        k = math.prod(self.mesh.axis_size(a) for a in new)
        if v.shape[dim] % k:
            err = IndivisibleDimError(
                f"{path} dimension {dim} has size {v.shape[dim]}, not divisible by {k} "
                f"(axes {', '.join(f'{a}={self.mesh.axis_size(a)}' for a in new)})")
            if path in self.program.input_paths:  # what uneven="pad" needs to pad it
                err.leaf, err.dim, err.multiple = self.program.input_paths.index(path), dim, k
            raise err
        cur[dim] = new
        self.prop.layouts[v.id] = tuple(cur)
        self.set.append((path, tuple(cur)))


def _fmt(layout: Layout) -> str:
    return "[" + ",".join("@(" + ",".join(map(str, a)) + ")" if a else "_" for a in layout) + "]"


@dataclass(frozen=True)
class Shard:
    """Shard ``target`` dimension ``dim`` over ``axis``; ``target`` may map names to dims:
    ``Shard({"w1": 1, "w2": 0}, axis="model")``.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Pin, Shard, ShardParams, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> mesh = Mesh({"data": 2, "model": 4})
        >>> p = partition(f, mesh, [Shard("x", dim=0, axis="data"), Shard("w", dim=1, axis="model")])
        >>> bool(np.allclose(p(x, w), f(x, w))), [str(t) for t in p.analysis.lowered.in_types]
        (True, ['f32[8@data,16]', 'f32[16,32@model]'])
        >>> Shard("x", axis="data")
        Traceback (most recent call last):
        partir_core.errors.TacticError: Shard('x') needs dim=...

    Raises:
        TacticError: no ``dim`` for a single target, a ``dim`` beside a mapping, or no ``axis``.
    """

    targets: tuple[tuple[str, int], ...]
    axis: tuple[str, ...]

    def __init__(self, target: str | Mapping[str, int], dim: int | None = None,
                 axis: str | Sequence[str] = "") -> None:
        targets: tuple[tuple[str, int], ...]
        if isinstance(target, str):
            if dim is None:
                raise TacticError(f"Shard({target!r}) needs dim=...")
            targets = ((target, int(dim)),)
        else:
            if dim is not None:
                raise TacticError("Shard with a {name: dim} mapping takes no dim=")
            targets = tuple((str(k), int(d)) for k, d in target.items())
        if not axis:
            raise TacticError(f"Shard({target!r}) needs axis=...")
        object.__setattr__(self, "targets", targets)
        object.__setattr__(self, "axis", _axes(axis))

    def __str__(self) -> str:
        t = ", ".join(f"{n}:{d}" for n, d in self.targets)
        return f"Shard({t} over {','.join(self.axis)})"

    def apply(self, ctx: _Ctx) -> None:
        for name, dim in self.targets:
            for path, v in matching(ctx.program, name):
                ctx.add_axes(path, v, dim, self.axis)


@dataclass(frozen=True)
class ShardParams:
    """ZeRO-style: shard every leaf under ``target`` (default: the function's first argument)
    over ``axis``, along the dimension the policy picks. ``largest_dim``: the largest local
    dimension the axis divides. Leaves that already use the axis, are pinned, or have no
    divisible dimension are skipped (and say so in explain()). A dimension a ``scan`` reads as
    stacked (the layer dimension of stacked layer parameters) is never picked: every device runs
    every layer, so sharding it would only make the loop gather it whole.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Pin, Shard, ShardParams, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> mesh = Mesh({"data": 2, "model": 4})
        >>> p = partition(f, mesh, [ShardParams("model", target="w")])
        >>> bool(np.allclose(p(x, w), f(x, w))), [str(t) for t in p.analysis.lowered.in_types]
        (True, ['f32[8,16]', 'f32[16,32@model]'])
    """

    axis: str
    policy: str = "largest_dim"
    target: str | None = None

    def __str__(self) -> str:
        return f"ShardParams({self.target or '<first argument>'} over {self.axis}, {self.policy})"

    def apply(self, ctx: _Ctx) -> None:
        if self.policy not in ("largest_dim", "first_dim"):
            raise TacticError(f"unknown ShardParams policy {self.policy!r}; use 'largest_dim' or 'first_dim'")
        n = ctx.mesh.axis_size(self.axis)
        target = self.target or ctx.program.input_paths[0].split("/")[0]
        stacked = stacked_inputs(ctx.program)
        for path, v in matching(ctx.program, target):
            lay = ctx.prop.layouts[v.id]
            if is_key(v.dtype):
                ctx.notes.append(f"{path}: skipped (a PRNG key)")
                continue
            if v.id in ctx.prop.pinned or any(self.axis in ax for ax in lay):
                ctx.notes.append(f"{path}: skipped ({'pinned' if v.id in ctx.prop.pinned else 'already uses ' + self.axis})")
                continue
            shards = [math.prod(ctx.mesh.axis_size(a) for a in ax) for ax in lay]
            ok = [d for d in range(len(v.shape))
                  if v.shape[d] % (shards[d] * n) == 0 and d not in stacked.get(v.id, ())]
            if not ok:
                ctx.notes.append(f"{path}: skipped (no dimension divisible by {n})")
                continue
            if self.policy == "largest_dim":
                d = max(ok, key=lambda d: (v.shape[d] // shards[d], -d))
            else:
                d = ok[0]
            ctx.add_axes(path, v, d, (self.axis,))


@dataclass(frozen=True)
class Pin:
    """Freeze the current layout of ``target`` values (inputs or ``out/...`` outputs):
    propagation and later tactics leave them as they are (e.g. ZeRO-2 keeps parameters whole).

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Pin, Shard, ShardParams, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> mesh = Mesh({"data": 2, "model": 4})
        >>> p = partition(f, mesh, [Pin("w"), Shard("x", dim=0, axis="data"), ShardParams("model", target="w")])
        >>> bool(np.allclose(p(x, w), f(x, w))), [str(t) for t in p.analysis.lowered.in_types]  # w stays whole
        (True, ['f32[8@data,16]', 'f32[16,32]'])
    """

    targets: tuple[str, ...] = field(default=())

    def __init__(self, *targets: str) -> None:
        object.__setattr__(self, "targets", tuple(targets))

    def __str__(self) -> str:
        return f"Pin({', '.join(self.targets)})"

    def apply(self, ctx: _Ctx) -> None:
        for name in self.targets:
            for _, v in matching(ctx.program, name):
                ctx.prop.pinned.add(v.id)


@dataclass(frozen=True)
class ShardExperts:
    """Expert parallelism (GShard/Switch): shard the expert dimension of the expert weights
    ``target`` (name -> dimension) over ``axis`` and lay out the whole expert computation by
    expert: the dispatched tokens, the expert activations, their cotangents, the weights'
    gradients and optimizer state (``partir_core.experts.expert_region``). Where an earlier
    tactic put ``axis`` on another dimension of those values (the batch, under BP), it moves to
    the expert dimension, so each device keeps its experts' weights in place and the lowering
    sends the tokens to them by all-to-all (and back before the combine) instead of gathering
    the weights. This is the one tactic that replaces axes an earlier one set, and only inside
    the expert region; values outside it keep their layouts. Apply it after the batch tactic:
    applied first, the region's layout would spread by propagation into the dispatch and the
    router, and the tokens would be gathered instead.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, ShardExperts, partition
        >>> from spmd_types import Mesh
        >>> def f(h, d, w):  # tokens (batch, seq, model), dispatch mask (batch, seq, expert, slot)
        ...     xe = jnp.einsum("bsec,bsd->becd", d, h)  # each expert's slots
        ...     return jnp.einsum("bsec,becf->bsf", d, jnp.tanh(jnp.einsum("becd,edf->becf", xe, w)))
        >>> h, w = np.ones((4, 6, 8), np.float32), np.ones((2, 8, 8), np.float32)
        >>> d = np.eye(6, dtype=np.float32)[np.arange(6) % 6].reshape(1, 6, 2, 3).repeat(4, 0)
        >>> mesh = Mesh({"data": 2})
        >>> tactics = [Shard({"h": 0, "d": 0}, axis="data"), ShardExperts({"w": 0}, axis="data")]
        >>> p = partition(f, mesh, tactics)
        >>> bool(np.allclose(p(h, d, w), f(h, d, w))), p.simulate().counts()  # tokens there and back
        (True, {'all_to_all': 2})

    Raises:
        TacticError: an expert dimension that does not exist or a pinned weight.
        IndivisibleDimError: the axis does not divide the number of experts.
    """

    targets: tuple[tuple[str, int], ...]
    axis: tuple[str, ...]

    def __init__(self, target: Mapping[str, int], axis: str | Sequence[str]) -> None:
        if not axis:
            raise TacticError(f"ShardExperts({dict(target)!r}) needs axis=...")
        object.__setattr__(self, "targets", tuple((str(k), int(d)) for k, d in target.items()))
        object.__setattr__(self, "axis", _axes(axis))

    def __str__(self) -> str:
        t = ", ".join(f"{n}:{d}" for n, d in self.targets)
        return f"ShardExperts({t} over {','.join(self.axis)})"

    def apply(self, ctx: _Ctx) -> None:
        seeds = []
        for name, dim in self.targets:
            for path, v in matching(ctx.program, name):
                if not -len(v.shape) <= dim < len(v.shape):
                    raise TacticError(f"{path} has rank {len(v.shape)} (shape {list(v.shape)}); "
                                      f"expert dimension {dim} does not exist")
                if v.id in ctx.prop.pinned:
                    raise TacticError(f"{path} is pinned by an earlier Pin tactic; its experts cannot be sharded")
                seeds.append((v.id, dim % len(v.shape)))
                _check_divides(ctx, path, v, dim % len(v.shape), self.axis)
        region = expert_region(ctx.prop, seeds)
        values = {v.id: v for v in ctx.program.values()}
        paths = {v.id: p for p, v in zip(ctx.program.input_paths, ctx.program.inputs)}
        moved = 0
        for vid, dim in region.items():
            if vid in ctx.prop.pinned:
                continue
            old = ctx.prop.layouts[vid]
            new = by_expert(ctx.mesh, old, dim, self.axis)
            if new == old:
                continue
            if values[vid].shape[dim] % math.prod(ctx.mesh.axis_size(a) for a in new[dim]):
                continue  # already split over other axes the expert count cannot take as well
            moved += any(a for d, ax in enumerate(old) if d != dim for a in ax if a in self.axis)
            ctx.prop.layouts[vid] = new
            if vid in paths:
                ctx.set.append((paths[vid], new))
        ctx.notes.append(f"expert region: {len(region)} values by expert over {','.join(self.axis)}; "
                         f"{moved} moved the axis off another dimension (their tokens travel by all-to-all)")


def _check_divides(ctx: _Ctx, path: str, v: Value, dim: int, axes: tuple[str, ...]) -> None:
    cur = tuple(a for a in ctx.prop.layouts[v.id][dim] if a not in axes) + axes
    k = math.prod(ctx.mesh.axis_size(a) for a in cur)
    if v.shape[dim] % k:
        raise IndivisibleDimError(f"{path} has {v.shape[dim]} experts (dimension {dim}), not divisible by {k} "
                                  f"(axes {', '.join(f'{a}={ctx.mesh.axis_size(a)}' for a in cur)}); "
                                  "choose an axis whose size divides the number of experts")


Tactic = Shard | ShardParams | Pin | ShardExperts


def apply_schedule(program: Program, mesh: Mesh, prop: Propagator,
                   schedule: Sequence[Tactic]) -> list[TacticRecord]:
    """Apply tactics in order, propagating to a fixpoint after each one."""
    records = []
    for t in schedule:
        if not isinstance(t, (Shard, ShardParams, Pin, ShardExperts)):
            raise TacticError(f"not a tactic: {t!r}")
        before = dict(prop.layouts)
        ctx = _Ctx(program, mesh, prop)
        t.apply(ctx)
        prop.run()
        changed = tuple(sorted((k, lay) for k, lay in prop.layouts.items() if before.get(k) != lay))
        records.append(TacticRecord(str(t), tuple(ctx.set), changed, tuple(ctx.notes)))
    return records
