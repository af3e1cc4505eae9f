"""Helper processes of ``test_tune_cache.py`` (each prints one result line).

``use PATH``: a fresh process plans the test move with ``REDIST_AUTOTUNE_CACHE=PATH`` through
``redistribute``, ``reshard`` and ``autotune`` with the timer replaced by a counter; prints the
chosen steps' fingerprints and how many times the timer was called.
``write PATH FIRST COUNT``: wait for ``PATH.go``, then store ``COUNT`` entries (moves of sizes
``FIRST..``) one by one, as a writer racing another.
``distributed INDEX PORT PATH``: one of 2 ``jax.distributed`` processes; process 0 alone has an
entry (candidate 1) in its file; prints the plan both chose.
"""

from __future__ import annotations

import os
import sys
import time

MESH_TEXT = "x=2,y=4"
SRC, DST = "s32[4,8@y,512,16@x]", "s32[4,8@x,512@y,16]"


def use(path: str) -> None:
    os.environ["REDIST_AUTOTUNE_CACHE"] = path  # as a user turns it on (read at each planning call)
    import jax
    import numpy as np

    import redist.calibrate
    import redist.tuning
    from redist import autotune, record, redistribute, reshard
    from redist.tune_cache import fingerprint
    from spmd_types import Mesh, parse
    from spmd_types.jax_interop import to_named_sharding

    calls = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        raise AssertionError("the timer was called")

    redist.tuning.samples = counting  # type: ignore[assignment]
    redist.calibrate.samples = counting  # type: ignore[assignment]
    mesh = Mesh.parse(MESH_TEXT)
    s, d = parse(SRC, mesh), parse(DST, mesh)
    planned = redistribute(SRC, DST, MESH_TEXT)
    tuned = autotune(SRC, DST, MESH_TEXT, top=3, reps=3, margin=0.0)
    jm = mesh.to_jax()
    total = np.arange(int(np.prod(s.shape)), dtype=np.int32).reshape(s.shape)
    x = jax.device_put(total, to_named_sharding(s, jm))
    with record() as log:
        out = reshard(x, to_named_sharding(d, jm))
    ok = bool(np.array_equal(np.asarray(out), total))
    (_, _, used), = log.plans
    print(f"PLANNED {fingerprint(planned)} TUNED {fingerprint(tuned.plan)} RESHARD {fingerprint(used)} "
          f"CORRECT {ok} TIMED {len(calls)}")


def write(path: str, first: int, count: int) -> None:
    from redist.profile import default_cost_model
    from redist.synth import ranked
    from redist.tune_cache import store
    from spmd_types import Mesh, parse

    mesh = Mesh.parse(MESH_TEXT)
    cm = default_cost_model(mesh)
    moves = [(parse(f"f32[{8 * n}@x,8]", mesh), parse(f"f32[{8 * n},8@x]", mesh)) for n in range(first, first + count)]
    plans = [ranked(s, d, cm, 1) for s, d in moves]
    while not os.path.exists(path + ".go"):
        time.sleep(0.01)
    for (s, d), p in zip(moves, plans):
        store(path, s, d, cm, p, 0, (1e-3,), 1, 1, 0.0)
    print(f"WROTE {count}")


def distributed(index: int, port: int, path: str) -> None:
    import jax

    from redist import redistribute, use_tune_cache
    from redist.profile import default_cost_model
    from redist.synth import ranked
    from redist.tune_cache import _merge_write, fingerprint, move_key
    from spmd_types import Mesh, parse

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=index,
                               initialization_timeout=60)
    mesh = Mesh.parse(MESH_TEXT)
    s, d = parse(SRC, mesh), parse(DST, mesh)
    cm = default_cost_model(mesh)
    plans = ranked(s, d, cm, 3)
    if index == 0:  # only process 0's file has the entry
        _merge_write(path, {move_key(s, d, cm): {"winner": 1, "fingerprints": [fingerprint(p) for p in plans[:2]],
                                                 "top": 3, "reps": 3, "margin": 0.0, "measured_s": [2e-3, 1e-3]}})
    use_tune_cache(path)
    chosen = redistribute(s, d, cost_model=cm)
    layout = '"processes":2' in move_key(s, d, cm)
    print(f"CHOSE {[fingerprint(p) for p in plans].index(fingerprint(chosen))} LAYOUT {layout}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "use":
        use(sys.argv[2])
    elif mode == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        distributed(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
