"""Reproducer: the same all-to-all, from XLA's partitioner and from ``shard_map``, timed on CPU.

Run: ``python -m benchmarks.studies.collective_groups``. On the CPU runtime the two compiled modules are the
same collective with the same groups, differing only in how the groups are written (XLA's
partitioner: ``replica_groups=mesh[...] {'axis_1'}``; ``shard_map``: an explicit list, which JAX's
lowering always emits). The explicit form runs about 2x slower here, which is why plans whose
collectives equal XLA's still time below 1.0x in ``redist bench`` (see the report).
"""

from __future__ import annotations

import os
import re
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def main(runs: int = 200) -> str:
    devs = np.array(jax.devices()[:8]).reshape(2, 4)
    mesh = jax.sharding.Mesh(devs, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.ones((8, 512, 512), jnp.float32), NamedSharding(mesh, P("data", None, "model")))
    dst = NamedSharding(mesh, P("data", "model", None))
    programs = {
        "XLA partitioner (identity, out_shardings)": jax.jit(lambda a: a, out_shardings=dst),
        "shard_map + lax.all_to_all": jax.jit(jax.shard_map(
            lambda a: lax.all_to_all(a, "model", 1, 2, tiled=True), mesh=mesh,
            in_specs=P("data", None, "model"), out_specs=P("data", "model", None), check_vma=False)),
    }
    compiled = {k: f.lower(x).compile() for k, f in programs.items()}
    ref = np.asarray(next(iter(compiled.values()))(x))
    times: dict[str, list[float]] = {k: [] for k in compiled}
    for c in compiled.values():
        assert np.array_equal(np.asarray(c(x)), ref)
        for _ in range(5):
            c(x).block_until_ready()
    items = list(compiled.items())
    for i in range(runs):
        for name, c in items if i % 2 == 0 else items[::-1]:
            t0 = time.perf_counter()
            c(x).block_until_ready()
            times[name].append(time.perf_counter() - t0)
    lines = ["Command: python -m benchmarks.studies.collective_groups", "",
             "| program | replica groups in the compiled HLO | median ms |", "|---|---|---|"]
    for name, c in compiled.items():
        groups = re.findall(r"all-to-all\(.*?replica_groups=(\S+ ?\S*)", c.as_text() or "")
        lines.append(f"| {name} | `{groups[0][:48] if groups else '?'}` | {1e3 * np.median(times[name]):.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(main())
