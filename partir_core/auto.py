"""``auto``: find a schedule of tactics by searching partial schedules, scored by the simulator.

The search follows automap (arXiv 2112.02958) and PartIR's partitioner (arXiv 2210.06352): a
state is a partial schedule with propagation run after every action, an action shards one group
of tied input dimensions over one mesh axis (``search_space``: the groups, their *reach* and the
order come from probing the program, the same code for every model), and a state is scored by
what the partitioner's own simulator predicts for its lowering, priced by a cost profile fitted
to clocks (``auto_profile``: matmul and elementwise FLOP rates, a latency per collective kind, a
bandwidth):

    score = profile time of the simulated step
            + memory_weight * root_time * max(0, peak / memory_budget - 1)

The penalty is soft so the search can pass through states that overflow on the way to ones that
fit (Megatron alone and batch parallelism alone may each overflow where together they fit); the
schedule returned is the best one that fits (the least overflowing one only if none does).
Every partial schedule is itself a valid schedule, so a state is valued by evaluating it (no
random rollouts); a child state is propagated from a copy of its parent's (shared prefixes are
propagated once) and every evaluation is cached by the layout of every value.

The default, ``method="beam"`` (``Beam``), costs every action alone, ranks the actions by that
value, and extends the ``beam_width`` best states by their ``beam_fanout`` best-ranked actions
depth by depth until a depth improves the best by under 1%. How many schedules it costs on the
bundled models, and how its picks compare with the hand strategies of ``partir_core.strategies``
(predicted and measured): ``benchmarks/results/auto_search.md``.
``method="mcts"`` is single-player UCT (the root expanded fully first, deeper nodes ordered by
their value at the root under progressive widening, values backed up as the maximum).
``"greedy"`` is the beam with width 1. ``benchmarks.auto --compare`` sets the methods against
each other on the same evaluation budget.

Where the profile cannot separate the best few schedules (on the GPT it predicted the found
schedule 1.6% faster than Megatron with sequence parallelism; it ran 13% slower), the clock
can choose, as ``redist.autotune`` does for redistribution plans: with ``measure_top=K`` (or
``None``: 3 where the arguments are concrete arrays and the backend has the mesh's devices) the
K best distinct schedules by score that fit the budget are compiled and timed interleaved
(``partir_core.clock``), and the fastest median wins if more than 5% faster than the
best-scored one (``measure_margin``); the search keeps a quarter of ``time_budget_s`` for that.
The default, ``measure_top=0``, is the simulator alone: deterministic for a seed.

The result is a list of ordinary ``Shard`` tactics after the user's ``fixed`` ones: readable,
editable, and ``partition(fn, mesh, result)`` (or ``result.schedule``) reproduces exactly the
scored program. Example (docs/howto/partition.md)::

    result = auto(step, mesh, *args, memory_budget=2**30, seed=0, max_evaluations=200)
    print(result.explain())              # the search, the schedule, what the clock measured
    partitioned = partition(step, mesh, result)
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from partir_core import rules as _rules_mod
from partir_core.auto_profile import CPU8, CostProfile, features
from partir_core.clock import ClockTimer, Timer, can_measure
from partir_core.decide import lower
from partir_core.ir import Program, trace
from partir_core.propagate import Propagator
from partir_core.rules import Rule
from partir_core.search_space import Action, SearchSpace, State, build_space
from partir_core.simulate import Simulation, simulate
from partir_core.tactics import Tactic, apply_schedule
from spmd_types import Mesh

METHODS = ("mcts", "beam", "greedy")
"""Search methods ``auto`` offers (``benchmarks.auto --compare`` sets them against each other)."""


@dataclass(frozen=True)
class Objective:
    """How a schedule is scored (lower is better); see the module docstring. ``profile`` prices
    the simulator's counts (``auto_profile``): the default is fitted to this project's CI machine;
    pass one fitted to yours."""

    profile: CostProfile = CPU8
    memory_budget: int | None = None
    memory_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.memory_budget is not None and self.memory_budget <= 0:
            raise ValueError(f"memory_budget must be a positive number of bytes, got {self.memory_budget}")


class Evaluation(NamedTuple):
    """The simulator's prediction for one schedule, and its score under the objective."""

    time_s: float
    compute_s: float
    comm_s: float
    peak_bytes: int
    score: float

    def fits(self, budget: int | None) -> bool:
        return budget is None or self.peak_bytes <= budget

    def fmt(self) -> str:
        return (f"{self.time_s * 1e6:,.1f} us (compute {self.compute_s * 1e6:,.1f}, "
                f"communication {self.comm_s * 1e6:,.1f}), peak {self.peak_bytes:,} B")


def rules_of(program: Program, unknown: str = "error") -> tuple[Rule, ...]:
    """The program's rules, whichever way this version of ``rules`` builds them."""
    many = getattr(_rules_mod, "rules_for", None)
    if many is not None:
        return tuple(many(program, unknown))
    return tuple(_rules_mod.rule_for(op, unknown) for op in program.ops)


class Evaluator:
    """Lowers and simulates states, cached by the layout of every value (transpositions are free)."""

    def __init__(self, program: Program, mesh: Mesh, rules: Sequence[Rule], objective: Objective,
                 keep: int = 0) -> None:
        self.program, self.mesh, self.rules, self.objective = program, mesh, tuple(rules), objective
        self.cache: dict[Any, tuple[Evaluation, Simulation]] = {}
        self.root_time_s: float | None = None
        self.history: list[Evaluation] = []
        """After each costed schedule, the best so far (fits the budget first, then score)."""
        self.keep = keep
        self.top: list[tuple[float, int, State]] = []
        """The ``keep`` best costed states that fit the budget, as (score, order costed, state),
        best first: the candidates the clock chooses among (distinct input layouts)."""

    def __call__(self, st: State) -> Evaluation:
        key = st.full_key()
        if key not in self.cache:
            low = lower(self.program, self.mesh, self.rules, st.prop.layouts)
            sim = simulate(low)
            ev = self._score(low, sim)
            self.cache[key] = (ev, sim)
            budget = self.objective.memory_budget
            if self.keep and ev.fits(budget):
                self._remember(ev.score, st)
            if not self.history or (not ev.fits(budget), ev.score) < (not self.history[-1].fits(budget),
                                                                      self.history[-1].score):
                self.history.append(ev)
            else:
                self.history.append(self.history[-1])
        return self.cache[key][0]

    def _remember(self, score: float, st: State) -> None:
        """Keep ``st`` among the ``keep`` best; of states with the same input layouts (the same
        tactics in another order), only the first best-scored one."""
        same = [e for e in self.top if e[2].key == st.key]
        if same and same[0][0] <= score:
            return
        rest = [e for e in self.top if e[2].key != st.key]
        self.top = sorted(rest + [(score, len(self.cache), st)], key=lambda e: e[:2])[:self.keep]

    def _score(self, low: Any, sim: Simulation) -> Evaluation:
        o = self.objective
        f = features(low, sim)
        compute, comm = o.profile.compute_s(f), o.profile.comm_s(f)
        t = compute + comm
        if self.root_time_s is None:
            self.root_time_s = t
        over = 0.0 if o.memory_budget is None else max(0.0, sim.peak_bytes / o.memory_budget - 1.0)
        return Evaluation(t, compute, comm, sim.peak_bytes, t + o.memory_weight * self.root_time_s * over)


@dataclass(eq=False)
class _Node:
    state: State
    value: float
    untried: list[Action]
    children: list[_Node] = field(default_factory=list)
    visits: int = 0
    best: float = 0.0
    exhausted: bool = False


@dataclass(frozen=True)
class SearchStats:
    evaluations: int
    iterations: int
    seconds: float
    stopped_by: str
    """``"time budget"``, ``"evaluation budget"``, ``"exhausted"`` (every reachable state seen) or
    ``"converged"`` (beam: a depth found nothing better than the best so far)."""
    method: str = "mcts"
    history: tuple[Evaluation, ...] = ()
    """The best schedule's evaluation after each costed schedule (index n: n + 1 costed)."""


class MCTS:
    """Single-player UCT over a ``SearchSpace`` (see the module docstring for the choices)."""

    def __init__(self, space: SearchSpace, evaluate: Evaluator, root: State, seed: int,
                 exploration: float = 0.3, widening: float = 1.5) -> None:
        self.space, self.evaluate, self.rng = space, evaluate, random.Random(seed)
        self.c, self.widening = exploration, widening
        self.root_score = evaluate(root).score
        self.prior: dict[Action, float] = {}
        self.order = {a: i for i, a in enumerate(space.ordered(root.prop.mesh))}
        self.best = root
        self.root = self._node(root)

    def reward(self, st: State) -> float:
        """The shaped value the tree backs up; also keeps the best schedule that fits."""
        self.best = _better(self.evaluate, st, self.best)
        return self.root_score / self.evaluate(st).score

    def _node(self, st: State) -> _Node:
        acts = list(self.space.actions)
        self.rng.shuffle(acts)  # the seed breaks ties between equally valued actions
        acts.sort(key=lambda a: (-self.prior.get(a, 0.0), self.order[a]))
        r = self.reward(st)
        return _Node(st, r, acts, best=r)

    def _can_expand(self, n: _Node) -> bool:
        if not n.untried:
            return False
        return n is self.root or len(n.children) < max(1, math.ceil(self.widening * math.sqrt(n.visits)))

    def _select(self, n: _Node) -> _Node:
        live = [c for c in n.children if not c.exhausted]
        lnN = math.log(max(n.visits, 1))
        top = max(c.best for c in live)  # values relative to the best sibling: c is scale-free
        return max(live, key=lambda c: c.best / top + self.c * math.sqrt(lnN / (c.visits + 1)))

    def _expand(self, n: _Node) -> _Node | None:
        seen = {c.state.key for c in n.children}
        while n.untried:
            a = n.untried.pop(0)
            st = n.state.apply(self.space, a)
            if st is None or st.key in seen:
                continue
            child = self._node(st)
            if n is self.root:
                self.prior[a] = child.value
            n.children.append(child)
            return child
        return None

    def iterate(self) -> None:
        """One selection / expansion / back-up pass."""
        path = [self.root]
        n = self.root
        while not self._can_expand(n) and any(not c.exhausted for c in n.children):
            n = self._select(n)
            path.append(n)
        child = self._expand(n) if n.untried else None
        if child is not None:
            path.append(child)
        leaf = path[-1]
        if not leaf.untried and all(c.exhausted for c in leaf.children):
            leaf.exhausted = True
        for m in reversed(path):
            m.visits += 1
            m.best = max(m.best, leaf.best)
            if m.children and not m.untried and all(c.exhausted for c in m.children):
                m.exhausted = True

    def run(self, time_budget_s: float, max_evaluations: int | None, started: float,
            progress: Callable[[int, int], None] | None = None) -> SearchStats:
        it = 0
        stop = "exhausted"
        while not self.root.exhausted:
            out = _out_of_budget(self.evaluate, time_budget_s, max_evaluations, started)
            if out is not None:
                stop = out
                break
            self.iterate()
            it += 1
            if progress is not None:
                progress(it, len(self.evaluate.cache))
        return SearchStats(len(self.evaluate.cache), it, time.perf_counter() - started, stop)


def _rank(evaluate: Evaluator, st: State) -> tuple[bool, float]:
    ev = evaluate(st)
    return (not ev.fits(evaluate.objective.memory_budget), ev.score)


def _better(evaluate: Evaluator, st: State, best: State) -> State:
    """The better of two states: one that fits the budget first, then the lower score."""
    return st if _rank(evaluate, st) < _rank(evaluate, best) else best


class Beam:
    """Beam search guided by the root's values. Depth 1 costs every action from the root (the
    static order, ``SearchSpace.ordered``, only breaks ties); the actions are then ranked by the
    score of their one-action schedule (an all-moves-as-first prior: a sharding that pays off
    alone, such as the batch or the sequence over an axis, usually pays off with others too).
    Each later depth extends each of the ``width`` best states by its first ``fanout`` applicable
    actions in that rank, and keeps the ``width`` best children. The search ends when a depth
    improves the best score by under ``tolerance`` (1%) and does not make it fit where it did not
    (``converged``), or no new state is reachable. Width 1 is greedy. It draws no random numbers:
    the result depends on the seed not at all."""

    def __init__(self, space: SearchSpace, evaluate: Evaluator, root: State, width: int = 3,
                 fanout: int | None = 6, tolerance: float = 0.01) -> None:
        if width < 1:
            raise ValueError(f"beam width must be >= 1, got {width}")
        if fanout is not None and fanout < 1:
            raise ValueError(f"beam fanout must be >= 1 (or None: every action), got {fanout}")
        self.space, self.evaluate, self.width, self.fanout = space, evaluate, width, fanout
        self.tolerance = tolerance
        self.order = space.ordered(root.prop.mesh)
        evaluate(root)
        self.root = root
        self.best, self.frontier = root, [root]

    def run(self, time_budget_s: float, max_evaluations: int | None, started: float,
            progress: Callable[[int, int], None] | None = None) -> SearchStats:
        seen = {self.root.key}
        it, stop, depth = 0, "exhausted", 0
        while self.frontier and stop == "exhausted":
            cap = None if depth == 0 else self.fanout
            children: list[State] = []
            for st in self.frontier:
                tried = 0
                for a in self.order:
                    if cap is not None and tried >= cap:
                        break
                    stop = _out_of_budget(self.evaluate, time_budget_s, max_evaluations, started) or stop
                    if stop != "exhausted":
                        break
                    nxt = st.apply(self.space, a)
                    if nxt is None:
                        continue
                    tried += 1
                    if nxt.key in seen:
                        continue
                    seen.add(nxt.key)
                    self.evaluate(nxt)  # costed now, so the evaluation budget counts it
                    children.append(nxt)
                    it += 1
                    if progress is not None:
                        progress(it, len(self.evaluate.cache))
                if stop != "exhausted":
                    break
            if depth == 0:
                self.order = self._ranked(children)
            depth += 1
            before = _rank(self.evaluate, self.best)
            for c in children:
                self.best = _better(self.evaluate, c, self.best)
            if stop == "exhausted" and depth > 1 and not self._improved(before):
                stop = "converged"
            self.frontier = sorted(children, key=lambda c: _rank(self.evaluate, c))[:self.width]
        return SearchStats(len(self.evaluate.cache), it, time.perf_counter() - started, stop)

    def _improved(self, before: tuple[bool, float]) -> bool:
        """Whether the best now fits where it did not, or scores ``tolerance`` better."""
        now = _rank(self.evaluate, self.best)
        return now[0] < before[0] or now[1] < before[1] * (1.0 - self.tolerance)

    def _ranked(self, children: Sequence[State]) -> tuple[Action, ...]:
        """The actions by the score of their one-action schedules; unapplicable ones last."""
        value = {c.actions[-1]: _rank(self.evaluate, c) for c in children}
        worst = (True, math.inf)
        return tuple(sorted(self.order, key=lambda a: value.get(a, worst)))


def _out_of_budget(evaluate: Evaluator, time_budget_s: float, max_evaluations: int | None,
                   started: float) -> str | None:
    if time.perf_counter() - started >= time_budget_s:
        return "time budget"
    if max_evaluations is not None and len(evaluate.cache) >= max_evaluations:
        return "evaluation budget"
    return None


@dataclass(frozen=True)
class Candidate:
    """One schedule the clock timed: its found tactics, the simulator's prediction, its median."""

    found: tuple[Tactic, ...]
    evaluation: Evaluation
    measured_s: float | None
    """Median seconds per call on the running backend; None if the time ran out before it compiled."""


@dataclass(frozen=True)
class Measurement:
    """What the clock chose among: the best schedules by score that fit the budget (best score
    first) and which one won (``pick``). Measured on this machine: another may choose otherwise."""

    candidates: tuple[Candidate, ...]
    chosen: int
    seconds: float
    """Compiling and timing them."""

    def lines(self) -> list[str]:
        out = [f"== measured: the clock chose among the {len(self.candidates)} best by score "
               f"({self.seconds:.1f} s; medians on this machine, not deterministic across machines) =="]
        for i, c in enumerate(self.candidates):
            meas = "not compiled in time" if c.measured_s is None else f"measured {c.measured_s * 1e3:,.2f} ms"
            mark = "   [chosen]" if i == self.chosen else ""
            found = "; ".join(str(t) for t in c.found) or "(the fixed tactics alone)"
            out.append(f"{i + 1}. predicted {c.evaluation.time_s * 1e3:,.2f} ms, {meas}{mark}: {found}")
        return out


@dataclass(frozen=True, eq=False)
class AutoResult:
    """The schedule ``auto`` found (``fixed`` tactics first), what it is predicted to cost, how
    the search got there and, where the clock chose, what it measured (``measurement``).
    ``schedule`` is a plain list of tactics: print it, edit it, reuse it.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import auto, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((64, 128), np.float32), np.ones((128, 256), np.float32)
        >>> mesh = Mesh({"data": 2, "model": 4})
        >>> result = auto(f, mesh, x, w, seed=0, max_evaluations=8, progress=False)
        >>> result.schedule == result.fixed + tuple(t for t, _ in result.steps)
        True
        >>> p = partition(f, mesh, result.schedule)
        >>> bool(np.allclose(p(x, w), f(x, w)))
        True
    """

    schedule: tuple[Tactic, ...]
    fixed: tuple[Tactic, ...]
    evaluation: Evaluation
    baseline: Evaluation
    """The ``fixed`` tactics alone (everything else replicated)."""
    steps: tuple[tuple[Tactic, Evaluation], ...]
    """Each found tactic with the prediction for the schedule up to and including it."""
    objective: Objective
    space: SearchSpace
    stats: SearchStats
    mesh: Mesh
    fn: Callable[..., Any]
    measurement: Measurement | None = None
    """The candidates the clock timed and which won (None: the simulator alone chose)."""

    @property
    def found(self) -> tuple[Tactic, ...]:
        return self.schedule[len(self.fixed):]

    def partition(self, *, unknown: str = "error") -> Any:
        """``partition(fn, mesh, schedule)``: the partitioned step, ready to call."""
        from partir_core.api import partition

        return partition(self.fn, self.mesh, self.schedule, unknown=unknown)

    def explain(self) -> str:
        o, s = self.objective, self.stats
        budget = f"{o.memory_budget:,} B" if o.memory_budget is not None else "none"
        lines = [f"== auto: {s.method} over {len(self.space.actions)} actions on mesh {self.mesh} ==",
                 f"objective: the simulator's counts priced by {o.profile}, "
                 f"memory budget {budget} (penalty weight {o.memory_weight:g})",
                 f"search: {s.evaluations} schedules costed in {s.iterations} iterations, "
                 f"{s.seconds:.1f} s, stopped: {s.stopped_by}", "", "== schedule =="]
        for i, t in enumerate(self.fixed, 1):
            lines.append(f"{i}. {t}   [fixed]")
        lines.append(f"   fixed tactics alone: {self.baseline.fmt()}")
        for i, (t, ev) in enumerate(self.steps, len(self.fixed) + 1):
            lines.append(f"{i}. {t}   [found]")
            lines.append(f"   -> {ev.fmt()}")
        fits = "fits" if self.evaluation.fits(o.memory_budget) else "EXCEEDS"
        lines += [f"predicted: {self.evaluation.fmt()}; {fits} the budget; "
                  f"{self.baseline.time_s / self.evaluation.time_s:.2f}x faster than the fixed tactics alone",
                  ""]
        if self.measurement is not None:
            lines += self.measurement.lines() + [""]
        lines += ["== search space (static analysis: tied dimensions form one group) ==",
                  self.space.describe()]
        return "\n".join(lines)


def _progress(enabled: bool, budget_s: float) -> tuple[Any, Callable[[int, int], None] | None]:
    """A rich progress bar over the time budget (the search's real limit), or nothing."""
    if not enabled:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("auto: {task.fields[evals]} schedules costed"), BarColumn(),
                   TimeElapsedColumn(), transient=True)
    task = bar.add_task("search", total=budget_s, evals=0)
    t0 = time.perf_counter()

    def update(it: int, evals: int) -> None:
        bar.update(task, completed=min(budget_s, time.perf_counter() - t0), evals=evals)

    return bar, update


MEASURE_TOP = 3
"""How many of the best schedules by score the clock chooses among by default (where it can)."""
MEASURE_MARGIN = 0.05
"""How much faster than the best-scored candidate another must measure to replace it (as
``redist.autotune``'s margin): near-identical schedules (the GPT's best three differ by one
position-embedding tactic) measured up to 5% apart on the loaded CI machine."""
SEARCH_SHARE = 0.75
"""The share of ``time_budget_s`` the search may use when the clock chooses: it leaves the rest
for compiling and timing the candidates."""


def auto(step_fn: Callable[..., Any], mesh: Mesh, *args: Any, memory_budget: int | None = None,
         time_budget_s: float = 120.0, fixed: Sequence[Tactic] = (), seed: int = 0,
         max_evaluations: int | None = None, profile: CostProfile = CPU8, memory_weight: float = 1.0,
         method: str = "beam", beam_width: int = 3, beam_fanout: int | None = 6, unknown: str = "error",
         progress: bool = True, measure_top: int | None = 0, measure_margin: float = MEASURE_MARGIN,
         timer: Timer | None = None) -> AutoResult:
    """Search a schedule for ``step_fn(*args)`` on ``mesh`` (see the module docstring).

    ``fixed`` tactics are applied first and kept; the search adds ``Shard`` tactics after them.
    ``memory_budget``: bytes per device the simulator's peak should stay under. The search stops
    at ``time_budget_s`` (or ``max_evaluations`` costed schedules, or when every reachable state
    was seen, or, for the beam, when a depth improves the best by under 1%) with the best schedule
    so far. ``method``: ``"beam"`` (default; ``beam_width`` states, ``beam_fanout`` actions each
    per depth), ``"greedy"`` or ``"mcts"``. Returns an ``AutoResult``, which ``partition``
    accepts in place of a schedule.

    The clock chooses among the ``measure_top`` best distinct schedules by score that fit the
    budget: each is compiled as ``partition`` compiles it on the running backend and timed
    interleaved (``partir_core.clock``), and the fastest median wins if it is more than
    ``measure_margin`` (5%) faster than the best-scored one, which wins otherwise
    (``result.measurement`` records the candidates, their predicted and measured times and the
    winner); with fewer than two candidates nothing is timed. The default, 0, times nothing;
    ``None`` is ``MEASURE_TOP`` (3) when ``args`` are concrete arrays and the backend has the
    mesh's devices, and 0 otherwise. With measuring on, the search stops at ``SEARCH_SHARE`` (3/4) of
    ``time_budget_s`` and compiling and timing use the rest (at least 5 rounds and two
    candidates, so a search that used its whole share overruns by that). ``timer`` replaces the
    clock (a ``partir_core.clock.Timer``).

    Determinism: with ``measure_top=0`` (the default: the simulator alone) a search that ends on anything but
    the clock is deterministic: the beam draws no random numbers, MCTS draws them from ``seed``;
    one that ends on ``time_budget_s`` depends on the machine's speed. A measured choice depends
    on the machine and its load: it can differ between runs and machines.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> from partir_core import auto, partition
        >>> from spmd_types import Mesh
        >>> def f(x, w):
        ...     return jnp.tanh(x @ w)
        >>> x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
        >>> mesh = Mesh({"data": 2, "model": 4})
        >>> found = auto(f, mesh, x, w, max_evaluations=8, progress=False, measure_top=0)
        >>> found.schedule == auto(f, mesh, x, w, max_evaluations=8, progress=False, measure_top=0).schedule
        True
        >>> bool(np.allclose(partition(f, mesh, found)(x, w), f(x, w)))
        True
        >>> timed = auto(f, mesh, x, w, max_evaluations=8, progress=False, measure_top=2)
        >>> timed.schedule == timed.fixed + timed.measurement.candidates[timed.measurement.chosen].found
        True

    Raises:
        PartitionError: an unknown ``method``, a negative ``measure_top`` or a ``measure_margin``
            outside [0, 1).
        UnknownPrimitiveError: ``step_fn`` uses a primitive with no sharding rule (``unknown="error"``).
    """
    started = time.perf_counter()
    top = _measure_top(measure_top, measure_margin, method, mesh, args, timer)
    search_s = time_budget_s * SEARCH_SHARE if top else time_budget_s
    objective = Objective(profile, memory_budget, memory_weight)
    program = trace(step_fn, *args)
    rules = rules_of(program, unknown)
    space = build_space(program, mesh, rules)
    prop = Propagator(program, mesh, rules)
    apply_schedule(program, mesh, prop, list(fixed))
    evaluate = Evaluator(program, mesh, rules, objective, keep=top)
    root = State(prop, ())
    search: MCTS | Beam
    if method == "mcts":
        search = MCTS(space, evaluate, root, seed)
    else:
        search = Beam(space, evaluate, root, 1 if method == "greedy" else beam_width, beam_fanout)
    bar, update = _progress(progress, search_s)
    if bar is not None:
        with bar:
            stats = search.run(search_s, max_evaluations, started, update)
    else:
        stats = search.run(search_s, max_evaluations, started)
    stats = dataclasses.replace(stats, method=method, history=tuple(evaluate.history))
    best, measured = search.best, None
    if top:
        clock = timer or ClockTimer(step_fn, mesh, tuple(args))
        best, measured = _measure(evaluate, space, tuple(fixed), search.best, clock, started + time_budget_s,
                                  measure_margin)
    steps = []
    for k in range(1, len(best.actions) + 1):
        prefix = _replay(root, space, best.actions[:k])
        steps.append((space.tactic(best.actions[k - 1]), evaluate(prefix)))
    return AutoResult(tuple(fixed) + tuple(best.schedule(space)), tuple(fixed), evaluate(best),
                      evaluate(root), tuple(steps), objective, space, stats, mesh, step_fn, measured)


def _measure_top(measure_top: int | None, margin: float, method: str, mesh: Mesh, args: Sequence[Any],
                 timer: Timer | None) -> int:
    """The checked arguments' number of candidates to time (the default where it is None)."""
    from partir_core.errors import PartitionError

    if method not in METHODS:
        raise PartitionError(f"unknown search method {method!r}; known: {', '.join(METHODS)}")
    if not 0.0 <= margin < 1.0:
        raise PartitionError(f"measure_margin must be in [0, 1) (the fraction faster a schedule must "
                             f"measure to replace the best-scored one), got {margin}")
    if measure_top is None:
        return MEASURE_TOP if timer is not None or can_measure(mesh, args) else 0
    if measure_top < 0:
        raise PartitionError(f"measure_top must be >= 0 (0: the simulator alone chooses), got {measure_top}")
    return measure_top


def candidates(evaluate: Evaluator, best: State) -> list[State]:
    """The search's best state first (when it fits the budget), then the next best by score that
    fit: ``evaluate.keep`` distinct states in all (none when the best does not fit)."""
    if not evaluate(best).fits(evaluate.objective.memory_budget):
        return []
    return [best] + [st for _, _, st in evaluate.top if st.key != best.key][:evaluate.keep - 1]


def pick(measured: Sequence[float | None], margin: float) -> int:
    """The first fastest measured candidate if it is more than ``margin`` faster than the first
    (the best-scored), else the first (None: not measured)."""
    times = [(t, i) for i, t in enumerate(measured) if t is not None]
    if not times:
        return 0
    t, fastest = min(times)
    first = measured[0]
    return fastest if first is None or t < first * (1.0 - margin) else 0


def _measure(evaluate: Evaluator, space: SearchSpace, fixed: tuple[Tactic, ...], best: State, timer: Timer,
             deadline: float, margin: float = MEASURE_MARGIN) -> tuple[State, Measurement | None]:
    """The candidate ``timer`` chooses (``pick``) and what was measured (``best`` as it is with
    under two candidates)."""
    states = candidates(evaluate, best)
    if len(states) < 2:
        return best, None
    t0 = time.perf_counter()
    times = list(timer([fixed + tuple(st.schedule(space)) for st in states], deadline))
    got: list[float | None] = [*times[:len(states)], *[None] * (len(states) - len(times))]
    chosen = pick(got, margin)
    cands = tuple(Candidate(tuple(st.schedule(space)), evaluate(st), t) for st, t in zip(states, got))
    return states[chosen], Measurement(cands, chosen, time.perf_counter() - t0)


def _replay(root: State, space: SearchSpace, actions: Sequence[Action]) -> State:
    st = root
    for a in actions:
        nxt = st.apply(space, a)
        assert nxt is not None, "a prefix of a searched schedule was pruned"
        st = nxt
    return st
