"""Devices for the commands that run JAX programs: simulated CPU devices, asked for before JAX starts.

Why before: XLA reads ``--xla_force_host_platform_device_count`` once, when JAX initialises its
backends, so a command sets ``XLA_FLAGS`` before anything imports ``jax`` (``redist`` does) and
only then checks how many devices it got.
"""

from __future__ import annotations

import os
import sys

DEVICE_FLAG = "--xla_force_host_platform_device_count"


def ask_for(n: int, cpu: bool = True) -> None:
    """Ask for ``n`` simulated CPU devices (and, with ``cpu``, the CPU backend) unless JAX has
    started or the caller's ``XLA_FLAGS`` already chose a count."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if DEVICE_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_FLAG}={n}".strip()
    if cpu:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


def missing(n: int, command: str) -> str | None:
    """Why ``command`` cannot run on the devices JAX has, or None when it has ``n`` or more."""
    import jax

    have = jax.device_count()
    if have >= n:
        return None
    return (f"{command} needs {n} devices but JAX has {have}; set XLA_FLAGS={DEVICE_FLAG}={n} "
            f"(and JAX_PLATFORMS=cpu) before JAX starts, or run it in a fresh process")


def ensure(n: int, command: str, cpu: bool = True) -> str | None:
    """``ask_for`` then ``missing``: None when ``command`` can run."""
    ask_for(n, cpu)
    return missing(n, command)
