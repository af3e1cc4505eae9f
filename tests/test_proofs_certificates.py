"""Plan certificates: examples, Plan.verify / CLI, and the synthesizer's exhaustive pairs (sampled by
default, all 18,580 under HYPOTHESIS_PROFILE=thorough)."""

from __future__ import annotations

import random

import pytest
from conftest import THOROUGH

import proofs
from benchmarks.proofs_bench import MESHES, RANKS, exhaustive_pairs
from proofs import Certificate, verify_plan
from redist import CostModel, redistribute
from spmd_types import Mesh

M24 = Mesh({"x": 2, "y": 4})


@pytest.mark.parametrize("src,dst", [
    ("f32[512@(x,y),128]", "f32[512,128@(y,x)]"),
    ("f32[2048@x,2048@y]", "f32[2048@y,2048@x]"),
    ("f32[4096@y]", "f32[4096@x]"),
    ("f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]"),
    ("bf16[64,32]{U:(x,y)}", "bf16[64@y,32@x]"),
    ("f32[16@x,8]", "f32[16,8]{U:y}"),
])
def test_examples_certified(src: str, dst: str) -> None:
    plan = redistribute(src, dst, M24, cost_model=CostModel(objective="bytes"))  # the recv guarantee
    cert = plan.verify()
    assert isinstance(cert, Certificate) and cert.ok and cert.recv_at_bound is True
    assert {p.name for p in cert.properties} == {"chain", "memory", "recv"} and not cert.unchecked
    assert len(cert.links) >= len(plan.steps) and cert.solver_seconds > 0
    text = str(cert)
    assert text.endswith("proved: chain, memory, recv") and "m0" in cert.lower_bound_bytes


def test_empty_plan_is_certified() -> None:
    plan = redistribute("f32[8@x]", "f32[8@x]", M24)
    assert plan.steps == () and verify_plan(plan).ok


def test_cli_verify_and_budget(capsys: pytest.CaptureFixture[str]) -> None:
    from redist_cli import main

    assert main(["verify", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "x=2,y=4"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("proved: chain, memory; not checked: recv")
    assert main(["verify", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "x=2,y=4", "--objective", "bytes"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("proved: chain, memory, recv")
    assert main(["budget", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "x=2,y=4", "--bytes", "100"]) == 1
    assert "counterexample" in capsys.readouterr().out
    assert main(["budget", "f32[64@x,64@y]", "f32[64@y,64@x]", "--mesh", "x=2,y=4", "--bytes", "1e6"]) == 0


def _pairs() -> list:  # type: ignore[type-arg]
    pairs = list(exhaustive_pairs(MESHES, RANKS))
    if THOROUGH:
        return pairs
    return random.Random(4).sample(pairs, 150)


def test_exhaustive_pairs_certified() -> None:
    """Every plan of the small-mesh sweep is certified for all shapes its types allow."""
    n = 0
    for a, b in _pairs():
        cert = verify_plan(redistribute(a, b, cost_model=CostModel(objective="bytes")))
        assert cert.ok, f"{a} -> {b}: {cert}"
        n += 1
    assert n > 0


def test_registered_with_redist() -> None:
    import redist.plan

    assert redist.plan._HOOKS["verify"] is proofs.plan_verify  # verify_plan behind a check of its keywords


def test_default_objective_certifies_chain_and_memory_not_transfer() -> None:
    """The default (measured) objective's guarantees are correctness and the memory bound; the transfer
    bound is claimed, and proved, only for ``objective="bytes"`` plans."""
    plan = redistribute("f32[2048@x,1024]{U:y}", "f32[2048@(x,y),1024]", M24)
    cert = plan.verify()
    assert cert.ok and {p.name for p in cert.properties} == {"chain", "memory"} and cert.recv_at_bound is None
