"""Fusion: adjacent steps of one kind as one collective over the flattened group (``merge``), per
step class in the ``FUSE`` facet table.
"""

from __future__ import annotations

from collections.abc import Callable

from redist.cost import CostModel
from redist.errors import StepError
from redist.facets import FacetTable
from redist.plan import apply_step, measure_step
from redist.steps import (
    AllGather,
    AllReduce,
    AllReduceSlice,
    AllToAll,
    Comm,
    Discard,
    DynSlice,
    Exchange,
    ExchangeAllToAll,
    MultiAllToAll,
    PadUnreduced,
    Permute,
    ReduceScatter,
    Step,
)
from spmd_types import Mesh, ShardingType
from spmd_types.memo import Scope, memo
from spmd_types.types import canonical_axes


def merge(src: ShardingType, steps: list[Step], cm: CostModel) -> tuple[Step, ...]:
    """Fuse adjacent steps of one kind into one collective over the flattened group when the result
    is the same type and the estimate is not slower. Memoised: families of candidates reach the
    same steps (on 13 axes of 2, one merge in seven repeats one of the same plan)."""
    return _merged(src, tuple(steps), cm)


@memo(Scope.TYPE)
def _merged(src: ShardingType, steps: tuple[Step, ...], cm: CostModel) -> tuple[Step, ...]:
    """A local step (``Comm.LOCAL``) is measured as one pass writing the new block
    (``redist.measure``): fused, the pass over the last block costs no more than the passes over
    both (``CostModel.copy_time`` is never negative), so local steps fuse wherever they type the
    same, without measuring; other fusions are kept where the estimate is not slower."""
    out: list[Step] = []
    types = [src]
    for s in steps:
        after = apply_step(s, types[-1])
        if out:
            prev, before = out[-1], types[-2]
            fused = fuse(prev, s, before.mesh)
            if fused is not None:
                try:
                    ok = apply_step(fused, before) == after
                except StepError:
                    ok = False
                if ok and s.comm is Comm.LOCAL:  # one local pass writes the fused block (see below)
                    out[-1] = fused
                    types[-1] = after
                    continue
                if ok:
                    mid = types[-1]
                    split = measure_step(prev, before, mid, cm).time_s + measure_step(s, mid, after, cm).time_s
                    if measure_step(fused, before, after, cm).time_s <= split * (1 + 1e-12) + 1e-18:
                        out[-1] = fused
                        types[-1] = after
                        continue
        out.append(s)
        types.append(after)
    return tuple(out)


Fuse = Callable[[Step, Step, Mesh], "Step | None"]


FUSE: FacetTable[Fuse] = FacetTable("fuse", "redist.synth.FUSE")
"""Two adjacent steps of one class as one step over the flattened group, or ``None``."""


def fuse(a: Step, b: Step, mesh: Mesh) -> Step | None:
    if a.kind != b.kind:  # one kind per step class
        return None
    return FUSE[type(a)](a, b, mesh)


def _same_dim_fusion(order: str) -> Fuse:
    """Fuse steps on the same dimension(s); ``order`` says whose axes come first in the group."""

    def fuse(a: Step, b: Step, mesh: Mesh) -> Step | None:
        fields = {k: v for k, v in vars(a).items() if k != "axes"}
        if fields != {k: v for k, v in vars(b).items() if k != "axes"}:
            return None
        first, second = (a, b) if order == "ab" else (b, a)
        return type(a)(**fields, axes=canonical_axes(mesh, first.axes + second.axes))  # type: ignore[call-arg,attr-defined]

    return fuse


# Slices and reductions append to the minor end (a's axes stay major); gathers, moves and pads
# remove from the minor end, so the step applied second removed the more-major axes.
FUSE.register(DynSlice, ReduceScatter, AllReduceSlice, AllReduce, Discard)(_same_dim_fusion("ab"))
FUSE.register(AllGather, PadUnreduced)(_same_dim_fusion("ba"))


_same_dims_all_to_all = _same_dim_fusion("ba")


@FUSE.register(AllToAll)
def _all_to_all_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    """On the same dimensions, one move over both groups; on other dimensions, both moves as one
    all-to-all over the union group (``merge`` keeps it only where it types the same)."""
    return _same_dims_all_to_all(a, b, mesh) or MultiAllToAll((a, b))  # type: ignore[arg-type]


@FUSE.register(MultiAllToAll)
def _multi_all_to_all_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    return MultiAllToAll(a.moves + b.moves)  # type: ignore[attr-defined]


@FUSE.register(Permute, Exchange, ExchangeAllToAll)
def _no_fusion(a: Step, b: Step, mesh: Mesh) -> Step | None:
    """Two point-to-point schedules are not one schedule."""
    return None

