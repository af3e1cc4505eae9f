"""Shared hypothesis strategies: random meshes and random *valid* sharding types.

Import these from any test module::

    from strategies import meshes, sharding_types, mesh_and_type, type_pairs

    @given(st.data())
    def test_something(data):
        mesh = data.draw(meshes(max_devices=8))
        t = data.draw(sharding_types(mesh, unreduced=False))

Every type drawn here is valid by construction (each mesh axis, or each factor of a split axis, is
used at most once; every dimension is divisible by its axes' product), so a test can rely on
``ShardingType`` not raising. Shapes stay small (each dimension is its axes' product times a factor
of at most ``max_factor``) so dense NumPy checks over the global index space stay cheap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import strategies as st

from spmd_types import DTYPES, Mesh, ShardingType, SubAxis
from spmd_types.mesh import Axis

AXIS_NAMES: tuple[str, ...] = ("x", "y", "z", "w", "a", "b", "data", "model", "U", "_p", "t0")
"""Names meshes draw from: short and long ones, one that reads like the ``U`` marker of ``{U:..}``,
one starting with an underscore and one with a digit."""

ALL_DTYPES: tuple[str, ...] = tuple(sorted(DTYPES))


# -- meshes ---------------------------------------------------------------------------------------
@st.composite
def meshes(
    draw: st.DrawFn,
    min_axes: int = 1,
    max_axes: int = 4,
    min_size: int = 1,
    max_size: int = 6,
    max_devices: int | None = None,
    names: Sequence[str] = AXIS_NAMES,
) -> Mesh:
    """A random ``Mesh`` of ``min_axes..max_axes`` axes with sizes ``min_size..max_size``.

    ``max_devices`` caps the product of the sizes (e.g. 8 for meshes that must become a JAX mesh on
    the 8 simulated CPU devices); sizes are drawn one by one within the remaining budget, so no
    example is rejected.
    """
    n_axes = draw(st.integers(min_axes, max_axes))
    axis_names = draw(st.lists(st.sampled_from(list(names)), min_size=n_axes, max_size=n_axes, unique=True))
    budget = max_devices
    sizes: list[int] = []
    for _ in axis_names:
        hi = max_size if budget is None else max(min_size, min(max_size, budget))
        s = draw(st.integers(min_size, hi))
        if budget is not None:
            budget = max(1, budget // s)
        sizes.append(s)
    mesh = Mesh(list(zip(axis_names, sizes)))
    if max_devices is not None and mesh.size > max_devices:  # only when min_size forces it
        from hypothesis import assume

        assume(False)
    return mesh


def jax_meshes(max_devices: int = 8, **kw: int) -> st.SearchStrategy[Mesh]:
    """Meshes small enough to become a ``jax.sharding.Mesh`` on the simulated CPU devices."""
    return meshes(max_devices=max_devices, **kw)  # type: ignore[arg-type]


# -- factors of an axis ---------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


@st.composite
def factor_chains(draw: st.DrawFn, n: int) -> list[tuple[int, int]]:
    """An ordered factorisation of an axis of size ``n`` into ``(pre, size)`` pieces, major first,
    every piece > 1 (``[(1, n)]`` when ``n`` is prime or 1)."""
    pieces: list[tuple[int, int]] = []
    pre, rest = 1, n
    while rest > 1:
        size = draw(st.sampled_from(_divisors(rest)))
        pieces.append((pre, size))
        pre, rest = pre * size, rest // size
    return pieces or [(1, n)]


def _ref(mesh: Mesh, name: str, pre: int, size: int) -> Axis:
    return name if (pre, size) == (1, mesh.axis_size(name)) else SubAxis(name, pre, size)


@st.composite
def axis_pieces(draw: st.DrawFn, mesh: Mesh, subaxes: bool = False) -> list[Axis]:
    """Every mesh axis as one piece, or (``subaxes=True``) possibly split into sub-axes."""
    out: list[Axis] = []
    for name, n in mesh.axes:
        if subaxes and n > 1 and draw(st.booleans()):
            out.extend(_ref(mesh, name, p, s) for p, s in draw(factor_chains(n)))
        else:
            out.append(name)
    return out


# -- sharding types --------------------------------------------------------------------------------
@st.composite
def sharding_types(
    draw: st.DrawFn,
    mesh: Mesh,
    *,
    min_rank: int = 0,
    max_rank: int = 4,
    rank: int | None = None,
    shape: Sequence[int] | None = None,
    dtype: str | None = None,
    dtypes: Sequence[str] = ALL_DTYPES,
    unreduced: bool = True,
    subaxes: bool = False,
    max_factor: int = 3,
    reduced: bool = False,
) -> ShardingType:
    """A random valid ``ShardingType`` on ``mesh``.

    Each mesh axis (or, with ``subaxes=True``, each piece of a random factorisation of it) is left
    replicated, appended to a random dimension, or (with ``unreduced=True``) made unreduced or (with
    ``reduced=True``) reduced; pieces
    are placed in random order, so dimensions get random major-to-minor orders. Without ``shape``
    each dimension's size is its axes' product times a random factor in ``1..max_factor``; with
    ``shape`` (e.g. to draw a second type of the same array) a piece only goes to a dimension that
    stays divisible. ``dtype`` fixes the dtype, else it is drawn from ``dtypes``.
    """
    if shape is not None:
        shape = tuple(shape)
        r = len(shape)
    elif rank is not None:
        r = rank
    else:
        r = draw(st.integers(min_rank, max_rank))
    pieces = draw(axis_pieces(mesh, subaxes=subaxes))
    order = draw(st.permutations(range(len(pieces)))) if pieces else []
    dims: list[list[Axis]] = [[] for _ in range(r)]
    unred: list[Axis] = []
    red: list[Axis] = []
    # targets: -1 replicated, -2 unreduced, -3 reduced, d >= 0 a dimension
    for i in order:
        a = pieces[i]
        size = mesh.axis_size(a)
        targets = [-1] + ([-2] if unreduced else []) + ([-3] if reduced else [])
        for d in range(r):
            if shape is None or shape[d] % (math.prod(mesh.axis_size(b) for b in dims[d]) * size) == 0:
                targets.append(d)
        target = draw(st.sampled_from(targets))
        if target == -2:
            unred.append(a)
        elif target == -3:
            red.append(a)
        elif target >= 0:
            dims[target].append(a)
    if shape is None:
        shape = tuple(
            math.prod(mesh.axis_size(a) for a in axes) * draw(st.integers(1, max_factor)) for axes in dims
        )
    dt = dtype if dtype is not None else draw(st.sampled_from(list(dtypes)))
    return ShardingType(shape, dt, [tuple(d) for d in dims], mesh, unred, red)


@st.composite
def mesh_and_type(
    draw: st.DrawFn, max_devices: int | None = None, **type_kw: object
) -> tuple[Mesh, ShardingType]:
    """A random mesh (``max_devices`` caps its size) and a random valid type on it."""
    mesh = draw(meshes(max_devices=max_devices))
    return mesh, draw(sharding_types(mesh, **type_kw))  # type: ignore[arg-type]


@st.composite
def shapes_for(draw: st.DrawFn, mesh: Mesh, rank: int, max_factor: int = 2) -> tuple[int, ...]:
    """A shape whose dimensions are divisible by random products of mesh axis sizes, so that many
    shardings of it are valid (for drawing several types of the same array)."""
    out = []
    for _ in range(rank):
        n = draw(st.integers(1, max_factor))
        for _, s in mesh.axes:
            if draw(st.booleans()):
                n *= s
        out.append(n)
    return tuple(out)


@st.composite
def type_pairs(
    draw: st.DrawFn,
    mesh: Mesh,
    *,
    min_rank: int = 1,
    max_rank: int = 3,
    dtypes: Sequence[str] = ALL_DTYPES,
    unreduced: bool = False,
    subaxes: bool = False,
) -> tuple[ShardingType, ShardingType]:
    """Two valid types of the same global shape and dtype on ``mesh`` (a redistribution problem).
    ``unreduced`` applies to the source only (a destination with pending sums is rarely wanted);
    pending sums are drawn only for dtypes that can be summed (not ``pred``)."""
    r = draw(st.integers(min_rank, max_rank))
    shape = draw(shapes_for(mesh, r))
    summable = [d for d in dtypes if d != "pred"] if unreduced else list(dtypes)
    dt = draw(st.sampled_from(summable or list(dtypes)))
    src = draw(sharding_types(mesh, shape=shape, dtype=dt, unreduced=unreduced, subaxes=subaxes))
    dst = draw(sharding_types(mesh, shape=shape, dtype=dt, unreduced=False, subaxes=subaxes))
    return src, dst


@st.composite
def pending_pairs(draw: st.DrawFn, max_devices: int, dtypes: Sequence[str] = ("f32",)) -> tuple[ShardingType, ShardingType]:
    """A source and a destination, both possibly with pending sums, sub-axes included (also those
    off the mesh's prime factors, ``x:(1)3`` on ``x=6``), on a random mesh: the bounds' inputs."""
    mesh = draw(meshes(max_devices=max_devices))
    a, _ = draw(type_pairs(mesh, unreduced=True, subaxes=True, dtypes=dtypes))
    b = draw(sharding_types(mesh, shape=a.shape, dtype=a.dtype, unreduced=True, subaxes=True))
    return a, b


__all__ = [
    "ALL_DTYPES", "AXIS_NAMES", "axis_pieces", "factor_chains", "jax_meshes", "mesh_and_type",
    "meshes", "pending_pairs", "shapes_for", "sharding_types", "type_pairs",
]
