"""``partition(fn, mesh, schedule)``: trace, apply tactics with propagation, lower, run.

Tracing needs concrete shapes, so the work happens on the first call (or ``trace(*args)`` with
arrays or ``jax.ShapeDtypeStruct``s), cached per input signature like ``jax.jit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from partir_core.analysis import Analysis, analyze
from partir_core.emit import compile_lowered
from partir_core.explain import explain
from partir_core.pad import Padding, pad_inputs, slice_outputs
from partir_core.simulate import Simulation, simulate
from partir_core.tactics import Tactic
from spmd_types import Mesh


class FoundSchedule(Protocol):
    """What ``partir_core.auto`` returns (``AutoResult``), as ``partition`` reads it: a schedule
    and the mesh it was found on (a protocol, since ``auto`` itself partitions with this module)."""

    @property
    def schedule(self) -> tuple[Tactic, ...]: ...

    @property
    def mesh(self) -> Mesh: ...


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    import jax
    import numpy as np

    leaves, tree = jax.tree_util.tree_flatten(args)
    return (tree,) + tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x)))) for x in leaves)


class Partitioned:
    """A function partitioned by a schedule; call it like the original. ``partition`` builds it.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> p = partition(f, Mesh({"data": 2, "model": 4}), [Shard("x", dim=0, axis="data"), Shard("w", dim=1, axis="model")])
        >>> y = p(x, w)  # traced, partitioned and compiled once per input signature
        >>> bool(np.allclose(y, f(x, w))), str(p.trace(x, w).lowered.out_types[0])
        (True, 'f32[8@data,32@model]')
        >>> print(p.explain().splitlines()[0])
        partitioned over mesh {data=2,model=4}: 2 ops, 2 inputs
    """

    def __init__(self, fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic] | FoundSchedule,
                 unknown: str = "error", uneven: str = "pad") -> None:
        from partir_core.errors import PartitionError

        if unknown not in ("error", "replicate"):
            raise ValueError(f"unknown= must be 'error' or 'replicate', got {unknown!r}")
        if uneven not in ("pad", "refuse"):
            raise PartitionError(f"uneven= must be 'pad' or 'refuse', got {uneven!r}")
        self.fn, self.mesh, self.schedule, self.unknown = fn, mesh, _tactics(mesh, schedule), unknown
        self.uneven = uneven
        self._cache: dict[Any, tuple[Analysis, Any]] = {}
        self._padding: dict[Any, Padding | None] = {}
        self._last: Analysis | None = None

    def trace(self, *args: Any) -> Analysis:
        key = _signature(args)
        if key not in self._cache:
            a, padding = self._analyze(args)
            self._cache[key], self._padding[key] = (a, None), padding
        self._last = self._cache[key][0]
        return self._last

    def _analyze(self, args: Sequence[Any]) -> tuple[Analysis, Padding | None]:
        """Analyse on the true shapes; with ``uneven="pad"``, each input dimension a tactic finds
        indivisible is padded to the next multiple of its axes and the analysis rerun."""
        from partir_core.errors import IndivisibleDimError
        from partir_core.pad import pad_function, padded_size

        pads: dict[int, dict[int, int]] = {}
        fn, pargs, padding = self.fn, tuple(args), None
        while True:
            try:
                a = analyze(fn, self.mesh, self.schedule, pargs, self.unknown)
                return a, (padding if padding is None else _costed(padding, self.fn, args, a))
            except IndivisibleDimError as e:
                if self.uneven == "refuse" or e.leaf is None or e.dim is None or e.multiple is None:
                    raise
                import jax
                import numpy as np

                true = int(np.shape(jax.tree_util.tree_leaves(args)[e.leaf])[e.dim])
                have = pads.get(e.leaf, {}).get(e.dim, true)
                new = padded_size(true, math.lcm(e.multiple, have if have != true else 1))
                if new == have:
                    raise
                pads.setdefault(e.leaf, {})[e.dim] = new
                fn, pargs, padding = pad_function(self.fn, args, pads)

    @property
    def padding(self) -> Padding | None:
        """What the last traced signature padded (None when every sharded dimension divides)."""
        if self._last is None:
            return None
        return next((self._padding[k] for k, (a, _) in self._cache.items() if a is self._last), None)

    def _compiled(self, *args: Any) -> tuple[Analysis, Any]:
        a = self.trace(*args)
        key = _signature(args)
        if self._cache[key][1] is None:
            self._cache[key] = (a, compile_lowered(a.lowered, fn_mesh(self.mesh)))
        return self._cache[key]

    def __call__(self, *args: Any) -> Any:
        import jax

        from spmd_types.jax_interop import to_named_sharding

        a, fn = self._compiled(*args)
        jmesh = fn_mesh(self.mesh)
        leaves = jax.tree_util.tree_leaves(args)
        padding = self._padding[_signature(args)]
        if padding is not None:
            leaves = pad_inputs(leaves, padding)
        placed = [jax.device_put(x, to_named_sharding(t, jmesh)) for x, t in zip(leaves, a.lowered.in_types)]
        outs = list(fn(*placed))
        if padding is not None:
            outs = slice_outputs(outs, padding, auto_mesh(self.mesh))
        return jax.tree_util.tree_unflatten(a.program.out_tree, outs)

    def lower_text(self, *args: Any) -> str:
        """The StableHLO text of the partitioned program (what the collective counts are read from)."""
        import jax

        from spmd_types.jax_interop import to_named_sharding

        a, fn = self._compiled(*args)
        jmesh = fn_mesh(self.mesh)
        leaves = jax.tree_util.tree_leaves(args)
        specs = [jax.ShapeDtypeStruct(t.shape, x.dtype, sharding=to_named_sharding(t, jmesh))
                 for x, t in zip(leaves, a.lowered.in_types)]
        return str(fn.lower(*specs).as_text())

    def compiled_text(self, *args: Any) -> str:
        """The optimised HLO the backend compiled (what its collectives really move: XLA:CPU,
        for one, runs bf16 collectives in f32; ``Simulation.wire_bytes`` predicts that)."""
        import jax

        from spmd_types.jax_interop import to_named_sharding

        a, fn = self._compiled(*args)
        jmesh = fn_mesh(self.mesh)
        leaves = jax.tree_util.tree_leaves(args)
        specs = [jax.ShapeDtypeStruct(t.shape, x.dtype, sharding=to_named_sharding(t, jmesh))
                 for x, t in zip(leaves, a.lowered.in_types)]
        return str(fn.lower(*specs).compile().as_text())

    @property
    def analysis(self) -> Analysis:
        if self._last is None:
            raise RuntimeError("call the partitioned function (or .trace(*args)) first: shapes come from the inputs")
        return self._last

    def simulate(self) -> Simulation:
        sim = simulate(self.analysis.lowered)
        pad = self.padding
        return sim if pad is None else replace(sim, pad_bytes=pad.extra_bytes, pad_flops=pad.extra_flops)

    def explain(self) -> str:
        text = explain(self.analysis)
        pad = self.padding
        if pad is None:
            return text
        prog = self.analysis.program
        return text + "\n\n== padding (uneven dimensions) ==\n" + "\n".join(
            pad.lines(prog.input_paths, prog.output_paths)) + "\n"


def _costed(padding: Padding, fn: Callable[..., Any], args: Sequence[Any], a: Analysis) -> Padding:
    """``padding`` with its extra bytes and FLOPs (the true program traced once more to count)."""
    import jax

    from partir_core.ir import trace
    from partir_core.pad import extra_bytes
    from partir_core.simulate import program_flops

    outs = jax.tree_util.tree_leaves(jax.eval_shape(fn, *args))
    nbytes = extra_bytes(jax.tree_util.tree_leaves(args), padding.inputs) + extra_bytes(outs, padding.outputs)
    flops = program_flops(a.program) - program_flops(trace(fn, *args))
    return replace(padding, extra_bytes=nbytes, extra_flops=flops)


_JMESH: dict[Mesh, Any] = {}


def fn_mesh(mesh: Mesh) -> Any:
    """One ``jax.sharding.Mesh`` per our mesh, shared by placement and the compiled program."""
    if mesh not in _JMESH:
        _JMESH[mesh] = mesh.to_jax()
    return _JMESH[mesh]


_AUTO: dict[Mesh, Any] = {}


def auto_mesh(mesh: Mesh) -> Any:
    """The same devices with Auto axes: where padded outputs are cut back to their true shapes."""
    if mesh not in _AUTO:
        _AUTO[mesh] = mesh.to_jax(explicit=False)
    return _AUTO[mesh]


def partition(fn: Callable[..., Any], mesh: Mesh, schedule: Sequence[Tactic] | FoundSchedule, *,
              unknown: str = "error", uneven: str = "pad") -> Partitioned:
    """Partition ``fn`` over ``mesh`` following ``schedule`` (tactics applied in order).

    ``schedule`` is a list of tactics or what ``auto`` returns (its ``schedule``: the fixed
    tactics, then the found ones), so a search result partitions the step it was found for::

        result = auto(step, mesh, *args, time_budget_s=60)
        partitioned = partition(step, mesh, result)

    An ``AutoResult`` found on another mesh raises ``TacticError`` (its tactics name that mesh's
    axes and were scored on its sizes). ``unknown="replicate"`` runs primitives without a rule on
    whole (gathered) arrays instead of raising ``UnknownPrimitiveError``.

    An input dimension a tactic shards over axes whose product does not divide it (vocab 1001 over
    4 devices, a last batch of 7) is, with ``uneven="pad"`` (the default, as XLA), padded to the
    next multiple inside the partitioned program, masked where the padding would change a result
    (``partir_core.pad``), and its outputs sliced back; ``uneven="refuse"`` raises
    ``IndivisibleDimError`` instead.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import Shard, ShardParams, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> p = partition(f, Mesh({"data": 2, "model": 4}), [Shard("x", 0, "data"), ShardParams("model", target="w")])
        >>> bool(np.allclose(p(x, w), f(x, w))), p.simulate().counts()
        (True, {})
        >>> bool(np.allclose(p(np.ones((7, 16), np.float32), w), f(np.ones((7, 16), np.float32), w)))  # batch 7 padded
        True

    Raises:
        TacticError: a malformed tactic, or an ``auto`` result found on another mesh.
        UnknownInputError: a tactic names no input or output of ``fn``.
        UnknownPrimitiveError: ``fn`` uses a primitive with no sharding rule (``unknown="error"``).
        IndivisibleDimError: with ``uneven="refuse"``, a dimension its axes do not divide
            (``UnevenPrimitiveError`` with ``uneven="pad"`` where padding cannot be made exact).
        PartitionError: ``uneven=`` is neither ``"pad"`` nor ``"refuse"``.
    """
    return Partitioned(fn, mesh, _tactics(mesh, schedule), unknown, uneven)


def _tactics(mesh: Mesh, schedule: Sequence[Tactic] | FoundSchedule) -> tuple[Tactic, ...]:
    """The tactics of a schedule or of an ``auto`` result (checked against ``mesh``). An
    ``AutoResult`` is recognised by its ``schedule`` and ``mesh`` (``auto`` imports this module)."""
    from partir_core.errors import TacticError

    if isinstance(schedule, Tactic):
        raise TacticError(f"schedule must be a list of tactics, got the single tactic {schedule}; "
                          "wrap it in a list")
    if isinstance(schedule, Sequence):
        return tuple(schedule)
    if hasattr(schedule, "schedule") and hasattr(schedule, "mesh"):
        if schedule.mesh != mesh:
            raise TacticError(f"this auto result was searched on mesh {schedule.mesh}, not {mesh}; "
                              "run auto on this mesh, or partition on the mesh it was found for")
        return tuple(schedule.schedule)
    raise TacticError(f"schedule must be a list of tactics or what auto returns, got {type(schedule).__name__}")
