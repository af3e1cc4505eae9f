"""Point-to-point proofs on NumPy atom rows (tracker issue 12): the atom codes a device holds agree
with the generic state's z3 meaning, and a verify on an 8-axis mesh solves a bounded,
mesh-independent number of z3 cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import z3

from proofs.link import prove_link
from proofs.model import Space, cells
from proofs.p2p import AtomTable
from proofs.steps_semantics import device_coords
from redist import CostModel, redistribute
from spmd_types import Mesh, parse

M8 = Mesh({f"a{i}": 2 for i in range(8)})


@pytest.mark.parametrize("text", ["s32[8@x,6]", "s32[6@y,4]{U:x}", "s32[8,8@x]{U:(y,z)}", "s32[8@(z,x),6]{U:y}",
                                  "s32[8@x:(1)2,6]{U:x:(2)2}"])
@pytest.mark.parametrize("agree", [False, True])
def test_atom_codes_mean_the_generic_state(text: str, agree: bool) -> None:
    """``proofs.p2p.AtomTable`` (the generic state as integer codes, NumPy over all devices) and
    ``Arr.val`` (the z3 terms) are one value on every device and local cell."""
    mesh = Mesh({"x": 4, "y": 3, "z": 2})
    t = parse(text, mesh)
    sp = Space(mesh, cells([t]), "T")
    arr = sp.generic(t, agree)
    table = AtomTable.of(sp, t, sp.n_partials - 1 if t.unreduced else None, agree)
    o = sp.index_vars("o")
    qs = list(itertools.product(*[range(e) for e in arr.ext]))
    dev = np.repeat(np.arange(mesh.size), len(qs))
    q = np.tile(np.array(qs, dtype=np.int64).reshape(len(qs), sp.rank), (mesh.size, 1))
    piece, atom, coef = table.read(dev, q)
    diffs = []
    for i in range(len(dev)):
        mine = piece == i
        at = tuple((int(q[i, d]) + o[d][0], o[d][1]) for d in range(sp.rank))
        lhs = arr.val(device_coords(sp, int(dev[i])), at)
        diffs.append(lhs != sp.realize(table.lin(atom[mine], coef[mine]), o))
    s = z3.Solver()
    s.add(z3.Or(diffs))
    assert s.check() == z3.unsat


def _cases(src: str, dst: str) -> list[int]:
    plan = redistribute(parse(src, M8), parse(dst, M8), cost_model=CostModel(objective="bytes"))  # one exchange or permute
    prove_link.cache_clear()
    types = plan.all_types
    outs = [prove_link(s, types[i], types[i + 1]) for i, s in enumerate(plan.steps)]
    assert all(o.status == "proved" for o in outs)
    return [o.cases for o in outs]


def test_eight_axis_permute_is_one_case() -> None:
    """65,536 destination cells (256 devices x 256 cells), one shape: one z3 case."""
    rev = ",".join(f"a{i}" for i in reversed(range(8)))
    fwd = ",".join(f"a{i}" for i in range(8))
    assert _cases(f"f32[1024@({fwd}),256]", f"f32[1024,256@({rev})]") == [1]


def test_eight_axis_pending_sum_is_bounded() -> None:
    """Every link, point-to-point or not, is one z3 case (the plans' step counts are the
    synthesizer's business; each link's count is the proof's)."""
    for src, dst in [("f32[4096@a0]{U:a1}", "f32[4096@a1]"),
                     ("f32[512@(a0,a2,a6),512@(a1,a3),512]{U:(a4,a5)}", "f32[512,512@(a1,a3,a6),512@(a4,a5,a0,a2)]")]:
        got = _cases(src, dst)
        assert got and all(c == 1 for c in got), got
