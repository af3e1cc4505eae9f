"""Per-primitive sharding rules, by hypothesis: random input layouts; each op runs on local
shards with redist moving operands as the rule asks, and the result equals the global one.

Runs through the NumPy emulator (redist's simulator for the moves, vmapped ops per device), so
it checks the rules and local parameters independently of the shard_map emitter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from partir_core.decide import lower
from partir_core.emulate import emulate
from partir_core.ir import trace
from partir_core.propagate import Propagator
from partir_core.rules import LOCAL_FORMS, RULES, local_params, rule_for
from spmd_types import Mesh

pytestmark = pytest.mark.jax
MESH = Mesh({"data": 4, "model": 2})
F32 = np.float32


def _idx(n: int, hi: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.integers(0, hi, n).astype(np.int32)


# name -> (function, input shapes (or generators for int inputs), primitives it exercises)
CASES: dict[str, tuple[Callable[..., Any], list[Any], list[str]]] = {
    "dot_general": (lambda x, y: jnp.einsum("bij,bjk->bik", x, y), [(4, 8, 4), (4, 4, 8)], ["dot_general"]),
    "dot_then_sum": (lambda x, y: jnp.sum(x @ y, axis=0) * 2.0, [(8, 8), (8, 4)], ["reduce_sum", "mul"]),
    "elementwise": (lambda x, y: jnp.exp(x) * y - jnp.maximum(x, y) / (1.0 + y * y), [(8, 4), (8, 4)],
                    ["exp", "mul", "sub", "max", "div", "add"]),
    "math": (lambda x: lax.rsqrt(x * x + 1.0) + jnp.log(x ** 2 + 1.0) + lax.integer_pow(x, 3), [(8, 8)],
             ["rsqrt", "log", "integer_pow"]),
    "reduce_max": (lambda x: jnp.max(x, axis=1) + jnp.argmax(x, axis=1).astype(F32), [(8, 4)],
                   ["reduce_max", "argmax", "convert_element_type"]),
    "transpose": (lambda x: jnp.transpose(x, (2, 0, 1)) + 1.0, [(4, 8, 2)], ["transpose"]),
    "reshape_split": (lambda x: x.reshape(8, 2, 4) * 2.0, [(8, 8)], ["reshape"]),
    "reshape_merge": (lambda x: x.reshape(16, 4) * 2.0, [(4, 4, 4)], ["reshape"]),
    "broadcast": (lambda x: jnp.broadcast_to(x[:, None, :], (8, 4, 4)) * 1.5, [(8, 4)], ["broadcast_in_dim"]),
    "select": (lambda x, y: jnp.where(x > y, x, y * 2.0), [(8, 4), (8, 4)], ["select_n", "gt"]),
    "concatenate": (lambda x, y: jnp.concatenate([x, y], axis=1), [(8, 4), (8, 2)], ["concatenate"]),
    "one_hot": (lambda x, y: jnp.sum(jax.nn.one_hot(y, 8) * x, axis=1), [(8, 8), _idx(8, 8)], ["iota", "eq"]),
    "gather": (lambda t, i: t[i] * 1.0, [(16, 8), _idx(8, 16)], ["gather"]),
    "scatter_add": (lambda t, i: jax.grad(lambda t: jnp.sum(t[i] ** 2))(t), [(16, 8), _idx(8, 16)],
                    ["scatter-add"]),
    "take_along_axis": (lambda x, y: jnp.take_along_axis(x, y[:, :, None], axis=-1) * 2.0,
                        [(4, 8, 16), lambda rng: rng.integers(0, 16, (4, 8)).astype(np.int32)], ["gather"]),
    "take_along_axis_grad": (lambda x, y: jax.grad(lambda x: jnp.sum(jnp.take_along_axis(
        x, y[:, :, None], axis=-1) ** 2))(x), [(4, 8, 16), lambda rng: rng.integers(0, 16, (4, 8)).astype(np.int32)],
        ["scatter-add"]),
    "scatter_set": (lambda t, i, u: t.at[i].set(u), [(16, 8), lambda rng: rng.permutation(16)[:4].astype(np.int32),
                                                     (4, 8)], ["scatter"]),
    "top_k": (lambda x: lax.top_k(x, 3)[0] + lax.top_k(x, 3)[1].astype(F32), [(8, 16)], ["top_k"]),
    "conv": (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
             [(8, 4, 4, 4), (3, 3, 4, 8)], ["conv_general_dilated"]),
    "conv_grad": (lambda x, w: jax.grad(lambda x, w: jnp.sum(jnp.tanh(lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))), argnums=(0, 1))(x, w),
        [(8, 4, 4, 4), (3, 3, 4, 8)], ["conv_general_dilated"]),
    "argmin": (lambda x: jnp.argmin(x, axis=0) + jnp.min(x, axis=0).astype(jnp.int32), [(16, 8)],
               ["argmin", "reduce_min"]),
}


def _inputs(shapes: list[Any]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [s(rng) if callable(s) else rng.normal(size=s).astype(F32) for s in shapes]


@st.composite
def layouts(draw: Any, shapes: list[tuple[int, ...]]) -> list[tuple[int, int, str]]:
    """Random input layouts: each mesh axis shards at most one dimension of each input."""
    tactics = []
    for k, shape in enumerate(shapes):
        shards = [1] * len(shape)
        for axis in draw(st.permutations(list(MESH.names))):
            n = MESH.axis_size(axis)
            ok = [d for d in range(len(shape)) if shape[d] % (shards[d] * n) == 0]
            d = draw(st.sampled_from([None] + ok))
            if d is not None:
                shards[d] *= n
                tactics.append((k, d, axis))
    return tactics


def _check(fn: Callable[..., Any], xs: list[np.ndarray], tactics: list[tuple[int, int, str]]) -> None:
    # set every input layout at once, then propagate (tactics would propagate between them)
    program = trace(fn, *xs)
    rules = [rule_for(op) for op in program.ops]
    prop = Propagator(program, MESH, rules)
    for k, d, axis in tactics:
        v = program.inputs[k]
        lay = list(prop.layouts[v.id])
        lay[d] = lay[d] + (axis,)
        prop.layouts[v.id] = tuple(lay)
    prop.run()
    got = emulate(lower(program, MESH, rules, prop.layouts), xs)
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*xs))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_local_plus_redistribution_equals_global(name: str) -> None:
    fn, shapes, prims = CASES[name]
    xs = _inputs(shapes)
    assert all(p in RULES for p in prims)

    @settings(max_examples=40 if THOROUGH else 6)
    @given(layouts([x.shape for x in xs]))
    def run(tactics: list[tuple[int, int, str]]) -> None:
        _check(fn, xs, tactics)

    run()


SHAPE_PARAMS = ("shape", "new_sizes", "slice_sizes", "limit_indices")
"""Params that hold a global size: an op carrying one cannot run on local shards unchanged."""


def _more_primitives(x: jax.Array, i: jax.Array) -> Any:
    """Primitives with a local form that no case above traces (slice, dynamic_slice, random bits)."""
    bits = jax.random.bits(jax.random.key(0), (8, 4))
    return x[2:6] * 2.0, lax.dynamic_slice(x, (i[0], 0), (4, 4)), bits


def test_every_local_form_has_a_rule_and_every_shape_param_a_local_form() -> None:
    """The two per-primitive tables stay consistent: a local form belongs to a primitive with a
    rule, and every traced primitive whose params hold a global size has a local form (else it
    would run on its blocks with the whole array's size); every local form is exercised here."""
    assert set(LOCAL_FORMS) <= set(RULES), sorted(set(LOCAL_FORMS) - set(RULES))
    programs = [trace(fn, *_inputs(shapes)) for fn, shapes, _ in CASES.values()]
    programs.append(trace(_more_primitives, *_inputs([(8, 4), _idx(1, 4)])))
    seen = {op.name: op for p in programs for op in p.ops}
    sized = sorted(n for n, op in seen.items() if any(k in op.params for k in SHAPE_PARAMS))
    assert sized and all(n in LOCAL_FORMS for n in sized), [n for n in sized if n not in LOCAL_FORMS]
    assert set(LOCAL_FORMS) <= set(seen), sorted(set(LOCAL_FORMS) - set(seen))


def test_local_params_localise_sizes_and_drop_sharding_annotations() -> None:
    """A reshape's new sizes become the local ones and its sharding annotation is dropped
    (``shard_map`` places the blocks); an op with no local form keeps its params."""
    program = trace(lambda x: jnp.transpose(x.reshape(4, 2, 4), (2, 0, 1)), np.ones((8, 4), F32))
    reshape, transpose = program.ops
    annotated = dataclasses.replace(reshape, params={**reshape.params, "sharding": "annotated"})
    params = local_params(annotated, [(4, 4)], [(2, 2, 4)])
    assert params == {"new_sizes": (2, 2, 4), "dimensions": None, "sharding": None}
    assert "transpose" not in LOCAL_FORMS
    assert local_params(transpose, [(2, 2, 4)], [(4, 2, 2)]) == transpose.params
