"""Plan a redistribution, print it, run it on 8 CPU devices, and compare with jax.sharding.reshard.

Shows: reading the sharding type of an array you have (``jax.typeof``), ``redistribute``, the
plan's measures against the transfer lower bound, ``plan(x)``, and that the result equals JAX's
own reshard block for block.

Run: ``python examples/01_plan_and_run.py [ROWS]`` (default 2048; any multiple of 8).
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before importing jax
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from redist import redistribute  # noqa: E402
from spmd_types import Mesh  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
jmesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
a = np.arange(n * n, dtype=np.float32).reshape(n, n)
x = jax.device_put(a, NamedSharding(jmesh, P("x", "y")))   # the array you have
dst = P("y", "x")                                           # the layout you need (a 2-D transpose)

src_type = str(jax.typeof(x))                               # 'float32[2048@x,2048@y]'
dst_type = f"f32[{n}@y,{n}@x]"
plan = redistribute(src_type, dst_type, Mesh.from_jax(x.sharding.mesh))
print(plan)
print(f"receives {plan.recv_bytes:,.0f} B per device; the lower bound is {plan.lower_bound_bytes:,.0f} B")

y = plan(x)
z = jax.sharding.reshard(x, NamedSharding(jmesh, dst))
assert jax.typeof(y) == jax.typeof(z), (jax.typeof(y), jax.typeof(z))
assert np.array_equal(np.asarray(y), a)
for s, t in zip(y.addressable_shards, z.addressable_shards):
    assert s.device == t.device and np.array_equal(np.asarray(s.data), np.asarray(t.data))
print(f"ok: {jax.typeof(y)} equals jax.sharding.reshard on all {len(y.addressable_shards)} devices")
