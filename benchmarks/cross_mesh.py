"""Moves between meshes in one process: ``redist.reshard`` against ``jax.device_put``.

``python -m benchmarks.cross_mesh [--mib 1 8] [--reps N] [--out DIR]``. Four moves on the 8
simulated CPU devices (docs/design.md section 8.4):

- ``pipeline``: a pipeline hand-off, ``f32[n@x,m]`` from devices 0-3 to devices 4-7;
- ``trainer_to_sampler``: ``{data=2,fsdp=2,model=2}`` on devices 0-7, ``[n@(data,fsdp),m@model]``,
  to ``{model=4}`` on devices 4-7, ``[n,m@model]``;
- ``resize_8_to_4`` and ``resize_4_to_8``: ``[n@x,m]`` on 8 devices to 4 and back.

Per case and size these callables run on the same input, interleaved in a balanced order
(``benchmarks.paired.balanced_order``), one call and ``block_until_ready`` each per round:
``device_put``, ``device_put (A/A)`` (the control: the same again), ``redist.reshard`` (the
default transport: host copies on CPU devices), the two other transports of ``run_cross_mesh``
(``direct``: device buffers cut and copied between devices; ``union``: one program over the
union of the devices, the multi-process transport), and ``one ppermute``: a bare one-round
``shard_map`` of one ``ppermute`` of the whole source block over the same union of devices,
the floor of any program that moves data in rounds; and ``device_put`` and ``redist.reshard``
again on a fresh array each round (placed before the round, untimed): called on the same ``x``,
``device_put`` re-slices a host copy of ``x`` that JAX keeps after the first call. The
table gives medians and the median of per-round ratios with its ~95% interval; bytes and peak
are the plan's (received bytes summed over devices, its lower bound, the largest buffer per
device and everything the union program holds at once per device); ``jax.device_put``'s copies run
outside any program, so its bytes and memory are not measured here. Values are checked once per
case against ``device_put``'s. Wall clock on the machine at hand; no test asserts it.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import datetime  # noqa: E402
import functools  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NamedTuple  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

import redist  # noqa: E402
from benchmarks.paired import balanced_order, paired_ratio  # noqa: E402
from redist.cross_exec import AXIS, runner, runner_for, transport_for  # noqa: E402
from redist.cross_reshard import plan_between  # noqa: E402
from spmd_types.jax_placement import placement_of, placement_of_sharding  # noqa: E402


class Case(NamedTuple):
    name: str
    src: tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], tuple[Any, ...]]
    dst: tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], tuple[Any, ...]]


CASES = (
    Case("pipeline", ((4,), ("x",), (0, 1, 2, 3), ("x",)), ((4,), ("x",), (4, 5, 6, 7), ("x",))),
    Case("trainer_to_sampler", ((2, 2, 2), ("data", "fsdp", "model"), tuple(range(8)), (("data", "fsdp"), "model")),
         ((4,), ("model",), (4, 5, 6, 7), (None, "model"))),
    Case("resize_8_to_4", ((8,), ("x",), tuple(range(8)), ("x",)), ((4,), ("x",), (0, 1, 2, 3), ("x",))),
    Case("resize_4_to_8", ((4,), ("x",), (0, 1, 2, 3), ("x",)), ((8,), ("x",), tuple(range(8)), ("x",))),
)


def sharding(shape: tuple[int, ...], names: tuple[str, ...], ids: tuple[int, ...], spec: tuple[Any, ...]) -> NamedSharding:
    devs = {d.id: d for d in jax.devices()}
    mesh = jax.sharding.Mesh(np.array([devs[i] for i in ids]).reshape(shape), names,
                             axis_types=(jax.sharding.AxisType.Explicit,) * len(names))
    return NamedSharding(mesh, PartitionSpec(*spec))


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def run_case(case: Case, mib: float, reps: int) -> dict[str, Any]:
    rows = max(8, int(mib * 2**20 / 4 / 1024) // 8 * 8)
    shape = (rows, 1024)
    src, dst = sharding(*case.src), sharding(*case.dst)
    g = np.arange(rows * 1024, dtype=np.float32).reshape(shape)
    x = jax.device_put(g, src)
    ours, theirs = redist.reshard(x, dst), jax.device_put(x, dst)
    for a, b in zip(ours.addressable_shards, theirs.addressable_shards):
        assert a.device == b.device and np.array_equal(np.asarray(a.data), np.asarray(b.data)), case.name
    plan = plan_between(placement_of(x), placement_of_sharding(dst, shape, x.dtype))
    floor, glob = one_round(plan, x)
    direct, union = runner_for(plan, "direct"), runner_for(plan, "union")
    for run in (direct, union):
        y = run(x, dst)
        assert all(np.array_equal(np.asarray(a.data), np.asarray(b.data))
                   for a, b in zip(y.addressable_shards, theirs.addressable_shards)), case.name
    sides: dict[str, Callable[[], Any]] = {
        "device_put": lambda: jax.device_put(x, dst),
        "device_put (A/A)": lambda: jax.device_put(x, dst),
        "redist.reshard": lambda: redist.reshard(x, dst),
        "direct": lambda: direct(x, dst),
        "union": lambda: union(x, dst),
        "one ppermute": lambda: floor(glob),
        "device_put (fresh x)": lambda: jax.device_put(fresh["device_put"], dst),
        "redist.reshard (fresh x)": lambda: redist.reshard(fresh["reshard"], dst),
    }
    fresh: dict[str, jax.Array] = {}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(-1, reps):  # round -1 warms every side
        fresh.update(jax.block_until_ready({k: jax.device_put(g, src) for k in ("device_put", "reshard")}))
        for name in balanced_order(list(sides), max(r, 0)):
            t = timed(sides[name])
            if r >= 0:
                times[name].append(t)
    return {"case": case.name, "shape": shape, "bytes": rows * 1024 * 4, "times": times, "plan": plan}


def one_round(plan: Any, x: jax.Array) -> tuple[Callable[[Any], Any], Any]:
    """The floor of one round: a bare ``shard_map`` of one ``ppermute`` (each union device to the
    next) of the whole source block, on the plan's own input."""
    r = runner(plan)
    by_dev = {s.device.id: s.data for s in x.addressable_shards}
    by_dev.update(r.zeros)
    glob = jax.make_array_from_single_device_arrays(r.in_shape, r.in_sharding, [by_dev[g] for g in plan.union])
    n = len(plan.union)
    body = functools.partial(jax.lax.ppermute, axis_name=AXIS, perm=[(i, (i + 1) % n) for i in range(n)])
    spec = PartitionSpec(AXIS)
    return jax.jit(jax.shard_map(body, mesh=r.in_sharding.mesh, in_specs=spec, out_specs=spec)), glob


def _us(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs) * 1e6:.0f}"


def _ci(a: Sequence[float], b: Sequence[float]) -> str:
    r = paired_ratio(a, b)
    return f"{r.median:.2f}x [{r.lo:.2f}, {r.hi:.2f}]"


def report(results: list[dict[str, Any]], argv: Sequence[str], seconds: float) -> str:
    lines = [f"# Moves between meshes in one process ({datetime.date.today()})", "",
             f"Command: `python -m benchmarks.cross_mesh {' '.join(argv)}`  ",
             f"JAX {jax.__version__}, {len(jax.devices())} x {jax.devices()[0].platform}, {os.cpu_count()} cores; "
             f"load average {os.getloadavg()[0]:.1f} after; the one-process table took {seconds:.0f} s.", "",
             "Times: medians of call + `block_until_ready`; ratios: median of per-round ratios to `device_put` "
             "with ~95% interval (> 1: slower than `device_put`).", "",
             f"`redist.reshard` runs the default transport (`{_auto_name(results)}` here); `direct` and `union` "
             "are the other two run by `run_cross_mesh(..., transport=...)` (docs/design.md 8.4).", "",
             "`fresh x`: each round on an array placed just before (not timed), as a training step's new "
             "weights would be: `device_put` cannot reuse the host copy of `x` JAX keeps after its first call.", "",
             "| case | shape | MiB | device_put us | A/A us | redist.reshard us | direct us | union us "
             "| one ppermute us | A/A ratio | reshard / device_put | direct / device_put | union / device_put "
             "| fresh x: device_put us | fresh x: reshard us | fresh x: reshard / device_put "
             "| rounds | recv B (all devices) | lower bound B | peak buffer B/device "
             "| larger block B | union program holds B/device |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        t, p = r["times"], r["plan"]
        recv, lb = sum(p.recv_bytes().values()), sum(p.lower_bound_bytes().values())
        lines.append(f"| {r['case']} | {list(r['shape'])} | {r['bytes'] / 2**20:.2f} | {_us(t['device_put'])} | "
                     f"{_us(t['device_put (A/A)'])} | {_us(t['redist.reshard'])} | {_us(t['direct'])} | "
                     f"{_us(t['union'])} | {_us(t['one ppermute'])} | "
                     f"{_ci(t['device_put (A/A)'], t['device_put'])} | {_ci(t['redist.reshard'], t['device_put'])} | "
                     f"{_ci(t['direct'], t['device_put'])} | {_ci(t['union'], t['device_put'])} | "
                     f"{_us(t['device_put (fresh x)'])} | {_us(t['redist.reshard (fresh x)'])} | "
                     f"{_ci(t['redist.reshard (fresh x)'], t['device_put (fresh x)'])} | "
                     f"{p.rounds} | {recv} | {lb} | {p.peak_bytes()} | {p.memory_bound_bytes} | {p.transient_bytes()} |")
    return "\n".join(lines) + "\n"


def _auto_name(results: list[dict[str, Any]]) -> str:
    return transport_for(results[0]["plan"]).value if results else "auto"


# -- across two processes ------------------------------------------------------------------------------

LINE = re.compile(r"^(?P<case>\w+) (?P<verdict>OK|WRONG) .*$", re.M)
"""A worker's line per case: ``name OK|WRONG ours_us host_us ratio [lo, hi]``."""


def worker(index: int, port: int, mib: float, reps: int) -> None:
    """One of two ``jax.distributed`` processes (4 CPU devices each): per case, our move and
    what users do today (gather the array to every host, ``process_allgather``, and re-place it,
    ``make_array_from_callback``), interleaved; values checked on this process's devices."""
    from jax.experimental import multihost_utils

    from redist.launch import init_distributed

    init_distributed(index, 2, f"127.0.0.1:{port}")
    devs = jax.devices()  # ids differ across processes: the cases' ids index this list
    for case in CASES:
        src, dst = (_global(devs, *c) for c in (case.src, case.dst))
        rows = max(8, int(mib * 2**20 / 4 / 1024) // 8 * 8)
        g = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024)
        x = jax.make_array_from_callback(g.shape, src, g.__getitem__, dtype=g.dtype)
        y = redist.reshard(x, dst)
        ok = all(np.array_equal(np.asarray(s.data), g[s.index]) for s in y.addressable_shards)
        sides: dict[str, Callable[[], Any]] = {
            "redist.reshard": lambda: redist.reshard(x, dst),  # noqa: B023 (called in this iteration)
            "host": lambda: _via_host(x, dst, multihost_utils.process_allgather),  # noqa: B023
        }
        times: dict[str, list[float]] = {k: [] for k in sides}
        for r in range(reps):
            for name in balanced_order(list(sides), r):
                times[name].append(timed(sides[name]))
        print(f"{case.name} {'OK' if ok else 'WRONG'} {_us(times['redist.reshard'])} {_us(times['host'])} "
              f"{_ci(times['redist.reshard'], times['host'])} devices={len(y.addressable_shards)}", flush=True)


def _global(devs: list[Any], shape: tuple[int, ...], names: tuple[str, ...], ids: tuple[int, ...],
            spec: tuple[Any, ...]) -> NamedSharding:
    mesh = jax.sharding.Mesh(np.array([devs[i] for i in ids]).reshape(shape), names,
                             axis_types=(jax.sharding.AxisType.Explicit,) * len(names))
    return NamedSharding(mesh, PartitionSpec(*spec))


def _via_host(x: jax.Array, dst: NamedSharding, allgather: Callable[[Any], Any]) -> jax.Array:
    """Gather to every host and re-place: each process copies the blocks it holds into a host
    array, the processes all-gather those arrays and which cells each filled, every host keeps
    one holder's value per cell (the whole array), then places its devices' blocks of ``dst``."""
    part, got = np.zeros(x.shape, x.dtype), np.zeros(x.shape, bool)
    for s in x.addressable_shards:
        part[s.index], got[s.index] = np.asarray(s.data), True
    parts, gots = np.asarray(allgather(part)), np.asarray(allgather(got))
    host = np.take_along_axis(parts, np.argmax(gots, axis=0)[None], axis=0)[0]
    return jax.make_array_from_callback(host.shape, dst, host.__getitem__, dtype=host.dtype)


def across_processes(mib: float, reps: int, timeout_s: float = 600) -> list[str]:
    """Run ``worker`` in 2 local processes; each process's output (Gloo's logs cut out)."""
    from redist.launch import spawn_local, without_gloo_logs

    results = spawn_local(2, 4, lambda i, port: ["-m", "benchmarks.cross_mesh", "--worker", str(i), str(port),
                                                  "--mib", str(mib), "--reps", str(reps)], timeout_s)
    for r in results:
        if r.returncode:
            raise RuntimeError(f"a worker failed ({r.returncode}): {r.stderr[-3000:]}")
    return [without_gloo_logs(r.stdout) for r in results]


def _processes_report(sizes: Sequence[float], reps: int) -> str:
    lines = ["", "## Across 2 processes (jax.distributed, 4 CPU devices each, Gloo)", "",
             "Process 0's medians of call + `block_until_ready`, interleaved, "
             f"{reps} rounds; `host`: gather to every host (`process_allgather`) and re-place "
             "(`make_array_from_callback`), which holds the whole array on each host; ratio: ours / host "
             "(< 1: ours faster). Values checked on both processes.", "",
             "| case | MiB | both processes' values | redist.reshard us | host us | ours / host |", "|---|---|---|---|---|---|"]
    for mib in sizes:
        outs = across_processes(mib, reps)
        verdicts = [{m["case"]: m["verdict"] for m in LINE.finditer(o)} for o in outs]
        for m in LINE.finditer(outs[0]):
            f = m.group(0).split()
            both = "OK" if all(v.get(m["case"]) == "OK" for v in verdicts) else "WRONG"
            lines.append(f"| {m['case']} | {mib:g} | {both} | {f[2]} | {f[3]} | {' '.join(f[4:7])} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cross_mesh", description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, nargs="*", default=[1.0, 8.0], help="array sizes in MiB")
    ap.add_argument("--reps", type=int, default=200, help="interleaved rounds per case and size")
    ap.add_argument("--cases", nargs="*", default=None, help=f"case names (default: all of {[c.name for c in CASES]})")
    ap.add_argument("--out", default=None, help="directory for <date>-cross-mesh.md")
    ap.add_argument("--processes", action="store_true",
                    help="also run every case across 2 processes (jax.distributed, Gloo) against gather-to-host")
    ap.add_argument("--worker", nargs=2, type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(args_in)
    if args.worker:
        worker(args.worker[0], args.worker[1], args.mib[0], args.reps)
        return 0
    t0 = time.perf_counter()
    results = [run_case(c, mib, args.reps) for mib in args.mib for c in CASES
               if args.cases is None or c.name in args.cases]
    text = report(results, args_in, time.perf_counter() - t0)
    if args.processes:
        text += _processes_report(args.mib, max(5, args.reps // 5))
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{datetime.date.today()}-cross-mesh.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
