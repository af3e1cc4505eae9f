"""Expert parallelism: which values make up the expert computation, and their layout by expert.

A mixture of experts computes, per expert, ``xe[b, e, c, :] @ w[e]``: the expert dimension ``e``
is a batch dimension of every matmul with the expert weights, of the elementwise ops between them
and of their transposes in the backward pass. The **expert region** is the set of (value,
dimension) pairs reached from the weights' expert dimension through ops in which that dimension
is one ``pass`` factor carried by every non-scalar tensor of the op. It stops at the dispatch
(``bsec,bsd->becd``: the tokens ``h`` have no expert dimension) and at the combine (where the
expert dimension is summed away), so it holds exactly the dispatched tokens, the expert
activations and their cotangents, the weights, their gradients and optimizer state.

Laying the region out by expert (the axis moved off whatever dimension an earlier tactic put it
on, the batch under BP) is GShard/Switch expert parallelism: each device keeps its experts'
weights in place; the lowering moves the dispatched tokens from batch- to expert-sharded by an
all-to-all before the expert matmuls and back by another before the combine (and likewise in the
backward pass), since the values on either side of the region keep their batch layout. See
design.md 10 (expert parallelism).
"""

from __future__ import annotations

from collections.abc import Iterable

from partir_core.ir import Op, Value
from partir_core.propagate import Layout, Propagator, clashes
from partir_core.rules import PASS, Rule
from spmd_types import Axis, Mesh


def _tensors(op: Op, rule: Rule) -> list[tuple[Value, tuple[tuple[int, ...], ...]]]:
    ins = [(a, d) for a, d in zip(op.inputs, rule.operands) if isinstance(a, Value)]
    return ins + list(zip(op.outputs, rule.results))


def _dim_of(dims: tuple[tuple[int, ...], ...], factor: int) -> int | None:
    """The dimension that is exactly ``factor`` (not merged with others by a reshape), if any."""
    return next((d for d, fs in enumerate(dims) if fs == (factor,)), None)


def expert_region(prop: Propagator, seeds: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Value id -> its expert dimension, for every value of the expert region grown from
    ``seeds`` (value id, expert dimension) through the propagator's sites (ties included, so
    the region enters loop bodies from stacked weights and leaves by their stacked results)."""
    by_value: dict[int, list[tuple[Op, Rule]]] = {}
    for op, rule in prop.sites:
        for v, _ in _tensors(op, rule):
            by_value.setdefault(v.id, []).append((op, rule))
    region: dict[int, int] = {}
    todo = list(seeds)
    while todo:
        vid, dim = todo.pop()
        if vid in region:
            continue
        region[vid] = dim
        for op, rule in by_value.get(vid, []):
            tensors = _tensors(op, rule)
            mine = next(d for v, d in tensors if v.id == vid)
            if dim >= len(mine) or len(mine[dim]) != 1:
                continue
            f = mine[dim][0]
            if rule.factors[f].kind != PASS:
                continue
            dims = [(v, _dim_of(d, f)) for v, d in tensors]
            if any(k is None and len(v.shape) > 0 for v, k in dims):
                continue  # a tensor without the expert dimension: the dispatch or the combine
            todo += [(v.id, k) for v, k in dims if k is not None and v.id not in region]
    return region


def by_expert(mesh: Mesh, layout: Layout, dim: int, axes: tuple[Axis, ...]) -> Layout:
    """``layout`` with ``axes`` taken off every other dimension and added to ``dim``."""
    out = [tuple(a for a in ax if not clashes(mesh, [a], axes)) for ax in layout]
    out[dim] = out[dim] + tuple(a for a in axes if a not in out[dim])
    return tuple(out)
