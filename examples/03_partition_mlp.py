"""Partition the bundled MLP training step (loss, grad, Adam) with batch + Megatron parallelism.

Shows: ``partir_core.partition`` with the ``BP+MP`` schedule on a ``{data=4, model=2}`` mesh,
running the partitioned step, checking it against the unpartitioned one, and the simulator's
prediction of its collectives, bytes and peak memory.

Run: ``python examples/03_partition_mlp.py``.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before importing jax
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from partir_core import partition  # noqa: E402
from partir_core.models import mlp  # noqa: E402
from partir_core.strategies import schedule  # noqa: E402
from spmd_types import Mesh  # noqa: E402

model = mlp(batch=32, d_in=16, hidden=64, classes=8)
mesh = Mesh({"data": 4, "model": 2})
tactics = schedule("mlp", "BP+MP")   # Shard('batch', 0, 'data'), Shard({w1: 1, w2: 0}, 'model')
for t in tactics:
    print("tactic:", t)

step = partition(model.step, mesh, tactics)
params, _, loss = step(*model.args)
ref_params, _, ref_loss = jax.jit(model.step)(*model.args)
np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
for k in ref_params:
    np.testing.assert_allclose(params[k], ref_params[k], rtol=1e-4, atol=1e-5)
    print(f"{k}: {jax.typeof(params[k])}")

sim = step.simulate()
print(f"loss {float(loss):.4f} (equal to the unpartitioned step)")
print(f"collectives {sim.counts()}, {sim.recv_bytes:,.0f} B received per device, peak {sim.peak_bytes:,} B")
