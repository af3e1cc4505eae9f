"""``redist plan`` and ``redist demo``: plan a redistribution, and run a few on simulated devices.

``redist plan SRC DST --mesh x=2,y=4 [--slow-axes x] [--draw] [--picture plan.png] [--dims 1,2]``
prints the plan (each step in words, with its bytes and collectives) and its measures against their
bounds (docs/design.md section 4), and optionally draws it. Plans come from types, so it needs no
devices; ``--autotune`` times the best plans on the mesh's devices. Given two placements
(``'f32[8@x] on {x=2} at devices [0,1]'``) it prints the move between meshes and its certificate
(docs/design.md section 8.4).

``redist demo`` (the README's first command) plans showcase redistributions on ``{x=2,y=4}``, runs
each as one compiled program on 8 simulated CPU devices, checks every device's block against the
NumPy slice of the global array, and prints next to ours what XLA does for the same move
(``jax.jit(lambda a: a, out_shardings=dst)``): bytes received per device (mean and busiest), read from each compiled
program's collectives with the same parser (``redist.hlo``), and temp / peak memory from
``Compiled.memory_analysis()``. ``XLA_FLAGS`` must ask for 8 devices before JAX is imported, so the
demo sets it itself (and reports an error if JAX is already running with fewer devices).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

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
    p.add_argument("src", help="source type, e.g. 'f32[512@(x,y),128]', or a placement for a move between "
                               "meshes, e.g. 'f32[512@x,128] on {x=4} at devices [0,1,2,3]'")
    p.add_argument("dst", help="destination type, e.g. 'f32[512,128@(y,x)]', or a placement, e.g. "
                               "'f32[512,128@y] on {y=4} at devices [4,5,6,7]'")
    p.add_argument("--mesh", default=None, help="the mesh of the two types, e.g. x=2,y=4 (placements name their own)")
    p.add_argument("--objective", choices=("measured", "bytes", "alpha-beta"), default="measured",
                   help="measured: least time under the backend's measured profile (default); bytes: least "
                        "received bytes first, at the transfer lower bound; alpha-beta: least time under the "
                        "unmeasured alpha-beta model")
    p.add_argument("--slow-axes", default="",
                   help="comma-separated mesh axes that cross hosts (10x less bandwidth, more latency)")
    p.add_argument("--picture", metavar="FILE.png", default=None,
                   help="draw each step's layout and bytes matrix to a PNG (needs matplotlib: the viz extra)")
    p.add_argument("--draw", action="store_true", help="draw each step's layout and bytes matrix in the terminal")
    p.add_argument("--dims", default=None, metavar="R,C",
                   help="with --draw or --picture: the array dimensions to draw as rows and columns, e.g. 1,2 "
                        "(one number: a single row; default the two dimensions sharded most ways)")
    p.add_argument("--autotune", type=int, nargs="?", const=4, default=None, metavar="K",
                   help="time the planner's best K plans (default 4) on this machine's devices and show the "
                        "fastest (redist.autotune; 8 simulated CPU devices where JAX runs on CPU)")
    handlers["plan"] = run_plan_command

    d = sub.add_parser("demo", help="run showcase redistributions on 8 simulated CPU devices, next to XLA")
    d.add_argument("--cases", type=int, nargs="*", default=None,
                   help=f"which showcase cases to run, 1..{len(DEMO_CASES)} (default all)")
    handlers["demo"] = run_demo


# -- redist plan ----------------------------------------------------------------------------------------


def _cost_model(mesh: Any, slow_axes: str, objective: str = "measured") -> Any:
    """``--objective``'s model (``redist.cost_model_for``): ``measured``, the library's default;
    ``bytes``: least traffic first (the transfer bound); ``alpha-beta``. ``--slow-axes`` keeps the objective."""
    from redist import CostModel, cost_model_for
    from spmd_types import UnknownAxisError

    names = [a.strip() for a in slow_axes.split(",") if a.strip()]
    for a in names:
        if a not in mesh:
            raise UnknownAxisError(f"--slow-axes names unknown mesh axis {a!r}; the mesh has axes {list(mesh.names)}")
    base = cost_model_for(objective)
    return CostModel.with_slow_axes(names, base=base) if names else base


def steps_table(plan: Any) -> Any:
    """One row per step: what it does and the type after, its bytes and collectives, in words below."""
    from rich.table import Table
    from rich.text import Text

    from redist.render import recv_text, step_texts

    table = Table(show_edge=False, pad_edge=False, expand=False)
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("received (mean; busiest device)", justify="right")
    table.add_column("collectives", justify="right")
    for i, (st, m, t, most) in enumerate(zip(step_texts(plan), plan.measures, plan.types, plan.step_recv_bytes_max)):
        body = Text.assemble((st.title, "bold"), " to ", (str(t), "cyan"), "\n", (st.moves, ""))
        if st.collectives:
            body.append("\n" + st.why_count, style="dim")
        table.add_row(str(i + 1), body, recv_text(m.recv_bytes, most) if st.collectives else "-", str(st.collectives))
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
    alike = met(plan.recv_bytes_max, plan.recv_bytes) == met(plan.lower_bound_bytes_max, plan.lower_bound_bytes) == "met"
    table.add_row("received per device" + (" (every device alike)" if alike else " (mean)"), fmt_bytes(plan.recv_bytes),
                  f"lower bound {fmt_bytes(plan.lower_bound_bytes)}: {met(plan.recv_bytes, plan.lower_bound_bytes)}")
    if not alike:
        table.add_row("received by the busiest device", fmt_bytes(plan.recv_bytes_max),
                      f"lower bound {fmt_bytes(plan.lower_bound_bytes_max)}: "
                      f"{met(plan.recv_bytes_max, plan.lower_bound_bytes_max)} (each step's busiest, summed)")
    table.add_row("peak memory per device", fmt_bytes(plan.peak_bytes),
                  f"max(source, destination) {fmt_bytes(plan.memory_bound_bytes)}: "
                  f"{met(plan.peak_bytes, plan.memory_bound_bytes)}")
    model = (f"objective {plan.objective.value}, "
             + ("measured cost profile" if plan.cost_model.measured else "alpha-beta estimate")
             + (f", slow axes {slow_axes}" if slow_axes else ""))
    table.add_row("estimated time", fmt_time(plan.time_s), model)
    return table


def _picture_options(args: argparse.Namespace, src: Any) -> Any:
    """Check --picture and --dims before planning (a bad file name fails at once, not after the plan
    has printed); the chosen dimensions, or None for the default."""
    from redist.visualize import check_picture_path, chosen_dims, parse_dims

    if args.picture:
        check_picture_path(args.picture)
    if args.dims is None:
        return None
    if not (args.draw or args.picture):
        from redist.visualize import PictureError

        raise PictureError("--dims chooses what --draw and --picture draw; add one of them")
    return chosen_dims(parse_dims(args.dims), src)


def _check_autotune(args: argparse.Namespace, mesh: Any) -> str | None:
    """Why --autotune cannot run (a bad count, too few devices), or None."""
    from redist_cli import devices

    devices.ask_for(mesh.size, cpu=False)  # before ``redist`` imports JAX
    from redist.errors import RedistError
    from redist.tuning import check_top

    try:
        check_top(args.autotune, "--autotune")
    except RedistError as e:
        return f"{e}; leave the flag out to time none"
    return devices.missing(mesh.size, "redist plan --autotune")


def _placements(args: argparse.Namespace) -> str | None:
    """Why two placements cannot be planned with these flags, or None; placements carry their
    meshes and devices, so ``--mesh`` and the single-mesh flags do not apply."""
    flags = [f for f, on in (("--mesh", args.mesh is not None), ("--slow-axes", bool(args.slow_axes)),
                             ("--draw", args.draw), ("--picture", args.picture), ("--dims", args.dims),
                             ("--autotune", args.autotune is not None)) if on]
    if flags:
        return f"{', '.join(flags)} apply to a move on one mesh; placements name their own meshes and devices"
    return None


def run_cross_mesh_plan(args: argparse.Namespace) -> int:
    """``redist plan`` of two placements: the cross-mesh plan and its certificate (exit status 1
    where a property is undecided; a refuted one raises ``VerificationError``)."""
    problem = _placements(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from proofs.cross_mesh import verify_cross_mesh
    from redist import cross_mesh_plan
    from spmd_types.placement import Placement

    plan = cross_mesh_plan(Placement.parse(args.src), Placement.parse(args.dst))
    print(plan)
    print()
    cert = verify_cross_mesh(plan)
    print(cert)
    return 0 if cert.ok else 1


def is_placement(text: str) -> bool:
    """Whether ``text`` is placement text (``TYPE on {MESH} at devices [IDS]``) rather than a type."""
    return " on " in text or " at devices" in text


def run_plan_command(args: argparse.Namespace) -> int:
    from spmd_types import Mesh, parse

    if is_placement(args.src) or is_placement(args.dst):
        if not (is_placement(args.src) and is_placement(args.dst)):
            print("error: give two placements ('TYPE on {MESH} at devices [IDS]') for a move between meshes, or "
                  "two types and --mesh for a move on one mesh", file=sys.stderr)
            return 2
        return run_cross_mesh_plan(args)
    if args.mesh is None:
        print("error: --mesh is required for two types (e.g. --mesh x=2,y=4)", file=sys.stderr)
        return 2
    mesh = Mesh.parse(args.mesh)
    problem = _check_autotune(args, mesh) if args.autotune is not None else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    dims = _picture_options(args, parse(args.src, mesh))
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

        print_all(con, plan_renderables(plan, colour(con), dims))
    if args.picture:
        from redist.visualize import save_plan_picture

        con.print(f"wrote {save_plan_picture(plan, args.picture, dims)}")
    return 0


# -- redist demo ----------------------------------------------------------------------------------------


def _memory(compiled: Any) -> tuple[int, int]:
    """(temp bytes, peak bytes) per device."""
    from redist.xla_side import MemoryStats

    m = MemoryStats.of(compiled)
    return m.temp_bytes, m.peak_bytes


def _busiest(c: Any, itemsize: int) -> float | None:
    """What the device that receives most receives in a compiled program."""
    per = c.device_recv_bytes_as(itemsize)
    return None if per is None else float(per.max(initial=0.0))


def _kb(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1024:,.1f} KiB"


def demo_case(index: int, title: str, src_text: str, dst_text: str, mesh_text: str = DEMO_MESH) -> tuple[list[str], bool]:
    """Plan, run and check one case; the report lines and whether the values were right."""
    import jax
    from jax.sharding import NamedSharding

    from redist import redistribute
    from redist.arrays import check_output, make_input
    from redist.executor import compile_plan
    from redist.hlo import parse_collectives
    from redist.render import format_plan
    from spmd_types import Mesh
    from spmd_types.jax_interop import mesh_to_jax, to_partition_spec

    mesh = Mesh.parse(mesh_text)
    start = time.perf_counter()
    plan = redistribute(src_text, dst_text, mesh)
    plan_s = time.perf_counter() - start
    explicit = mesh_to_jax(mesh, explicit=True)
    x, g = make_input(plan.src, explicit, seed=index)
    dst_spec = to_partition_spec(plan.dst)

    ours = compile_plan(plan, explicit).lower(x).compile()
    ok = check_output(ours(x), g, plan.dst)
    ours_c = parse_collectives(ours.as_text() or "")
    ours_temp, ours_peak = _memory(ours)

    # XLA: the identity with the destination as out_shardings (Auto axes, as most programs run;
    # unreduced sources exist only on Explicit axes).
    xla_mesh = explicit if plan.src.unreduced else mesh_to_jax(mesh, explicit=False)
    x_xla = x if plan.src.unreduced else jax.device_put(g, NamedSharding(xla_mesh, to_partition_spec(plan.src)))
    ident = jax.jit(lambda a: a, out_shardings=NamedSharding(xla_mesh, dst_spec))
    xla = ident.lower(x_xla).compile()
    xla_ok = check_output(xla(x_xla), g, plan.dst)
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
        f"    {'recv / device (mean)':<22}{_kb(ours_c.recv_bytes_as(item)):<{w}}{_kb(xla_c.recv_bytes_as(item))}"
        f"   (lower bound {_kb(plan.lower_bound_bytes)}; plan says {_kb(plan.recv_bytes)})",
        f"    {'recv, busiest device':<22}{_kb(_busiest(ours_c, item)):<{w}}{_kb(_busiest(xla_c, item))}",
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
    from redist_cli import devices

    problem = devices.ensure(8, "redist demo")
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
