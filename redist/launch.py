"""Local multi-process launch: several JAX processes on 127.0.0.1 joined by ``jax.distributed``.

Why here: ``redist calibrate --local-processes`` and the cross-process benchmarks start the same
kind of process group (CPU devices per process, a free coordinator port, Gloo collectives), so
one launcher serves both. docs/design.md's section on clocks across processes holds the evidence
for the flags.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

EIGEN_SINGLE = "--xla_cpu_multi_thread_eigen=false"
"""XLA's CPU flag for single-threaded Eigen kernels: 4-8 simulated devices and Gloo's threads already
oversubscribe a small machine; set in every process, so it applies to XLA's programs and ours alike."""
GLOO_LOG = re.compile(r"\[Gloo\][^\n]*?peer ranks is : \d+\n?")
"""Gloo logs each connection to stdout, sometimes in the middle of one of our lines."""


def without_gloo_logs(text: str) -> str:
    """``text`` with Gloo's connection logs cut out, our lines made whole again."""
    return GLOO_LOG.sub("", text)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for the coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_local(processes: int, devices_per_process: int, argv: Callable[[int, int], Sequence[str]],
                timeout_s: float, xla_flags: str = "") -> list[subprocess.CompletedProcess[str]]:
    """Run ``python argv(i, port)`` for each process ``i`` (CPU only, ``devices_per_process``
    devices each; ``port`` a free coordinator port on 127.0.0.1; ``xla_flags`` more XLA flags, the same
    in every process); results in process order. On a timeout every process is killed and
    ``TimeoutExpired`` raised."""
    port = free_port()
    flags = f"--xla_force_host_platform_device_count={devices_per_process} {xla_flags}".strip()
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, *argv(i, port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(processes)]
    out = []
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def init_distributed(index: int, processes: int, coordinator: str) -> None:
    """Join ``jax.distributed`` as process ``index`` of ``processes``, CPU collectives over Gloo."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=processes,
                               process_id=index, initialization_timeout=60)
