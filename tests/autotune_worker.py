"""One process of ``test_autotune.py``'s 2-process run: autotune a move, run the tuned plan,
check this process's blocks, print the choice and the trials' times."""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.sharding import NamedSharding

from redist import autotune
from spmd_types import Mesh, parse
from spmd_types.jax_interop import to_partition_spec


def main(index: int, port: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=index,
                               initialization_timeout=60)
    mesh = Mesh({"x": 2, "y": 4})
    src, dst = parse("s32[4,8@y,512,16@x]", mesh), parse("s32[4,8@x,512@y,16]", mesh)
    tuned = autotune(src, dst, top=3, reps=5, margin=0.0)
    total = np.arange(np.prod(src.shape), dtype=np.int32).reshape(src.shape)
    jm = mesh.to_jax()
    x = jax.make_array_from_callback(src.shape, NamedSharding(jm, to_partition_spec(src)), total.__getitem__)
    out = tuned.plan(x)
    ok = all(np.array_equal(np.asarray(s.data), total[s.index]) for s in out.addressable_shards)
    fastest = min(range(len(tuned.trials)), key=lambda i: tuned.trials[i].measured_s)
    chosen = next(i for i, t in enumerate(tuned.trials) if t.plan is tuned.plan)
    times = ",".join(f"{t.measured_s:.9f}" for t in tuned.trials)
    print(f"CHOICE {chosen} FASTEST {fastest} TRIALS {len(tuned.trials)} CORRECT {ok} TIMES {times}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
