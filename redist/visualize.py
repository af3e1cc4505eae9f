"""Pictures of layouts and plans, in the visual language of ``jax.debug.visualize_array_sharding``.

A layout is drawn as the global array cut into blocks, each labelled with the devices that hold
it; a plan as one layout per step with, under each step, the device-by-device matrix of bytes
received. The data (``layout``, ``recv_matrix``, ``plan_frames``) is computed by plain functions
that tests check exactly; the terminal drawing uses ``rich`` (what JAX's own visualizer uses) and
the PNG uses matplotlib, imported only when a picture is saved (the ``viz`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from redist.atoms import atoms_of_axes
from redist.cost import DEFAULT_COST_MODEL
from redist.errors import RedistError
from redist.exchange import schedule
from redist.exchange_a2a import slots
from redist.facets import FacetTable
from redist.groups import members
from redist.measure import StepMeasure, group_size, measure
from redist.render import StepText, axes_text, device_list, fmt_compact, fmt_size, plural, step_texts
from redist.steps import ALL_STEPS, Comm, ExchangeAllToAll, Step
from spmd_types import ShardingType
from spmd_types.errors import MissingExtraError
from spmd_types.mesh import Axis

if TYPE_CHECKING:
    from redist.plan import Plan

MATRIX_LABEL_LIMIT = 16
"""Devices up to which matrices carry numbers in each cell (beyond, colour only)."""
PICTURE_FORMATS = ("png", "pdf", "svg")
"""File types a picture is written as (matplotlib picks the format from the file name)."""

Dims = tuple[int | None, int | None]
"""The array dimensions drawn as (rows, columns); ``None``: a single row or column."""


class PictureError(RedistError):
    """A picture cannot be drawn as asked: a file name or dimension choice it cannot honour."""


def check_picture_path(path: str | Path, option: str = "--picture") -> Path:
    """``path`` if a picture can be written there (known file type, existing folder, matplotlib
    installed); checked before planning so a bad name fails at once, not after the output."""
    p = Path(path)
    if p.suffix.lower().lstrip(".") not in PICTURE_FORMATS:
        raise PictureError(f"{option} {path}: pictures are written as {', '.join('.' + f for f in PICTURE_FORMATS)}; "
                           f"give a file name ending in one of them")
    if not p.parent.is_dir():
        raise PictureError(f"{option} {path}: the folder {p.parent} does not exist; create it or give another path")
    pyplot()
    return p


def parse_dims(text: str, option: str = "--dims") -> tuple[int, ...]:
    """``"1,2"`` as ``(1, 2)``: the dimensions a picture draws, rows then columns."""
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise PictureError(f"{option} {text}: give one or two dimension numbers separated by a comma, "
                           f"e.g. {option} 1,2") from None
    if not 1 <= len(dims) <= 2 or len(set(dims)) != len(dims):
        raise PictureError(f"{option} {text}: give one or two different dimensions, e.g. {option} 1,2")
    return dims


def chosen_dims(dims: Sequence[int], t: ShardingType, option: str = "--dims") -> Dims:
    """The dimensions ``dims`` of ``t`` as rows and columns (one dimension: a single row), after
    checking that ``t`` has them."""
    bad = [d for d in dims if not 0 <= d < t.rank]
    if bad:
        have = f"dimensions 0..{t.rank - 1}" if t.rank else "no dimensions (a scalar)"
        raise PictureError(f"{option} {','.join(map(str, dims))}: {t} has {have}; "
                           f"dimension {bad[0]} does not exist")
    return (None, dims[0]) if len(dims) == 1 else (dims[0], dims[1])


# -- data ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Which devices hold each block of the global array, projected on two dimensions.

    ``grid[r][c]`` lists the devices whose block covers block row ``r`` and column ``c``;
    ``row_dim``/``col_dim`` are the array dimensions drawn (None: a single row or column)."""

    type: ShardingType
    row_dim: int | None
    col_dim: int | None
    grid: tuple[tuple[tuple[int, ...], ...], ...]

    @property
    def extent(self) -> tuple[int, int]:
        """Global (rows, columns) the picture spans."""
        s = self.type.shape
        return (1 if self.row_dim is None else s[self.row_dim], 1 if self.col_dim is None else s[self.col_dim])

    @property
    def partial(self) -> bool:
        return bool(self.type.unreduced)

    @property
    def collapsed(self) -> tuple[int, ...]:
        """Dimensions not drawn (rank > 2)."""
        return tuple(d for d in range(self.type.rank) if d not in (self.row_dim, self.col_dim))


def display_dims(types: Sequence[ShardingType]) -> Dims:
    """The dimensions to draw: rank 1 as a row (like JAX), rank 2 as is, higher ranks the two
    dimensions sharded most ways over all ``types`` (ties: the earlier), in order."""
    rank = types[0].rank
    if rank == 0:
        return None, None
    if rank == 1:
        return None, 0
    ways = [max(t.dim_shards(d) for t in types) for d in range(rank)]
    pick = sorted(sorted(range(rank), key=lambda d: (-ways[d], d))[:2])
    return pick[0], pick[1]


def layout(t: ShardingType, dims: Dims | None = None) -> Layout:
    row_dim, col_dim = display_dims([t]) if dims is None else dims
    n_r = 1 if row_dim is None else t.dim_shards(row_dim)
    n_c = 1 if col_dim is None else t.dim_shards(col_dim)
    bb = np.asarray(t.blocks())
    cells: list[list[list[int]]] = [[[] for _ in range(n_c)] for _ in range(n_r)]
    for v in range(t.mesh.size):
        r = 0 if row_dim is None else int(bb[v, row_dim, 0]) // t.local_shape[row_dim]
        c = 0 if col_dim is None else int(bb[v, col_dim, 0]) // t.local_shape[col_dim]
        cells[r][c].append(v)
    return Layout(t, row_dim, col_dim, tuple(tuple(tuple(c) for c in row) for row in cells))


def recv_matrix(step: Step, before: ShardingType, after: ShardingType) -> np.ndarray:
    """``[receiver, sender]`` bytes a step moves (``TRAFFIC``); row sums are ``recv_bytes``."""
    return TRAFFIC[type(step)](step, before, after)


Traffic = Callable[[Step, ShardingType, ShardingType], np.ndarray]
TRAFFIC: FacetTable[Traffic] = FacetTable("traffic matrix", "redist.visualize.TRAFFIC")
"""Per step class, the bytes each device receives from each other device."""


@TRAFFIC.register(ExchangeAllToAll)
def _slots_matrix(step: Step, before: ShardingType, after: ShardingType) -> np.ndarray:
    """An exchange run as one all-to-all sends its padded slots: ``k`` cells from every other
    member of its group (what the cost model charges), not only the exchange's cells."""
    s = slots(before, after)
    return _group_matrix(before, s.names, s.k * s.cell_bytes(before.itemsize))


@TRAFFIC.register(*(c for c in ALL_STEPS if c is not ExchangeAllToAll))
def _comm_matrix(step: Step, before: ShardingType, after: ShardingType) -> np.ndarray:
    """Point-to-point steps count the cells of their schedule; typed collectives split each
    device's ring traffic (its measured ``recv_bytes``) evenly over its group's other members."""
    n = before.mesh.size
    out = np.zeros((n, n), dtype=np.float64)
    if step.comm is Comm.POINT_TO_POINT:
        sch = schedule(before, after)
        cell = math.prod(sch.cell) * before.itemsize
        for r in sch.rounds:
            for src, dst in r.pairs:
                out[dst, src] += cell
        return out
    p = group_size(step, before)
    if step.comm is Comm.LOCAL or p <= 1:
        return out
    return _group_matrix(before, step.group_axes(), measure(step, before, after, DEFAULT_COST_MODEL).recv_bytes / (p - 1))


def _group_matrix(t: ShardingType, axes: Sequence[Axis], per_peer: float) -> np.ndarray:
    """``per_peer`` bytes from every other member of each device's group along ``axes``."""
    out = np.zeros((t.mesh.size, t.mesh.size), dtype=np.float64)
    for v, group in enumerate(members(t.mesh, atoms_of_axes(t.mesh, tuple(axes)))):
        for u in group:
            if u != v:
                out[v, u] = per_peer
    return out


@dataclass(frozen=True)
class Frame:
    """The array after step ``index`` (0: the source), with that step's text and traffic."""

    index: int
    layout: Layout
    text: StepText | None
    measure: StepMeasure | None
    matrix: np.ndarray | None


def plan_frames(plan: Plan, dims: Dims | None = None) -> list[Frame]:
    """The source and each step's result, drawn on ``dims`` (default ``display_dims``)."""
    ts = plan.all_types
    dims = display_dims(ts) if dims is None else dims
    frames = [Frame(0, layout(plan.src, dims), None, None, None)]
    for i, (s, st, m) in enumerate(zip(plan.steps, step_texts(plan), plan.measures)):
        frames.append(Frame(i + 1, layout(ts[i + 1], dims), st, m, recv_matrix(s, ts[i], ts[i + 1])))
    return frames


# -- shared drawing helpers ------------------------------------------------------------------------
def _palette() -> list[str]:
    """20 light colours (tab10 blended towards white) that keep black labels readable."""
    base = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
            "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    out = []
    for mix in (0.45, 0.72):
        for h in base:
            rgb = [int(h[i:i + 2], 16) for i in (1, 3, 5)]
            out.append("#" + "".join(f"{round(c + (255 - c) * mix):02x}" for c in rgb))
    return out


PALETTE = _palette()


def block_colour(devices: Sequence[int]) -> str:
    """A block's colour follows its lowest device, so a device keeps its colour across steps."""
    return PALETTE[min(devices) % len(PALETTE)] if devices else "#ffffff"


def block_label(devices: Sequence[int], partial: bool) -> str:
    """``0-3`` (devices holding copies) or ``Σ 0-3`` (devices holding partial sums)."""
    return ("Σ " if partial else "") + device_list(devices)


def dim_caption(lay: Layout) -> str:
    t = lay.type
    parts = []
    for name, d in (("rows", lay.row_dim), ("columns", lay.col_dim)):
        if d is not None:
            parts.append(f"{name} are dim {d} ({t.shape[d]})")
    if lay.collapsed:
        gone = ",".join(map(str, lay.collapsed))
        parts.append(f"{'dim' if len(lay.collapsed) == 1 else 'dims'} {gone} not drawn (devices listed "
                     f"together may hold different parts of {'it' if len(lay.collapsed) == 1 else 'them'})")
    return ("Drawn: " + "; ".join(parts) + ".") if parts else "A scalar: one block."


def legend_text(partial: bool, picture: bool = True) -> str:
    text = ("Layouts: the global array, each block labelled with the devices that hold it "
            "(a device keeps its colour).")
    if partial:
        text += f" Σ{', hatched' if picture else ''}: those devices hold partial sums; the value is their sum."
    return text


# -- terminal (rich) ---------------------------------------------------------------------------------
def layout_renderable(lay: Layout, color: bool = True, max_width: int = 60) -> Any:
    """A grid like ``jax.debug.visualize_array_sharding``: blocks sized like the array's shape."""
    from rich import box
    from rich.align import Align
    from rich.padding import Padding
    from rich.style import Style
    from rich.table import Table

    n_r, n_c = len(lay.grid), len(lay.grid[0])
    h, w = lay.extent
    labels = [[block_label(c, lay.partial) for c in row] for row in lay.grid]
    widest = max(len(s) for row in labels for s in row) + 2
    width = max(n_c * widest, min(max_width, round(max_width * min(1.0, 2.0 * w / h))))
    height = min(max(n_r, round(width * h / w / 2.5)), max(n_r, 10))
    cw, ch = max(widest, width // n_c), max(1, height // n_r)
    table = Table(show_header=False, show_lines=not color, padding=0, pad_edge=False,
                  box=None if color else box.SQUARE)
    for _ in range(n_c):
        table.add_column(width=cw, no_wrap=True)
    for r in range(n_r):
        cells = []
        for c in range(n_c):
            label, top = labels[r][c], (ch - 1) // 2
            style = Style(color="black", bgcolor=block_colour(lay.grid[r][c])) if color else Style()
            left = (cw - len(label)) // 2
            cells.append(Padding(Align(label, "left"), (top, cw - len(label) - left, ch - 1 - top, left),
                                 style=style))
        table.add_row(*cells)
    return table


def busiest_recv(matrix: np.ndarray) -> float:
    """What the device that receives most receives (the slowest device's share of a step)."""
    return float(matrix.sum(axis=1).max()) if matrix.size else 0.0


def recv_summary(mean: float, busiest: float) -> str:
    """Received bytes per device, labelled: the mean over devices and the busiest device's."""
    return f"{fmt_size(mean)} per device (mean), {fmt_size(busiest)} on the busiest device"


def plan_busiest_recv(frames: Sequence[Frame]) -> float:
    """The most any one device receives over the whole plan."""
    totals = [f.matrix.sum(axis=1) for f in frames if f.matrix is not None]
    return float(np.sum(totals, axis=0).max()) if totals else 0.0


def matrix_renderable(matrix: np.ndarray, title: str) -> Any:
    """Bytes each device (row) receives from each device (column), plus each row's total."""
    from rich.table import Table
    from rich.text import Text

    n = matrix.shape[0]
    table = Table(title=title, title_justify="left", show_edge=False, padding=(0, 1))
    table.add_column("to \\ from", justify="right", style="bold")
    for s in range(n):
        table.add_column(str(s), justify="right")
    table.add_column("total", justify="right", style="bold")
    for d in range(n):
        row = [Text(fmt_compact(v), style="bold cyan") if v else Text("·", style="dim") for v in matrix[d]]
        table.add_row(str(d), *row, fmt_compact(float(matrix[d].sum())))
    return table


def frame_title(f: Frame) -> str:
    t = f.layout.type
    if f.text is None:
        return f"source {t}"
    return f"step {f.index}: {f.text.title} to {t}"


def plan_renderables(plan: Plan, color: bool = True, dims: Dims | None = None) -> list[Any]:
    """Each step's layout and, for communicating steps, its bytes matrix (terminal)."""
    from rich.text import Text

    out: list[Any] = []
    frames = plan_frames(plan, dims)
    for f in frames:
        out.append(Text(frame_title(f), style="bold"))
        out.append(layout_renderable(f.layout, color))
        if f.matrix is not None and f.text is not None and f.text.collectives:
            n = f.matrix.shape[0]
            title = "bytes received (row: receiver, column: sender)"
            out.append(matrix_renderable(f.matrix, title) if n <= MATRIX_LABEL_LIMIT
                       else Text(f"{n} devices: the bytes matrix is drawn only in --picture"))
            assert f.measure is not None
            out.append(Text("received: " + recv_summary(f.measure.recv_bytes, busiest_recv(f.matrix))))
        out.append(Text(""))
    out.append(Text(dim_caption(frames[0].layout) + " " + legend_text(any(f.layout.partial for f in frames), picture=False),
                    style="dim"))
    return out


# -- PNG (matplotlib) ------------------------------------------------------------------------------
def pyplot() -> Any:
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise MissingExtraError(
            "pictures need matplotlib, which is not installed: pip install 'redist[viz]' "
            "(the 'bench' extra has it too)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PANEL_IN = 3.2
"""The longer side of a layout panel, in inches."""


def _aspect(lay: Layout) -> float:
    h, w = lay.extent
    return min(max(h / w, 0.25), 4.0)  # extreme shapes are squashed so blocks stay visible


def _font_points(lay: Layout, label: str) -> float:
    """The largest font (5 to 12 pt) whose label fits its block at ``PANEL_IN`` inches."""
    a = _aspect(lay)
    width, height = (PANEL_IN, PANEL_IN * a) if a <= 1 else (PANEL_IN / a, PANEL_IN)
    bw, bh = width / len(lay.grid[0]) * 72, height / len(lay.grid) * 72
    return max(5.0, min(12.0, 0.55 * bh, 0.9 * bw / (0.62 * len(label) + 0.6)))


def draw_layout(ax: Any, lay: Layout, title: str) -> None:
    from matplotlib.patches import Rectangle

    aspect = _aspect(lay)
    n_r, n_c = len(lay.grid), len(lay.grid[0])
    bh, bw = aspect / n_r, 1.0 / n_c
    size = min(_font_points(lay, block_label(c, lay.partial)) for row in lay.grid for c in row)
    for r, row in enumerate(lay.grid):
        for c, devs in enumerate(row):
            ax.add_patch(Rectangle((c * bw, r * bh), bw, bh, facecolor=block_colour(devs), edgecolor="white",
                                   linewidth=1.5, hatch="//" if lay.partial else None))
            ax.text((c + 0.5) * bw, (r + 0.5) * bh, block_label(devs, lay.partial), ha="center", va="center",
                    fontsize=size, bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0, "pad": 1}
                    if lay.partial else None)
    ax.set_xlim(0, 1)
    ax.set_ylim(aspect, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    t = lay.type
    if lay.col_dim is not None:
        ax.set_xlabel(f"dim {lay.col_dim} ({t.shape[lay.col_dim]})", fontsize=8)
    if lay.row_dim is not None:
        ax.set_ylabel(f"dim {lay.row_dim} ({t.shape[lay.row_dim]})", fontsize=8)
    ax.set_title(title, fontsize=9)


def draw_matrix(ax: Any, matrix: np.ndarray, title: str) -> None:
    n = matrix.shape[0]
    peak = float(matrix.max())
    ax.imshow(matrix, cmap="Blues", vmin=0, vmax=peak if peak > 0 else 1)
    ticks = list(range(n)) if n <= 32 else list(range(0, n, max(1, n // 8)))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=7, length=0)
    ax.set_xlabel("from device", fontsize=8)
    ax.set_ylabel("to device", fontsize=8)
    if n <= MATRIX_LABEL_LIMIT:
        for d in range(n):
            for s in range(n):
                v = matrix[d, s]
                if v:
                    ax.text(s, d, fmt_compact(v), ha="center", va="center", fontsize=6 if n > 8 else 7,
                            color="white" if v > 0.6 * peak else "black")
    if peak == 0:
        ax.text((n - 1) / 2, (n - 1) / 2, "local step:\nnothing sent", ha="center", va="center", fontsize=9)
    ax.set_title(title, fontsize=9)


def _wrap(text: str, width: int) -> str:
    """Wrapped at spaces, never between a number and its unit (a no-break space holds them)."""
    import re
    import textwrap

    return "\n".join(textwrap.wrap(re.sub(r"(\d) (B|KiB|MiB|GiB)\b", "\\1\u00a0\\2", text), width))


def save_plan_picture(plan: Plan, path: str | Path, dims: Dims | None = None) -> Path:
    """One column per layout (source, then after each step); under each step its bytes matrix."""
    plt = pyplot()
    frames = plan_frames(plan, dims)
    ncol = len(frames)
    top = PANEL_IN * min(1.0, max(_aspect(f.layout) for f in frames)) + 0.9
    fig, axes = plt.subplots(2, ncol, figsize=(3.6 * ncol + 0.4, top + 4.6), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": [top, 4.2]})
    for f, ax in zip(frames, axes[0]):
        title = "source\n" + str(f.layout.type) if f.text is None else \
            f"after step {f.index} ({f.text.title}):\n{f.layout.type}"
        draw_layout(ax, f.layout, _wrap(title, 44))
    for f, ax in zip(frames[1:], axes[1][1:]):
        assert f.matrix is not None and f.text is not None and f.measure is not None
        sub = (f"{recv_summary(f.measure.recv_bytes, busiest_recv(f.matrix))},\n"
               f"{plural(f.text.collectives, 'collective')}" if f.text.collectives else "no communication")
        draw_matrix(ax, f.matrix, f"step {f.index}: bytes received\n{sub}")
    ax0 = axes[1][0]
    ax0.axis("off")
    partial = any(f.layout.partial for f in frames)
    notes = (legend_text(partial) + " Matrices: bytes each device (row) receives from each device "
             "(column) in that step. " + dim_caption(frames[0].layout))
    ax0.text(0.0, 1.0, _wrap(notes, 40), va="top", ha="left", fontsize=8, transform=ax0.transAxes)
    head = (f"{plan.src} -> {plan.dst} on mesh {plan.src.mesh}: {plural(len(plan.steps), 'step')}, "
            f"{plural(plan.n_collectives, 'collective')}, received {recv_summary(plan.recv_bytes, plan_busiest_recv(frames))} "
            f"({_bound_summary(plan.lower_bound_bytes, plan.lower_bound_bytes_max)})")
    fig.suptitle(_wrap(head, int(45 * ncol)), fontsize=10)
    return _save(fig, plt, path)


def save_types_picture(types: Sequence[ShardingType], path: str | Path,
                       dims: Sequence[Dims | None] | None = None) -> Path:
    """Each type's layout side by side, on its ``dims`` (default ``display_dims``)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(types), figsize=(3.8 * len(types) + 0.4, 4.8), squeeze=False,
                             layout="constrained")
    for i, (t, ax) in enumerate(zip(types, axes[0])):
        lay = layout(t, None if dims is None else dims[i])
        draw_layout(ax, lay, f"{t}\n" + _wrap(describe_holders(t), 44))
    partial = any(t.unreduced for t in types)
    fig.suptitle(_wrap(f"mesh {types[0].mesh}. " + legend_text(partial), int(50 * len(types))), fontsize=9)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    p = Path(path)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def describe_holders(t: ShardingType) -> str:
    """How many devices hold each block and why: copies and/or partial sums (not 'replication 4')."""
    holders = t.replication
    parts = t.mesh.size // holders
    partials = math.prod(t.mesh.axis_size(a) for a in t.unreduced)
    copies = holders // partials
    if partials == 1:
        what = "one copy" if copies == 1 else f"{copies} identical copies"
    else:
        ax = axes_text(t.sorted_unreduced())
        what = f"a partial sum over {ax} ({partials} partials)"
        if copies > 1:
            what += f", {copies} copies of it"
    shape = "x".join(map(str, t.local_shape)) or "scalar"
    return f"{plural(parts, 'block')} of {shape}, each on {plural(holders, 'device')}: {what}"


def _bound_summary(mean: float, most: float) -> str:
    """The transfer lower bound as the figures beside it read: the mean, and the busiest device's
    where devices lack different amounts (so the busiest figure is compared with its own bound)."""
    if most == mean:
        return f"lower bound {fmt_size(mean)} per device"
    return f"lower bound {fmt_size(mean)} per device (mean), {fmt_size(most)} on the busiest device"
