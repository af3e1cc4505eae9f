"""``redist plan`` and ``redist demo``: plan a redistribution, and run a few on simulated devices.

``redist plan SRC DST --mesh x=2,y=4 [--slow-axes x] [--draw] [--picture plan.png]`` prints the
plan (each step in words, with its bytes and collectives) and its measures against their bounds
(docs/design.md section 4), and optionally draws it. It needs no devices and imports no JAX.

``redist demo`` (the README's first command) plans showcase redistributions on ``{x=2,y=4}``, runs
each as one compiled program on 8 simulated CPU devices, checks every device's block against the
NumPy slice of the global array, and prints next to ours what XLA does for the same move
(``jax.jit(lambda a: a, out_shardings=dst)``): bytes received per device, read from each compiled
program's collectives with the same parser (``benchmarks.hlo``), and temp / peak memory from
``Compiled.memory_analysis()``. ``XLA_FLAGS`` must ask for 8 devices before JAX is imported, so the
demo sets it itself (and reports an error if JAX is already running with fewer devices).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

DEVICE_FLAG = "--xla_force_host_platform_device_count=8"

DEMO_MESH = "x=2,y=4"
DEMO_CASES: tuple[tuple[str, str, str], ...] = (
    ("transpose the sharded dimension, minor-major order swapped",
     "f32[2048@(x,y),1024]", "f32[2048,1024@(y,x)]"),
    ("swap the axes of a 2-D sharding", "f32[2048@x,2048@y]", "f32[2048@y,2048@x]"),
    ("move a vector from y (4 ways) to x (2 ways)", "f32[4096@y]", "f32[4096@x]"),
    ("finish a pending sum over y while sharding over it",
     "f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]"),
)


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("plan", help="plan the collectives that move an array between two layouts, step by step")
    p.add_argument("src", help="source type, e.g. 'f32[512@(x,y),128]'")
    p.add_argument("dst", help="destination type, e.g. 'f32[512,128@(y,x)]'")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--objective", choices=("time", "bytes"), default="time",
                   help="time: fastest under the measured cost model (default); bytes: least traffic "
                        "first, at the transfer lower bound")
    p.add_argument("--slow-axes", default="",
                   help="comma-separated mesh axes that cross hosts (10x less bandwidth, more latency)")
    p.add_argument("--picture", metavar="FILE.png", default=None,
                   help="draw each step's layout and bytes matrix to a PNG (needs matplotlib: the viz extra)")
    p.add_argument("--draw", action="store_true", help="draw each step's layout and bytes matrix in the terminal")
    p.add_argument("--autotune", type=int, nargs="?", const=4, default=None, metavar="K",
                   help="time the planner's best K plans (default 4) on this machine's devices and show the "
                        "fastest (redist.autotune; 8 simulated CPU devices where JAX runs on CPU)")
    handlers["plan"] = run_plan_command

    d = sub.add_parser("demo", help="run showcase redistributions on 8 simulated CPU devices, next to XLA")
    d.add_argument("--cases", type=int, nargs="*", default=None,
                   help=f"which showcase cases to run, 1..{len(DEMO_CASES)} (default all)")
    handlers["demo"] = run_demo


# -- redist plan ----------------------------------------------------------------------------------------


def _cost_model(mesh: Any, slow_axes: str, objective: str = "time") -> Any:
    """``--objective time``: the library's default (fastest under the backend's measured profile);
    ``bytes``: least traffic first (the transfer bound). ``--slow-axes`` keeps the objective."""
    from redist import CostModel
    from spmd_types import UnknownAxisError

    names = [a.strip() for a in slow_axes.split(",") if a.strip()]
    for a in names:
        if a not in mesh:
            raise UnknownAxisError(f"--slow-axes names unknown mesh axis {a!r}; the mesh has axes {list(mesh.names)}")
    from redist.profile import default_cost_model

    base = default_cost_model() if objective == "time" else CostModel(objective="bytes")
    return CostModel.with_slow_axes(names, base=base) if names else base


def steps_table(plan: Any) -> Any:
    """One row per step: what it does and the type after, its bytes and collectives, in words below."""
    from rich.table import Table
    from rich.text import Text

    from redist.render import fmt_bytes, step_texts

    table = Table(show_edge=False, pad_edge=False, expand=False)
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("received per device", justify="right")
    table.add_column("collectives", justify="right")
    for i, (st, m, t) in enumerate(zip(step_texts(plan), plan.measures, plan.types)):
        body = Text.assemble((st.title, "bold"), " to ", (str(t), "cyan"), "\n", (st.moves, ""))
        if st.collectives:
            body.append("\n" + st.why_count, style="dim")
        table.add_row(str(i + 1), body, fmt_bytes(m.recv_bytes) if st.collectives else "-", str(st.collectives))
    return table


def trials_table(tuned: Any) -> Any:
    """``redist plan --autotune``: each plan timed, the model's choice first, the one kept marked."""
    from rich.table import Table

    from redist.render import fmt_time

    table = Table(show_edge=False, pad_edge=False, expand=False,
                  title="autotune: the planner's best plans, timed on this machine", title_justify="left")
    table.add_column("")
    table.add_column("plan")
    table.add_column("priced", justify="right")
    table.add_column("measured", justify="right")
    for i, t in enumerate(tuned.trials):
        mark = "kept" if t.plan is tuned.plan else ""
        name = " + ".join(s.kind.replace("_", "-") for s in t.plan.steps) or "(nothing to do)"
        measured = fmt_time(t.measured_s) if t.measured_s == t.measured_s else "-"  # NaN: not timed
        table.add_row(mark, name + (" (the model's choice)" if i == 0 else ""), fmt_time(t.predicted_s), measured)
    return table


def measures_table(plan: Any, slow_axes: str = "") -> Any:
    """The plan's totals next to the bounds they are held to (docs/design.md section 4)."""
    from rich.table import Table

    from redist.render import fmt_bytes, fmt_time

    def met(v: float, bound: float) -> str:
        return "met" if abs(v - bound) < 1e-6 else ("below" if v < bound else "[red]above[/red]")

    table = Table(show_edge=False, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column()
    table.add_row("received per device", fmt_bytes(plan.recv_bytes),
                  f"lower bound {fmt_bytes(plan.lower_bound_bytes)}: {met(plan.recv_bytes, plan.lower_bound_bytes)}")
    table.add_row("peak memory per device", fmt_bytes(plan.peak_bytes),
                  f"max(source, destination) {fmt_bytes(plan.memory_bound_bytes)}: "
                  f"{met(plan.peak_bytes, plan.memory_bound_bytes)}")
    model = ("measured cost profile" if plan.cost_model.measured else "alpha-beta estimate") + (
        f", slow axes {slow_axes}" if slow_axes else "")
    table.add_row("estimated time", fmt_time(plan.time_s), model)
    return table


def run_plan_command(args: argparse.Namespace) -> int:
    if args.autotune is not None:
        from redist.errors import RedistError
        from redist.tuning import check_top
        try:
            check_top(args.autotune, "--autotune")
        except RedistError as e:
            print(f"error: {e}; leave the flag out to time none", file=sys.stderr)
            return 2
    from spmd_types import Mesh

    mesh = Mesh.parse(args.mesh)
    problem = ensure_devices(mesh.size) if args.autotune is not None else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from redist import autotune, redistribute
    from redist.render import plural
    from redist_cli.ui import colour, console, print_all

    cm = _cost_model(mesh, args.slow_axes, args.objective)
    con = console()
    if args.autotune is not None:
        tuned = autotune(args.src, args.dst, mesh, cost_model=cm, top=args.autotune)
        con.print(trials_table(tuned))
        con.print()
        plan = tuned.plan
    else:
        plan = redistribute(args.src, args.dst, mesh, cost_model=cm)
    con.print(f"[bold]{plan.src}[/bold] -> [bold]{plan.dst}[/bold] on mesh {mesh}: "
              f"{plural(len(plan.steps), 'step')}, {plural(plan.n_collectives, 'collective')}")
    if plan.steps:
        con.print(steps_table(plan))
    else:
        con.print("the layouts are equal: nothing to do")
    con.print()
    con.print(measures_table(plan, args.slow_axes))
    if args.draw:
        con.print()
        from redist.visualize import plan_renderables

        print_all(con, plan_renderables(plan, colour(con)))
    if args.picture:
        from redist.visualize import save_plan_picture

        con.print(f"wrote {save_plan_picture(plan, args.picture)}")
    return 0


# -- redist demo ----------------------------------------------------------------------------------------


def ensure_devices(n: int = 8) -> str | None:
    """Ask for ``n`` CPU devices before JAX starts; an error message if JAX already has fewer."""
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.device_count() < n:
        return (f"the demo needs {n} devices but JAX has {jax.device_count()}; "
                f"set XLA_FLAGS={DEVICE_FLAG} before JAX is imported")
    return None


def _memory(compiled: Any) -> tuple[int, int]:
    """(temp bytes, peak = arguments + outputs + temp - aliased) per device."""
    ma = compiled.memory_analysis()
    if ma is None:  # pragma: no cover - the CPU backend provides it
        return 0, 0
    temp = int(ma.temp_size_in_bytes)
    peak = int(ma.argument_size_in_bytes) + int(ma.output_size_in_bytes) + temp - int(ma.alias_size_in_bytes)
    return temp, peak


def _input(t: Any, jmesh: Any, seed: int = 0) -> tuple[Any, Any]:
    """A jax.Array laid out as ``t`` on ``jmesh`` and the global NumPy value it holds.

    Small integers in float32 keep sums exact, so values are compared for equality. An unreduced
    source is built from per-device partials (the simulator's ``scatter``).
    """
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    from redist.simulate import scatter
    from spmd_types.dtypes import numpy_dtype
    from spmd_types.jax_interop import to_partition_spec

    rng = np.random.default_rng(seed)
    g = rng.integers(0, 128, size=t.shape).astype(numpy_dtype(t.dtype))
    sharding = NamedSharding(jmesh, to_partition_spec(t))
    if not t.unreduced:
        return jax.device_put(g, sharding), g
    parts = scatter(g, t, rng)
    devices = list(jmesh.devices.reshape(-1))
    shards = [jax.device_put(parts[v], devices[v]) for v in range(t.mesh.size)]
    return jax.make_array_from_single_device_arrays(t.shape, sharding, shards), g


def _check(y: Any, g: Any, want_spec: Any) -> str | None:
    import numpy as np

    if y.sharding.spec != want_spec:
        return f"output sharding {y.sharding.spec} is not {want_spec}"
    for shard in y.addressable_shards:
        if not np.array_equal(np.asarray(shard.data), g[shard.index]):
            return f"device {shard.device} holds wrong values for block {shard.index}"
    return None


def _kb(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1024:,.1f} KiB"


def demo_case(index: int, title: str, src_text: str, dst_text: str, mesh_text: str = DEMO_MESH) -> tuple[list[str], bool]:
    """Plan, run and check one case; the report lines and whether the values were right."""
    import jax
    from jax.sharding import NamedSharding

    from benchmarks.hlo import parse_collectives
    from redist import redistribute
    from redist.executor import compile_plan
    from redist.render import format_plan
    from spmd_types import Mesh
    from spmd_types.jax_interop import mesh_to_jax, to_partition_spec

    mesh = Mesh.parse(mesh_text)
    start = time.perf_counter()
    plan = redistribute(src_text, dst_text, mesh)
    plan_s = time.perf_counter() - start
    explicit = mesh_to_jax(mesh, explicit=True)
    x, g = _input(plan.src, explicit, seed=index)
    dst_spec = to_partition_spec(plan.dst)

    ours = compile_plan(plan, explicit).lower(x).compile()
    ok = _check(ours(x), g, dst_spec)
    ours_c = parse_collectives(ours.as_text() or "")
    ours_temp, ours_peak = _memory(ours)

    # XLA: the identity with the destination as out_shardings (Auto axes, as most programs run;
    # unreduced sources exist only on Explicit axes).
    xla_mesh = explicit if plan.src.unreduced else mesh_to_jax(mesh, explicit=False)
    x_xla = x if plan.src.unreduced else jax.device_put(g, NamedSharding(xla_mesh, to_partition_spec(plan.src)))
    ident = jax.jit(lambda a: a, out_shardings=NamedSharding(xla_mesh, dst_spec))
    xla = ident.lower(x_xla).compile()
    xla_ok = _check(xla(x_xla), g, dst_spec)
    xla_c = parse_collectives(xla.as_text() or "")
    xla_temp, xla_peak = _memory(xla)

    item = plan.src.itemsize
    lines = [f"[{index}] {title}", f"    {plan.src} -> {plan.dst} on mesh {mesh}  (planned in {plan_s * 1e3:.1f} ms)"]
    lines += ["    " + line for line in format_plan(plan).splitlines()[1:]]
    lines.append("    values: " + ("OK, every device's block equals the NumPy slice of the global array"
                                   if ok is None else f"WRONG: {ok}"))
    if xla_ok is not None:
        lines.append(f"    XLA's values: WRONG: {xla_ok}")
    w = 34
    lines += [
        f"    {'':<22}{'ours':<{w}}XLA (jit identity, out_shardings=dst)",
        f"    {'recv / device':<22}{_kb(ours_c.recv_bytes_as(item)):<{w}}{_kb(xla_c.recv_bytes_as(item))}"
        f"   (lower bound {_kb(plan.lower_bound_bytes)}; plan says {_kb(plan.recv_bytes)})",
        f"    {'collectives':<22}{_short(ours_c):<{w}}{_short(xla_c)}",
        f"    {'temp memory':<22}{_kb(ours_temp):<{w}}{_kb(xla_temp)}",
        f"    {'peak memory':<22}{_kb(ours_peak):<{w}}{_kb(xla_peak)}"
        f"   (src {_kb(plan.src.local_bytes)} + dst {_kb(plan.dst.local_bytes)} per device)",
    ]
    return lines, ok is None


def _short(c: Any) -> str:
    from collections import Counter

    kinds = Counter(c.kinds())
    return " + ".join(f"{n}x {k}" if n > 1 else k for k, n in kinds.items()) or "(none)"


def run_demo(args: argparse.Namespace) -> int:
    problem = ensure_devices(8)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    chosen: Sequence[int] = args.cases if args.cases else range(1, len(DEMO_CASES) + 1)
    bad = [i for i in chosen if not 1 <= i <= len(DEMO_CASES)]
    if bad:
        print(f"error: no demo case {bad[0]}; cases are 1..{len(DEMO_CASES)}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    print(f"redist demo: {len(chosen)} redistributions on mesh {{{DEMO_MESH}}}, 8 simulated CPU devices\n")
    all_ok = True
    for i in chosen:
        title, src, dst = DEMO_CASES[i - 1]
        lines, ok = demo_case(i, title, src, dst)
        all_ok &= ok
        print("\n".join(lines))
        print()
    print(f"{'all values correct' if all_ok else 'SOME VALUES WRONG'}; "
          f"{time.perf_counter() - start:.1f} s")
    return 0 if all_ok else 1
