"""The constructive synthesizer: any type mismatch -> a memory-bounded plan of minimal traffic.

It reasons on prime sub-axes ("atoms", ``redist.atoms``) with each dimension as a stack whose
minor end is where every step acts. For each dimension, the common prefix of the current and
destination axes is final; the rest must be removed (minor first) and the destination's remaining
axes added (major first). A greedy pass then takes, in order of preference:

1. ``DynSlice`` of a destination axis the array does not use yet (free, shrinks memory);
2. ``ReduceScatter`` of an unreduced axis into the dimension that wants it next;
3. ``AllToAll`` of a minor-most axis that another dimension wants next ((p-1)/p of the local size,
   instead of the p-1 times of a gather followed by a slice);
4. ``AllReduce`` of unreduced axes the destination does not shard over (after slicing: smallest);
5. ``AllGather`` of axes the destination does not use, then ``PadUnreduced``/``Discard`` for axes the
   destination wants unreduced (free), last because they grow memory;
6. only when stuck (an axis is needed but buried): gather it and slice it again later.

Slices first and gathers last keep every intermediate within ``max(src, dst)`` local bytes.
Candidates add a *relabelling* ``Permute`` (swap axes of equal size in place, e.g. ``[8@x,8@y] ->
[8@y,8@x]``, or the major half of ``y`` for ``x``), at the start or after the free slices, and an
``Exchange`` of exactly the missing cells, alone or after any prefix of a typed plan; each
candidate that opens with a relabelling permute is also tried mirrored, the permute last (XLA's
order for ``tp2d_transpose_2x4``; a permute-then-slice candidate becomes slice-then-permute). Each
candidate is measured; the plan returned meets the memory bound and has the least received bytes,
then the least estimated time, then the fewest collectives (a typed collective wins ties). Under
the time objective, time comes first; a measured profile's ``CostModel.tie_tolerance`` makes plans
within its measured error of the fastest ties, won by the fewest collective ops, then by steps
that span processes coming last (``ranking.Best.choice``, ``ranking.crossing_order``).

The passes, one module each (docs/design.md 6): ``greedy`` (the greedy pass), ``fusion``
(``merge``, ``FUSE``), ``families`` (``BUILDERS``), ``floors`` (exchange floors), ``ranking``
(``Best``), ``variants`` (``VARIANTS``), ``exchanges`` (the exchange pass) and ``driver``
(``synthesize``, ``ranked``).
"""

from redist.synth.driver import cached_synthesize, ranked, synthesize
from redist.synth.families import BUILDERS, ROLE, Builder, Role
from redist.synth.fusion import FUSE, Fuse
from redist.synth.variants import VARIANTS, Variants

__all__ = ["BUILDERS", "FUSE", "ROLE", "VARIANTS", "Builder", "Fuse", "Role", "Variants", "cached_synthesize", "ranked", "synthesize"]
