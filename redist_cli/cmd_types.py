"""``redist types``: which block of the global array every device holds, drawn like JAX draws it."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any, handlers: dict[str, Any]) -> None:
    p = sub.add_parser("types", help="show which block of the array every device holds, as a picture")
    p.add_argument("type", nargs="+", help="sharding types, e.g. 'f32[8@x,4]{U:y}'")
    p.add_argument("--mesh", required=True, help="the mesh, e.g. x=2,y=4")
    p.add_argument("--blocks", action="store_true", help="also list every device's block as a global slice")
    p.add_argument("--picture", metavar="FILE.png", default=None,
                   help="draw the layouts to a PNG (needs matplotlib: the viz extra)")
    p.add_argument("--dims", default=None, metavar="R,C",
                   help="the array dimensions to draw as rows and columns, e.g. 1,2 (one number: a single row; "
                        "default the two dimensions sharded most ways)")
    handlers["types"] = _types


def _types(args: argparse.Namespace) -> int:
    from redist.visualize import (
        check_picture_path,
        chosen_dims,
        describe_holders,
        dim_caption,
        layout,
        layout_renderable,
        legend_text,
        parse_dims,
        save_types_picture,
    )
    from redist_cli.ui import colour, console
    from spmd_types import Mesh, parse

    mesh = Mesh.parse(args.mesh)
    types = [parse(text, mesh) for text in args.type]
    if args.picture:
        check_picture_path(args.picture)
    dims = [None] * len(types) if args.dims is None else [chosen_dims(parse_dims(args.dims), t) for t in types]
    layouts = [layout(t, d) for t, d in zip(types, dims)]  # a type too large to draw fails before any output
    con = console()
    for t, lay in zip(types, layouts):
        con.print(f"[bold]{t}[/bold] on mesh {mesh}: {describe_holders(t)}, {t.local_bytes:,} B per device")
        con.print(layout_renderable(lay, colour(con)))
        if lay.collapsed:
            con.print(dim_caption(lay) + " Choose the dimensions drawn with --dims.", style="dim")
        if args.blocks:
            con.print(_blocks_table(t))
        con.print()
    con.print(legend_text(any(t.unreduced for t in types), picture=False), style="dim")
    if args.picture:
        con.print(f"wrote {save_types_picture(types, args.picture, dims)}")
    return 0


def _blocks_table(t: Any) -> Any:
    from rich.table import Table

    table = Table("device", "coordinates", "block (global slice)", show_edge=False)
    for dev in range(t.mesh.size):
        coords = ", ".join(f"{k}={v}" for k, v in t.mesh.coords(dev).items())
        block = "[" + ", ".join(f"{a}:{b}" for a, b in t.block(dev)) + "]"
        table.add_row(str(dev), coords, block + (" partial" if t.unreduced else ""))
    return table


