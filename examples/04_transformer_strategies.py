"""Compare parallelism strategies on the bundled transformer block without running anything.

Shows: ``partir_core.strategies`` (BP, MP, Z2, Z3, EMB and their combinations) and the simulator,
which predicts each strategy's collectives, received bytes and peak memory per device from the
partitioned program alone (its collectives are exactly those of the lowered HLO).

Run: ``python examples/04_transformer_strategies.py``.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before importing jax
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from partir_core import partition  # noqa: E402
from partir_core.models import transformer  # noqa: E402
from partir_core.strategies import applicable, schedule  # noqa: E402
from spmd_types import Mesh  # noqa: E402

model = transformer()
mesh = Mesh({"data": 4, "model": 2})
print(f"{'strategy':<10} {'collectives':>11} {'recv B/device':>14} {'peak B/device':>14}")
for name in applicable("transformer"):
    step = partition(model.step, mesh, schedule("transformer", name))
    step.trace(*model.args)                # propagate and lower; no compilation, no run
    sim = step.simulate()
    print(f"{name:<10} {len(sim.collectives):>11} {sim.recv_bytes:>14,.0f} {sim.peak_bytes:>14,}")
