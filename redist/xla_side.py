"""The XLA side: what the SPMD partitioner does with the same layout change.

Two ways to ask XLA for a redistribution, both measured:

- ``out_shardings``: ``jax.jit(identity, out_shardings=dst)`` on an input laid out as ``src`` on
  an Auto-axes mesh, the way most programs trigger a reshard;
- ``reshard``: ``jax.sharding.reshard(x, dst)`` inside ``jit`` on an Explicit-axes mesh.

Unreduced sources exist only on Explicit axes, so for them both variants run on the Explicit mesh.
From each compiled program we read the collectives (``redist.hlo``), its memory analysis,
and whether XLA logged an "Involuntary full rematerialization" (it then gathers the whole array
and slices it). That warning is printed by C++ to file descriptor 2, so it is captured at the
descriptor level, not through ``sys.stderr``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import NamedSharding

from redist.hlo import HloCollectives, parse_collectives
from spmd_types import ShardingType
from spmd_types.jax_interop import to_partition_spec

REMAT_MARKER = "Involuntary full rematerialization"


@dataclass(frozen=True)
class MemoryStats:
    """Per-device sizes from ``Compiled.memory_analysis()``."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs + temporaries - aliased: what the program holds at once."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes

    @staticmethod
    def of(compiled: Any) -> MemoryStats:
        ma = compiled.memory_analysis()
        if ma is None:  # pragma: no cover - every backend we run on provides it
            return MemoryStats(0, 0, 0, 0)
        return MemoryStats(
            int(ma.argument_size_in_bytes), int(ma.output_size_in_bytes),
            int(ma.temp_size_in_bytes), int(ma.alias_size_in_bytes),
        )


@dataclass(frozen=True)
class XlaVariant:
    """One compiled XLA program for a case and what it costs."""

    method: str  # "out_shardings" or "reshard"
    mesh_kind: str  # "auto" or "explicit"
    collectives: HloCollectives
    recv_bytes: float | None  # per device, counted in the array's dtype (see HloCollectives.recv_bytes_as)
    memory: MemoryStats
    remat: bool
    remat_messages: tuple[str, ...]
    compile_s: float


@contextlib.contextmanager
def capture_fd2() -> Iterator[list[str]]:
    """Redirect file descriptor 2 (where XLA's C++ logging goes) into a list of lines."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


def compile_with_log(fn: Any, x: jax.Array) -> tuple[Any, list[str], float]:
    """Lower and compile the jitted ``fn`` for ``x``: compiled program, XLA's log lines, seconds."""
    start = time.perf_counter()
    with capture_fd2() as log:
        compiled = fn.lower(x).compile()
    return compiled, log, time.perf_counter() - start


def _identity(v: jax.Array) -> jax.Array:
    return v


def xla_programs(
    src: ShardingType, dst: ShardingType, auto_mesh: jax.sharding.Mesh, explicit_mesh: jax.sharding.Mesh
) -> dict[str, tuple[Any, jax.sharding.Mesh]]:
    """The jitted functions of both variants with the mesh their input must live on."""
    spec = to_partition_spec(dst)
    out_mesh = explicit_mesh if src.unreduced or dst.unreduced else auto_mesh  # Auto axes take no unreduced
    ident = jax.jit(_identity, out_shardings=NamedSharding(out_mesh, spec))
    target = NamedSharding(explicit_mesh, spec)
    reshard = jax.jit(lambda v: jax.sharding.reshard(v, target))
    programs = {"out_shardings": (ident, out_mesh), "reshard": (reshard, explicit_mesh)}
    if shardy_aborts(src, dst):
        del programs["reshard"]
    return programs


def shardy_aborts(src: ShardingType, dst: ShardingType) -> bool:
    """Whether ``jax.sharding.reshard`` would abort the process on this move: with both sides
    holding pending sums over axes the other lacks, Shardy's explicit-reshard export fails a CHECK
    (jax 0.10.2: "Both input and output have unreduced axes that does not appear in the other"),
    which no ``try`` can catch, so that program is not built."""
    return bool(src.unreduced - dst.unreduced) and bool(dst.unreduced - src.unreduced)


def measure_variant(
    method: str, fn: Any, x: jax.Array, mesh_kind: str, itemsize: int
) -> tuple[XlaVariant, Any]:
    """Compile one variant for input ``x``; its record and the compiled program (for timing)."""
    compiled, log, secs = compile_with_log(fn, x)
    remat = tuple(line.strip() for line in log if REMAT_MARKER in line)
    collectives = parse_collectives(compiled.as_text())
    variant = XlaVariant(
        method=method,
        mesh_kind=mesh_kind,
        collectives=collectives,
        recv_bytes=collectives.recv_bytes_as(itemsize),
        memory=MemoryStats.of(compiled),
        remat=bool(remat),
        remat_messages=remat,
        compile_s=secs,
    )
    return variant, compiled


def same_collectives(a: XlaVariant, b: XlaVariant) -> bool:
    """Whether two variants compiled to the same collectives (kinds, groups and sizes)."""
    key = lambda v: [(c.kind, c.groups, c.operand_bytes) for c in v.collectives.collectives]
    return key(a) == key(b)
