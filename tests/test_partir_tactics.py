"""Tactics: clear errors for bad schedules, refinement semantics, conflicts, unknown primitives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from partir_core import (
    AxisUsedTwiceError,
    IndivisibleDimError,
    Pin,
    Shard,
    ShardParams,
    UnknownInputError,
    UnknownPrimitiveError,
    partition,
)
from partir_core.emulate import emulate
from partir_core.models import mlp
from spmd_types import Mesh, ShardingTypeError, UnknownAxisError

MESH = Mesh({"data": 4, "model": 2})
M = mlp()


def _trace(schedule: list, fn=M.step, args=M.args, **kw):  # type: ignore[no-untyped-def]
    p = partition(fn, MESH, schedule, **kw)
    return p, p.trace(*args)


def test_unknown_input_names_the_path_and_lists_inputs() -> None:
    with pytest.raises(UnknownInputError, match=r"'nope'.*params/w1"):
        _trace([Shard("nope", dim=0, axis="data")])


def test_axis_used_twice() -> None:
    with pytest.raises(AxisUsedTwiceError, match=r"batch/x already uses mesh axis 'data'"):
        _trace([Shard("x", dim=0, axis="data"), Shard("x", dim=1, axis="data")])
    with pytest.raises(AxisUsedTwiceError):
        _trace([Shard("w1", dim=0, axis=("model", "model"))])


def test_indivisible_dimension() -> None:
    x = jnp.ones((6, 4))
    with pytest.raises(IndivisibleDimError, match=r"x dimension 0 has size 6, not divisible by 4"):
        _trace([Shard("x", dim=0, axis="data")], fn=lambda x: x * 2.0, args=(x,), uneven="refuse")
    assert issubclass(IndivisibleDimError, ShardingTypeError)
    p, _ = _trace([Shard("x", dim=0, axis="data")], fn=lambda x: x * 2.0, args=(x,))  # default: pad
    assert p.analysis.lowered.in_types[0].shape == (8, 4)


def test_unknown_axis_and_bad_dim() -> None:
    with pytest.raises(UnknownAxisError):
        _trace([Shard("x", dim=0, axis="pipe")])
    with pytest.raises(ShardingTypeError, match="dimension 5 does not exist"):
        _trace([Shard("x", dim=5, axis="data")])


def test_later_tactic_refines_and_propagates() -> None:
    _, a = _trace([Shard("x", dim=0, axis="data"), Shard("params/w1", dim=1, axis="model"),
                   ShardParams(axis="data")])
    types = dict(zip(a.program.input_paths, map(str, a.lowered.in_types)))
    assert types["params/w1"] == "f32[16@data,32@model]"  # refined: model kept, data added
    assert types["params/b1"] == "f32[32@(model,data)]"  # refining a sharded dim appends minor
    assert types["opt_state/m/w1"] == types["params/w1"]  # state follows by propagation
    assert "ShardParams" in a.records[2].tactic and a.records[2].changed


def test_pin_blocks_propagation_and_later_tactics() -> None:
    _, a = _trace([Pin("params"), ShardParams(axis="data", target="opt_state")])
    types = dict(zip(a.program.input_paths, map(str, a.lowered.in_types)))
    assert types["params/w1"] == "f32[16,32]" and "@data" in types["opt_state/m/w1"]
    with pytest.raises(ShardingTypeError, match="pinned"):
        _trace([Pin("params"), Shard("params/w1", dim=0, axis="data")])


def test_conflict_is_reported_and_resolved_correctly() -> None:
    # ZeRO over data without BP: data reaches the state through two paths, on different dims
    p, a = _trace([Shard("params/w1", dim=1, axis="model"), ShardParams(axis="data")])
    assert a.conflicts
    text = p.explain()
    section = text.split("== conflicts")[1].split("== inputs")[0]
    assert "op #" in section and "data" in section
    ref = jax.tree_util.tree_leaves(jax.jit(M.step)(*M.args))
    for g, r in zip(jax.tree_util.tree_leaves(p(*M.args)), ref):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-5, atol=2e-6)


def _fft_fn(x: jax.Array) -> jax.Array:
    return jnp.real(jnp.fft.fft(x.astype(jnp.complex64))).sum(axis=1) * 2.0


def test_unknown_primitive_is_named_or_replicated() -> None:
    x = jnp.arange(32.0).reshape(8, 4)
    with pytest.raises(UnknownPrimitiveError, match="'fft'"):
        _trace([Shard("x", dim=0, axis="data")], fn=_fft_fn, args=(x,))
    _, a = _trace([Shard("x", dim=0, axis="data")], fn=_fft_fn, args=(x,), unknown="replicate")
    (got,) = emulate(a.lowered, [x])
    np.testing.assert_allclose(got, np.asarray(_fft_fn(x)), rtol=1e-5, atol=1e-5)


def test_explain_shows_tactics_types_and_collectives() -> None:
    p, _ = _trace([Shard("x", dim=0, axis="data"), Shard({"w1": 1, "w2": 0}, axis="model")])
    text = p.explain()
    assert "1. Shard(x:0 over data)" in text and "2. Shard(w1:1, w2:0 over model)" in text
    assert "params/w1: f32[16,32@model]" in text
    assert "{U:model}" in text and "collectives:" in text
