"""jax.distributed's coordination service: lining processes up without the transport being timed.

Timing across processes (``redist.calibrate``, ``benchmarks.multiprocess``) needs every process to
start a call together, or one process's clock also counts its wait for a peer still finishing
the previous call. A barrier of the coordination service (gRPC to the coordinator) does that
without a collective on the transport being measured (Gloo's sockets).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

TIMEOUT_MS = 120_000
"""How long a barrier or key-value read waits for the other processes."""

CLOCKS = ("span", "own")
"""How a call is timed across processes: ``span``, from the last process's start to the last one's
end (``spans``); ``own``, one process's own time, which also counts its wait for a late peer.
``redist.calibrate`` and ``benchmarks.multiprocess`` both take one; on one process they agree."""


def client() -> Any | None:
    """The coordination-service client of this process; ``None`` without ``jax.distributed``."""
    from jax._src import distributed

    return distributed.global_state.client


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier ``name`` (unique per barrier, the same on every
    process); nothing on a single process."""
    c = client()
    if c is not None:
        c.wait_at_barrier(name, TIMEOUT_MS)


def gather(key: str, value: str) -> list[str]:
    """Every process's ``value``, in process order (the coordination service's key-value store,
    under ``key/<process>``; ``key`` unique per call and the same on every process); ``[value]``
    on a single process. For choices every process must make alike from what each measured on its
    own clock (``redist.autotune``): each computes the same function of the same list."""
    c = client()
    if c is None:
        return [value]
    import jax

    c.key_value_set(f"{key}/{jax.process_index()}", value)
    return [str(c.blocking_key_value_get(f"{key}/{i}", TIMEOUT_MS)) for i in range(jax.process_count())]


def spans(starts: Sequence[Sequence[float]], ends: Sequence[Sequence[float]]) -> list[float]:
    """Per call, the time a program held every process: from the last process's start to the last
    process's end (``starts[p][i]``, ``ends[p][i]``: process ``p``'s ``i``-th call on one clock,
    CLOCK_MONOTONIC, shared by the processes of one host). One process's own time also counts
    the wait for a later peer to reach the collective, which is the harness's skew, not the program."""
    if len(starts) != len(ends) or not starts:
        raise ValueError("spans needs one row of starts and of ends per process")
    calls = len(starts[0])
    if any(len(r) != calls for r in (*starts, *ends)):
        raise ValueError("spans needs as many calls on every process")
    return [max(e[i] for e in ends) - max(s[i] for s in starts) for i in range(calls)]


def gather_spans(key: str, starts: Sequence[float], ends: Sequence[float]) -> list[float]:
    """Every process's calls, as ``spans``: this process's ``starts[i]``, ``ends[i]`` (CLOCK_MONOTONIC)
    gathered from all of them (``gather``, ``key`` as there); on a single process its own times.
    Every process gets the same list."""
    rows = [json.loads(r) for r in gather(key, json.dumps([list(starts), list(ends)]))]
    return spans([r[0] for r in rows], [r[1] for r in rows])
