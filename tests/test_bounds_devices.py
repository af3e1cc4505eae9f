"""The pending-sum bound on sub-axes outside the mesh's prime atoms (``redist.bounds_devices``):
against the closed form where both apply, against the proofs' independent count everywhere, and
plans that meet it and verify."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from strategies import pending_pairs

import proofs  # noqa: F401  (registers plan.verify)
from proofs.measures import lower_bound_cells
from redist.bounds import lower_bound_bytes, on_prime_atoms
from redist.bounds_devices import device_bound_bytes
from redist.synth import synthesize
from spmd_types import Mesh, parse

X6 = Mesh({"x": 6})


@pytest.mark.parametrize("src,dst,bound", [
    ("f32[6@(x:(1)2)]{U:(x:(2)3)}", "f32[6@(x:(3)2)]", 16.0),  # the closed form said 24 B, above a 17.3 B plan
    ("f32[6@(x:(2)3)]{U:(x:(1)2)}", "f32[6@(x:(1)3)]", 28 / 3),  # the closed form divided by zero
    ("f32[6@(x:(1)2)]", "f32[6@(x:(1)3)]{U:(x:(3)2)}", 0.0),
    ("f32[12@(x:(1)3)]{U:(x:(3)2)}", "f32[12@x]", 8.0),
])
def test_a_crossed_factorisation_plans_at_its_bound_and_verifies(src, dst, bound):
    a, b = parse(src, X6), parse(dst, X6)
    assert not (on_prime_atoms(a) and on_prime_atoms(b))
    assert lower_bound_bytes(a, b) == pytest.approx(bound)
    plan = synthesize(a, b)
    assert plan.recv_bytes == pytest.approx(bound)
    assert plan.verify().ok


@given(pending_pairs(max_devices=48))
def test_the_device_count_equals_the_closed_form_and_the_proofs_count(pair):
    a, b = pair
    assume(a.unreduced or b.unreduced)
    got = device_bound_bytes(a, b)
    assert got == pytest.approx(float(lower_bound_cells(a, b, a.shape)) * a.itemsize)
    assert got == pytest.approx(lower_bound_bytes(a, b))


def test_a_size_one_axis_does_not_unconfine_the_partials():
    """``{x=1,y=2,z=2,w=1}``: the closed form counted ``x`` and ``w`` as axes a partial's copies
    could differ along (3 B, below the proofs' 4 B, so ``verify()`` failed); as on ``{y=2,z=2}``."""
    for mesh in (Mesh({"x": 1, "y": 2, "z": 2, "w": 1}), Mesh({"y": 2, "z": 2})):
        a, b = parse("f32[1]{U:(y,z)}", mesh), parse("f32[1]{U:z}", mesh)
        assert lower_bound_bytes(a, b) == device_bound_bytes(a, b) == 4.0
        assert synthesize(a, b).verify().ok


def test_off_atom_plans_above_the_bound_are_recorded_not_refused():
    """``f32[6]{U:t0} -> f32[6@(t0:(1)3)]{U:(t0:(3)2)}``: a reduce-scatter over ``t0:(1)3`` would
    meet the bound, but ``t0`` is pending whole in the source and the planner's steps name pieces
    of it by prime atoms (2, 3). The certificate records the gap (``exceeds``) and says why,
    instead of failing ``verify()``; ``strict_recv`` still refuses."""
    from proofs.errors import VerificationError
    from proofs.link import Status

    mesh = Mesh({"t0": 6})
    plan = synthesize(parse("f32[6]{U:t0}", mesh), parse("f32[6@(t0:(1)3)]{U:(t0:(3)2)}", mesh))
    assert plan.lower_bound_bytes == 16.0 < plan.recv_bytes
    recv = {p.name: p for p in plan.verify().properties}["recv"]
    assert recv.status is Status.EXCEEDS and "prime atoms" in recv.note
    with pytest.raises(VerificationError):
        plan.verify(strict_recv=True)


@pytest.mark.parametrize("mesh,src,dst", [
    ({"b": 6}, "s32[6@(b:(3)2),1,1]{U:(b:(1)3)}", "s32[6,1,1]{U:b}"),  # one pad (was 2.7 B)
    ({"x": 6}, "s32[1,1]{U:(x:(3)2)}", "s32[1,1]{U:x}"),  # one discard (was 0.7 B)
])
def test_one_spelled_local_step_reaches_an_off_atom_destination(mesh, src, dst):
    m = Mesh(mesh)
    plan = synthesize(parse(src, m), parse(dst, m))
    assert plan.recv_bytes == plan.lower_bound_bytes == 0.0 and len(plan.steps) == 1
    assert plan.verify().ok


def test_a_relabelled_mirror_skips_off_atom_destinations():
    """Was a bare ``KeyError`` from ``_permute_last_candidates`` (``z:(3)2`` has no relabelling)."""
    mesh = Mesh({"_p": 1, "b": 1, "U": 4, "z": 6})
    a = parse("s32[1@(_p,b),4@(U:(2)2,U:(1)2),2]", mesh)
    b = parse("s32[1@_p,4@U,2@(z:(3)2)]", mesh)
    assert synthesize(a, b).recv_bytes >= lower_bound_bytes(a, b)
