"""Ours against XLA for one move: what each compiled program communicates, holds and takes.

Why compiled programs: the plan's own figures are the cost model's; what runs is what XLA compiles.
Both sides are read the same way: collectives (kinds, replica groups, bytes) with one HLO parser
(``redist.hlo``), memory from ``Compiled.memory_analysis()``, time as medians of interleaved runs
(``redist.timing``), and each output checked against the NumPy slices of the global array
(``redist.arrays``). XLA's side is ``jax.sharding.reshard`` under ``jit`` on Explicit axes and the
jitted identity with ``out_shardings=dst`` (``redist.xla_side``); docs/design.md section 4 defines
the byte counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redist.arrays import check_output, make_input
from redist.cost import CostModel
from redist.errors import RedistError
from redist.hlo import HloCollectives
from redist.plan import Plan
from redist.timing import interleaved_runs
from redist.xla_side import MemoryStats, compile_with_log, measure_variant, xla_programs
from spmd_types import Mesh, ShardingType

SIDES = ("redist", "XLA out_shardings", "XLA reshard")
"""The programs compared, in this order; ``XLA reshard`` is left out where JAX would abort the
process on the move (``redist.xla_side.shardy_aborts``)."""
"""The programs compared, in the order printed: our plan, ``jit(identity, out_shardings=dst)``
and ``jax.sharding.reshard`` under ``jit``."""


@dataclass(frozen=True)
class Side:
    """One compiled program of a move."""

    name: str  # one of SIDES
    collectives: HloCollectives
    recv_bytes: float | None  # per device, mean over devices, from the compiled HLO (None: data-dependent)
    busiest_recv_bytes: float | None  # what the device that receives most receives
    memory: MemoryStats
    median_s: float
    values: str | None  # None: every device's block equals the NumPy slice; else what differs
    remat: bool = False  # XLA logged an involuntary full rematerialization


@dataclass(frozen=True)
class Comparison:
    """Every side of one move, timed together: ``reps`` interleaved rounds, medians."""

    plan: Plan
    sides: tuple[Side, ...]
    reps: int

    def side(self, name: str) -> Side:
        return next(s for s in self.sides if s.name == name)


def _check_reps(reps: int) -> None:
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise RedistError(f"compare: reps={reps!r} is not a count of timed rounds; give an integer >= 1")


def compare(src: ShardingType | str, dst: ShardingType | str, mesh: Mesh, *, reps: int = 20,
            cost_model: CostModel | None = None, seed: int = 0) -> Comparison:
    """Plan ``src -> dst`` on ``mesh``, compile ours and XLA's programs on the first
    ``mesh.size`` JAX devices, check their values and time them in ``reps`` interleaved rounds.

    Example (8 simulated CPU devices; ``redist compare`` prints the same from the shell)::

        from redist.compare import compare
        from spmd_types import Mesh

        r = compare("f32[256@x,256@y]", "f32[256@y,256@x]", Mesh({"x": 2, "y": 4}), reps=5)
        xla = r.side("XLA reshard")
        xla.collectives.kinds()  # ('all-to-all', 'collective-permute')
        r.side("redist").recv_bytes == r.plan.recv_bytes  # True: what runs moves what the plan says

    Raises ``RedistError`` for a ``reps`` that is not an integer >= 1 or a mesh larger than the
    devices JAX has, and the typing errors of ``redistribute`` for types that do not fit the mesh.
    """
    import jax

    from redist import redistribute
    from redist.executor import compile_plan
    from spmd_types.jax_interop import mesh_to_jax

    _check_reps(reps)
    if jax.device_count() < mesh.size:
        raise RedistError(f"compare: mesh {mesh} needs {mesh.size} devices and JAX has {jax.device_count()}; "
                          f"ask for more before JAX starts (XLA_FLAGS=--xla_force_host_platform_device_count="
                          f"{mesh.size} on CPU)")
    plan = redistribute(src, dst, mesh, cost_model=cost_model)
    auto, explicit = mesh_to_jax(mesh, explicit=False), mesh_to_jax(mesh, explicit=True)
    x, want = make_input(plan.src, explicit, seed)
    x_auto = x if plan.src.unreduced else make_input(plan.src, auto, seed)[0]
    ours, _, _ = compile_with_log(compile_plan(plan, explicit), x)
    programs: list[tuple[str, Any, Any, Any]] = [("redist", ours, x, None)]
    names = {"reshard": "XLA reshard", "out_shardings": "XLA out_shardings"}
    for method, (fn, used) in xla_programs(plan.src, plan.dst, auto, explicit).items():
        arg = x if used is explicit else x_auto
        variant, compiled = measure_variant(method, fn, arg, "explicit" if used is explicit else "auto",
                                            plan.src.itemsize)
        programs.append((names[method], compiled, arg, variant))
    times = interleaved_runs([(c, a) for _, c, a, _ in programs], reps=reps)
    return Comparison(plan, tuple(_side(p, t, want, plan.dst) for p, t in zip(programs, times)), reps)


def _side(program: tuple[str, Any, Any, Any], times: Sequence[float], want: Any, dst: ShardingType) -> Side:
    from redist.hlo import parse_collectives

    name, compiled, arg, variant = program
    collectives = parse_collectives(compiled.as_text() or "") if variant is None else variant.collectives
    per_device = collectives.device_recv_bytes_as(dst.itemsize)
    return Side(name, collectives, collectives.recv_bytes_as(dst.itemsize),
                None if per_device is None else float(per_device.max(initial=0.0)),
                MemoryStats.of(compiled) if variant is None else variant.memory,
                statistics.median(times), check_output(compiled(arg), want, dst),
                bool(variant is not None and variant.remat))
