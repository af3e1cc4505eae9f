"""Each exchange pass alone on three moves small enough to route by hand, on ``{x=2, y=2}``
(device ``2x + y``): the cell grid (``cells``), the routed items (``routes``), the packed rounds
(``runnable``), the floors (``floors``) and the figures planning reads (``figures``).

- ``s32[8@(x,y)] -> s32[8@(y,x)]``: devices 0 and 3 keep their block; 1 and 2 swap theirs.
- ``s32[12@x,8] -> s32[12,8@x]``: cells of 6 x 4; each device holds one of its two new cells and
  receives the other from the device of the other x and the same y.
- ``s32[12@x]{U:y} -> s32[12@y]``: one cell of 6 per block; cell c is needed by devices c and
  2 + c and its partials lie on 2c and 2c + 1: a root that needs it and holds a partial (0 for
  cell 0, 3 for cell 1) receives the other partial, then forwards the sum.
"""

from __future__ import annotations

import pytest

from redist.exchange import cells, figures, floors, routes, runnable
from spmd_types import Mesh, parse

XY = Mesh({"x": 2, "y": 2})

# src, dst, cell, (local, merge, forward) items, rounds of (src, dst) pairs
CASES = [
    ("s32[8@(x,y)]", "s32[8@(y,x)]", (2,), (2, 2, 0), [((2, 1), (1, 2))]),
    ("s32[12@x,8]", "s32[12,8@x]", (6, 4), (4, 4, 0), [((0, 2), (1, 3), (2, 0), (3, 1))]),
    ("s32[12@x]{U:y}", "s32[12@y]", (6,), (2, 2, 2), [((1, 0), (2, 3)), ((0, 2), (3, 1))]),
]


@pytest.mark.parametrize(("src", "dst", "cell", "items", "rounds"), CASES)
def test_each_exchange_pass_on_a_move_routed_by_hand(src: str, dst: str, cell: tuple[int, ...],
                                                    items: tuple[int, int, int], rounds: list[tuple]) -> None:
    s, d = parse(src, XY), parse(dst, XY)
    assert cells.cell_grid(s, d).cell == cell
    _, n_dev, routed = routes.route(s, d)
    assert n_dev == XY.size
    assert (len(routed.local.src), len(routed.merge.src), len(routed.forward.src)) == items
    sch = runnable.schedule(s, d)
    assert [r.pairs for r in sch.rounds] == rounds
    received = items[1] + items[2]
    assert sch.n_transfers == received
    assert figures.routing(s, d) == figures.Routing(cell, received, len(rounds))
    assert floors.provider_cells(s, d) <= len(rounds) and floors.reduced_cells(s, d) <= received
