"""Choosing among the planner's best plans by timing them on the running backend (autotuning).

Why: the measured cost model is a fit, off a single step by more than the gap between plans it
ranks close, so its ranking there can cost on the clock (docs/design.md 6.5 and 13.3). XLA
autotunes its own kernels the same way. ``autotune`` takes the ``top`` plans the search kept
(``synth.ranked``: the model's choice first, all within the memory bound), compiles each with the
executor, times them interleaved as ``redist calibrate`` times its samples, and returns the
fastest with every trial, where it beat the model's choice by more than ``margin`` (timing noise
is not a reason to switch). Under ``jax.distributed`` every process times the same calls, the
processes exchange their medians (``redist.coordination.gather``), and each takes, per plan, the
slowest process's (a collective lasts until its last process is done): every process makes the
same choice from the same table, so all run the same program. Each candidate is warmed up first
(``WARMUP``: over Gloo a collective's first calls set up its connections). Results are cached per
(types, cost model, ``top``, ``reps``, ``margin``) for the life of the process;
``clear_caches("plans")`` forgets them. With a cache file (``cache=``, or
``REDIST_AUTOTUNE_CACHE``; ``redist.tune_cache``) the winner is also kept on disk, and every later
``redistribute`` or ``reshard`` of the move, in any process, plans it untimed."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, NamedTuple

from redist.api import checked_pair
from redist.calibrate import samples
from redist.coordination import gather
from redist.cost import CostModel
from redist.errors import RedistError
from redist.plan import Plan
from redist.profile import default_cost_model
from redist.reduced import with_endpoints
from redist.synth import ranked
from redist.tune_cache import active_path, lookup, store
from spmd_types import ShardingType
from spmd_types.memo import Scope, memo


class Trial(NamedTuple):
    """One candidate: its plan, the model's estimate and the median seconds it measured (across
    processes the slowest process's median)."""

    plan: Plan
    predicted_s: float
    measured_s: float


class Tuned(NamedTuple):
    """The fastest plan measured, and every trial in the model's order (its choice first).

    Examples:
        >>> import redist
        >>> tuned = redist.autotune("f32[64@x]", "f32[64]", "x=2", top=1)  # top=1: nothing timed
        >>> tuned.plan is tuned.model_choice.plan, tuned.speedup, len(tuned.trials)
        (True, 1.0, 1)
    """

    plan: Plan
    trials: tuple[Trial, ...]

    @property
    def model_choice(self) -> Trial:
        return self.trials[0]

    @property
    def speedup(self) -> float:
        """The model's choice's measured time over the tuned plan's (1.0 where they agree, or
        where nothing was timed)."""
        tuned = next(t for t in self.trials if t.plan is self.plan)
        if tuned is self.model_choice or not tuned.measured_s > 0:
            return 1.0
        return self.model_choice.measured_s / tuned.measured_s


DEFAULT_TOP = 4
DEFAULT_REPS = 25
WARMUP = 3
"""Untimed calls of each candidate first: over Gloo a collective's first calls also set up its
group's connections."""
DEFAULT_MARGIN = 0.1
"""How much faster than the model's choice another plan must measure to replace it: without a
margin, timing noise on a shared machine changed plans as often for the worse as for the better
(docs/design.md 6.5)."""


def autotune(src: ShardingType | str, dst: ShardingType | str, mesh: Any = None, *,
             cost_model: CostModel | None = None, top: int = DEFAULT_TOP, reps: int = DEFAULT_REPS,
             margin: float = DEFAULT_MARGIN, cache: str | os.PathLike[str] | None = None) -> Tuned:
    """Time the ``top`` best plans for ``src -> dst`` (``redistribute``'s arguments) on the
    running backend's devices, ``reps`` calls each, and return the fastest if it measured more
    than ``margin`` faster than the model's choice, else the model's choice. ``top=1`` times
    nothing. Every candidate is correct and within ``max(src, dst)`` local bytes; under the bytes
    objective every candidate also receives the least bytes.

    ``cache``: a cache file (default: ``REDIST_AUTOTUNE_CACHE`` where set). An entry for this move
    tuned with the same ``top``, ``reps`` and ``margin`` is returned untimed (its stored times as
    the trials'); otherwise the move is timed and its winner recorded there, for ``redistribute``
    and ``reshard`` to use from then on (``redist.tune_cache``).

    Examples:
        >>> import redist
        >>> tuned = redist.autotune("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4", top=2, reps=2)
        >>> len(tuned.trials), tuned.plan in [t.plan for t in tuned.trials]
        (2, True)
        >>> tuned.model_choice.plan == redist.redistribute("f32[64@x,64@y]", "f32[64@y,64@x]", "x=2,y=4")
        True
        >>> redist.autotune("f32[64@x]", "f32[64]", "x=2", top=0)
        Traceback (most recent call last):
        redist.errors.RedistError: autotune: top=0 is out of range; it is how many plans to time, at least 1

    Raises:
        RedistError: ``top`` or ``reps`` below 1, or ``margin`` out of range (the message names it).
        ShardingTypeError: type text that does not parse or fit the mesh (the subclass names it).
        IncompatibleTypesError: ``src`` and ``dst`` of other shapes or dtypes.
        CostModelError: a ``cost_model`` that is not a ``CostModel``.
    """
    _check_arguments(top, reps, margin)
    s, d = checked_pair(src, dst, mesh)
    cm = cost_model or default_cost_model(s.mesh)
    path = active_path(cache)
    if path is None:
        return _tuned(s, d, cm, top, reps, margin)
    hit = lookup(path, s, d, cm)
    if hit is not None and (hit.entry.top, hit.entry.reps, hit.entry.margin) == (top, reps, margin):
        times = hit.entry.measured_s + (float("nan"),) * (len(hit.plans) - len(hit.entry.measured_s))
        return Tuned(hit.plans[hit.entry.winner], tuple(Trial(p, p.time_s, t) for p, t in zip(hit.plans, times)))
    tuned = _tuned(s, d, cm, top, reps, margin)
    plans = tuple(t.plan for t in tuned.trials)
    store(path, s, d, cm, plans, next(i for i, p in enumerate(plans) if p is tuned.plan), tuple(t.measured_s for t in tuned.trials), top, reps,
          margin)
    return tuned


def check_top(top: int, spelled: str = "top") -> None:
    """A ``RedistError`` unless ``top`` (spelled as the caller's user writes it) is at least 1."""
    if top < 1:
        raise RedistError(f"autotune: {spelled}={top!r} is out of range; it is how many plans to time, "
                          "at least 1")


def _check_arguments(top: int, reps: int, margin: float) -> None:
    """A ``RedistError`` (a ``ValueError``) naming the first argument out of range and its range."""
    check_top(top)
    for name, value, ok, wanted in (("reps", reps, reps >= 1, "at least 1"),
                                    ("margin", margin, 0 <= margin < 1, "in [0, 1): the fraction faster a plan "
                                     "must measure to replace the model's choice")):
        if not ok:
            raise RedistError(f"autotune: {name}={value!r} is out of range; {name} must be {wanted}")


@memo(Scope.TYPE, maxsize=256)
def _tuned(src: ShardingType, dst: ShardingType, cm: CostModel, top: int, reps: int, margin: float) -> Tuned:
    plans = [with_endpoints(p, src, dst) for p in ranked(src.without_reduced(), dst.without_reduced(), cm, top)]
    if len(plans) == 1 or not any(p.steps for p in plans):
        return Tuned(plans[0], tuple(Trial(p, p.time_s, float("nan")) for p in plans))
    own = [s.seconds for s in samples(plans, reps, warmup=WARMUP)]
    every = [json.loads(v) for v in gather(f"redist-autotune-{next(_CALLS)}", json.dumps(own))]
    secs = [max(col) for col in zip(*every)]  # a collective lasts until its slowest process is done
    fastest = min(range(len(plans)), key=secs.__getitem__)
    pick = fastest if secs[fastest] < secs[0] * (1 - margin) else 0
    return Tuned(plans[pick], tuple(Trial(p, p.time_s, t) for p, t in zip(plans, secs)))


_CALLS = itertools.count()
"""Distinct keys for ``gather`` (every process calls ``autotune`` in the same order, as it must
for the timed collectives anyway)."""


__all__ = ["DEFAULT_MARGIN", "DEFAULT_REPS", "DEFAULT_TOP", "Trial", "Tuned", "autotune"]
