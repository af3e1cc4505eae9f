"""The shape of the code, held by tests so it cannot drift back (docs/design.md sections 1 and 12):

* every step facet is a table with an entry for every step class (a new step that misses one
  fails here, naming the table and the class, instead of at run time);
* no dispatch on step classes outside the tables: ``isinstance`` (tuples included), ``type(x) is``
  / ``in``, ``case`` and class tuples;
* every cache is a registered ``spmd_types.memo`` table, and clearing leaves the planner cold;
* no import circles (annotation imports included), and the vocabulary of steps, plans and types
  imports nothing above it;
* no function over 60 lines in the core packages, none above cyclomatic complexity 15 in
  ``redist`` and ``partir_core``.

The dispatch, circle and complexity rules each have a test that they fail on a planted violation.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import partir_core  # noqa: F401  (registers nothing, but imports redist users)
import proofs  # noqa: F401  (registers the z3 tables and the verifier)
import proofs.soundness  # noqa: F401
import redist.executor  # noqa: F401
import redist.render  # noqa: F401
import redist.search  # noqa: F401
import redist.simulate  # noqa: F401
import redist.synth  # noqa: F401
import redist.visualize  # noqa: F401  (its TRAFFIC table: imported here so the file passes alone)
from redist import ALL_STEPS, KINDS, CostModel, clear_caches, redistribute
from redist.facets import MissingFacetError, tables
from spmd_types import Mesh, memo, parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("spmd_types", "redist", "proofs", "partir_core", "benchmarks", "redist_cli")
CORE = ("spmd_types", "redist", "proofs")
STEP_NAMES = {cls.__name__ for cls in ALL_STEPS} | {"Step"}


def _sources(packages: tuple[str, ...]) -> list[tuple[pathlib.Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))]


EXPECTED_TABLES = {
    "redist.measure.MEASURE", "redist.measure.PROFILE_KIND", "redist.simulate.SIMULATE", "redist.executor.LOWER", "redist.synth.FUSE",
    "redist.synth.VARIANTS", "redist.synth.ROLE", "redist.search.NEIGHBOURS", "proofs.steps_semantics.SEMANTICS",
    "proofs.measures.RECV", "proofs.soundness.CANDIDATES", "redist.render.DESCRIBE", "redist.visualize.TRAFFIC",
    "redist.steps.ADMIT", "redist.measure.WRITTEN", "redist.plan.EXCHANGES", "redist.device_recv.RECV_MAX",
}


def test_every_facet_table_is_registered() -> None:
    assert {t.owner for t in tables()} == EXPECTED_TABLES


@pytest.mark.parametrize("table", sorted(EXPECTED_TABLES))
def test_every_step_class_has_an_entry(table: str) -> None:
    (t,) = [t for t in tables() if t.owner == table]
    missing = [cls.__name__ for cls in ALL_STEPS if cls not in t]
    assert not missing, f"{t} has no entry for {missing}"
    extra = [cls.__name__ for cls in t.classes() if cls not in ALL_STEPS]
    assert not extra, f"{t} has entries for classes outside ALL_STEPS: {extra}"


def test_a_missing_entry_is_a_typed_error_naming_the_table() -> None:
    from redist.measure import MEASURE

    class NewStep(ALL_STEPS[0]):  # type: ignore[valid-type,misc]
        pass

    with pytest.raises(MissingFacetError, match=r"measure table .* no entry for step NewStep"):
        MEASURE[NewStep]


def test_kinds_derive_from_the_step_list() -> None:
    assert KINDS == tuple(cls.kind for cls in ALL_STEPS) and len(set(KINDS)) == len(KINDS)


class _StepBranches(ast.NodeVisitor):
    """Finds dispatch on a step's class written outside a facet table: ``isinstance(x, A)`` or
    ``isinstance(x, (A, B))``, ``type(x) is A`` / ``in (A, B)`` / ``==``, ``case A():``, and tuple,
    list or set literals of step classes (a class tuple is a facet table in disguise). Names bound
    at module level to such literals count as step classes. Type annotations (``tuple[A, ...]``)
    and ``ALL_STEPS`` itself are not branches. Each finding is ``file:function: what``."""

    def __init__(self, file: str, tree: ast.Module) -> None:
        self.file = file
        self.scope = ["<module>"]
        self.found: list[str] = []
        self.classes = STEP_NAMES | {
            t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
            and self._class_tuple(n.value) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        self.annotations = {id(m) for n in ast.walk(tree) if isinstance(n, ast.Subscript) for m in ast.walk(n.slice)}
        self.all_steps = {id(n.value) for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                          and any(isinstance(t, ast.Name) and t.id == "ALL_STEPS"
                                  for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))}

    @staticmethod
    def _class_tuple(node: ast.AST) -> bool:
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(
            isinstance(e, ast.Name) and e.id in STEP_NAMES for e in node.elts)

    def _names_step(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.classes for n in ast.walk(node))

    def _add(self, what: str) -> None:
        self.found.append(f"{self.file}:{'.'.join(self.scope[1:]) or self.scope[0]}: {what}")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Call(self, node: ast.Call) -> None:
        if getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 and self._names_step(node.args[1]):
            self._add("isinstance on step classes")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        typed = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "type" for n in sides)
        if typed and any(self._names_step(n) for n in sides):
            self._add("type() compared with step classes")
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        if self._names_step(node.cls):
            self._add("case on a step class")
        self.generic_visit(node)

    def _literal(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        if self._class_tuple(node) and id(node) not in self.annotations | self.all_steps:
            self._add("a literal of step classes")
        self.generic_visit(node)

    visit_Tuple = visit_List = visit_Set = _literal


def step_branches(file: str, source: str) -> list[str]:
    """Dispatch on step classes in ``source`` outside facet tables (``_StepBranches``)."""
    tree = ast.parse(source)
    finder = _StepBranches(file, tree)
    finder.visit(tree)
    return finder.found


STEP_BRANCHES_ALLOWED = {
    # One-off benchmark studies that pick out one step class of a plan.
    "exchange_forms.py:_body.run: type() compared with step classes",
    "join_forms.py:_chain_body.run: type() compared with step classes",
    "join_forms.py:_first_all_to_all: type() compared with step classes",
}


def test_no_branching_on_step_classes() -> None:
    """Dispatch on a step's class goes through a facet table, never an ``isinstance`` chain, a
    ``type(x) is`` test or a class tuple (allowed exceptions above, each named once)."""
    found = [f for path, _ in _sources(PACKAGES) for f in step_branches(path.name, path.read_text())]
    counts = {f: found.count(f) for f in found}
    new = sorted(f for f in counts if f not in STEP_BRANCHES_ALLOWED)
    assert not new, f"dispatch on step classes outside facet tables: {new}"
    stale = sorted(STEP_BRANCHES_ALLOWED - set(counts))
    assert not stale, f"fixed: remove {stale} from STEP_BRANCHES_ALLOWED"


PLANTED = """
from redist.steps import ALL_STEPS, AllGather, Exchange, Permute

P2P = (Permute, Exchange)
ALL_STEPS = (AllGather, Permute)  # the one list of step classes is allowed


def exact(s):
    return type(s) is Exchange


def membership(s):
    return type(s) not in (Permute, Exchange)


def tupled(s):
    return isinstance(s, (Permute, AllGather))


def named_tuple(s):
    return isinstance(s, P2P) or type(s) in P2P


def matched(s):
    match s:
        case Permute():
            return 1


def outer(plan):
    def inner(s):
        return type(s) is Permute
    return inner


def annotated(moves: tuple[AllGather, ...], f: Callable[[Permute, int], None]) -> list[Exchange]:
    return [TABLE[type(m)](m) for m in moves]  # a facet lookup is fine
"""


def test_the_step_branch_rule_fails_on_planted_violations() -> None:
    """Each planted kind of dispatch is reported, in its function; annotations, ``ALL_STEPS`` and
    a facet lookup are not."""
    assert sorted(step_branches("planted.py", PLANTED)) == sorted([
        "planted.py:<module>: a literal of step classes",
        "planted.py:exact: type() compared with step classes",
        "planted.py:membership: type() compared with step classes",
        "planted.py:membership: a literal of step classes",
        "planted.py:tupled: isinstance on step classes",
        "planted.py:tupled: a literal of step classes",
        "planted.py:named_tuple: isinstance on step classes",
        "planted.py:named_tuple: type() compared with step classes",
        "planted.py:matched: case on a step class",
        "planted.py:outer.inner: type() compared with step classes",
    ])


def test_no_function_over_60_lines_in_the_core() -> None:
    long = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"  # type: ignore[operator]
        for p, tree in _sources(CORE) for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60  # type: ignore[operator]
    ]
    assert not long, long


COMPLEXITY_LIMIT = 15
"""The most cyclomatic complexity (McCabe, as ruff's C901 counts it) a function in ``redist`` or
``partir_core`` may have; ``pyproject.toml`` sets the same limit for ruff."""

COMPLEXITY_ALLOWED: dict[str, int] = {
    # Functions still above the limit, with their complexity today: a function may only go down
    # (and leave the list once at or below the limit; the test fails on a stale entry). None now.
}


def complex_functions(paths: list[str], limit: int = COMPLEXITY_LIMIT) -> dict[str, int]:
    """``path:function -> complexity`` of every function above ``limit`` under ``paths``, read from
    ruff's C901 with the per-file exemptions of ``pyproject.toml`` switched off."""
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run(
        [ruff, "check", "--no-cache", "--exit-zero", "--select", "C901", "--output-format", "json",
         "--config", f"lint.mccabe.max-complexity = {limit}", "--config", "lint.per-file-ignores = {}", *paths],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    found = {}
    for d in json.loads(out.stdout):
        m = re.fullmatch(r"`(.+)` is too complex \((\d+) > \d+\)", d["message"])
        assert m, d["message"]
        path = pathlib.Path(d["filename"])
        found[f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{m[1]}"] = int(m[2])
    return found


def test_no_function_above_complexity_15() -> None:
    found = complex_functions(["redist", "partir_core"])
    new = {f: c for f, c in found.items() if c > COMPLEXITY_ALLOWED.get(f, COMPLEXITY_LIMIT)}
    assert not new, f"above cyclomatic complexity {COMPLEXITY_LIMIT} (split them): {new}"
    lower = {f: (c, found.get(f)) for f, c in COMPLEXITY_ALLOWED.items() if found.get(f) != c}
    assert not lower, f"simpler now: lower or remove these COMPLEXITY_ALLOWED entries (listed, found): {lower}"


def test_the_complexity_rule_fails_on_a_planted_function(tmp_path: pathlib.Path) -> None:
    """A function of 16 branches is reported with its complexity (17); one of 14 is not."""

    def branches(n: int) -> str:
        return "\n".join(f"    if x == {i}:\n        return {i}" for i in range(n)) + "\n    return -1\n"

    planted = tmp_path / "planted.py"
    planted.write_text(f"def tangled(x):\n{branches(16)}\n\ndef plain(x):\n{branches(14)}")
    assert complex_functions([str(planted)]) == {"planted.py:tangled": 17}


def test_every_cache_is_a_registered_memo_table() -> None:
    """``functools.lru_cache`` / ``cache`` only inside ``spmd_types.memo`` (which registers them)."""
    bad = []
    for path, tree in _sources(PACKAGES):
        if path == ROOT / "spmd_types" / "memo.py":
            continue
        for node in ast.walk(tree):
            from_functools = isinstance(node, ast.ImportFrom) and node.module == "functools" and any(
                a.name in ("lru_cache", "cache") for a in node.names)
            attribute = (isinstance(node, ast.Attribute) and node.attr in ("lru_cache", "cache")
                         and isinstance(node.value, ast.Name) and node.value.id == "functools")
            if from_functools or attribute:
                bad.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert not bad, bad


def test_each_plan_hook_has_one_owner() -> None:
    """``plan(x)`` is run by ``redist.jax_reshard`` and ``str(plan)`` written by ``redist.render``,
    registered once; a second, different registration is refused instead of silently winning."""
    import redist.jax_reshard
    import redist.plan
    import redist.render
    from redist.errors import RedistError

    hooks = dict(redist.plan._HOOKS)
    assert hooks["run"].__module__ == redist.jax_reshard.__name__
    assert hooks["format"] is redist.render.format_plan
    redist.plan.register_formatter(redist.render.format_plan)  # the same owner again: a no-op
    with pytest.raises(RedistError, match=r"run hook is registered already \(by redist.jax_reshard\)"):
        redist.plan.register_runner(redist.executor.run_plan)
    assert redist.plan._HOOKS == hooks


def test_a_cleared_planner_is_cold() -> None:
    mesh = Mesh({"x": 2, "y": 4})
    plan = redistribute("f32[64@x,32@y]", "f32[64@y,32@x]", mesh)
    plan.verify()
    redistribute("f32[64@x,32]{U:y}", "f32[64@(x,y),32]", mesh)
    assert memo.entries([memo.Scope.TYPE]) > 0 and memo.entries([memo.Scope.MESH]) > 0
    clear_caches("plans")
    assert memo.entries([memo.Scope.TYPE]) == 0 and memo.entries([memo.Scope.MESH]) > 0
    redistribute("f32[64@x,32@y]", "f32[64@y,32@x]", mesh)
    assert clear_caches("all") == len(memo.tables())
    assert memo.entries() == 0
    names = {t.name for t in memo.tables()}
    for expected in ("redist.synth.driver.cached_synthesize", "redist.exchange.runnable.schedule", "proofs.link.prove_link",
                     "redist.executor.collective_group", "redist.executor._compiled", "spmd_types.layout.block_bounds"):
        assert expected in names, sorted(names)


def test_bad_cache_level_is_a_typed_error() -> None:
    from redist.errors import RedistError

    with pytest.raises(RedistError, match="level must be one of"):
        clear_caches("everything")


def _import_graph() -> dict[str, set[str]]:
    """Each of our modules -> the modules of ours it imports: inside functions and under
    ``if TYPE_CHECKING`` included (an annotation-only circle is still a circle to a reader)."""
    grimp = pytest.importorskip("grimp")
    g = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    return {m: {i for i in g.find_modules_directly_imported_by(m) if i in g.modules} for m in g.modules}


def test_no_import_circles() -> None:
    """No module imports one that (transitively) imports it back."""
    cycles = [c for c in _strongly_connected(_import_graph()) if len(c) > 1]
    assert not cycles, cycles


def test_the_circle_rule_finds_a_planted_circle() -> None:
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert sorted(c for c in _strongly_connected(planted) if len(c) > 1) == [["a", "b", "c"]]


UPPER = ("redist.exchange", "redist.exchange_a2a", "redist.render", "redist.executor", "redist.jax_reshard",
         "redist.synth", "redist.visualize")
"""The scheduler, renderer, executors and planner: what the vocabulary of steps, plans and types
must not import (they register into it instead)."""


def _reaches(edges: dict[str, set[str]], module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for m in edges.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _upper(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == u or m.startswith(u + ".") for u in UPPER)}


VOCABULARY = ("redist.steps", "redist.plan", "redist.measure", "redist.device_recv", "spmd_types.types")


@pytest.mark.parametrize("module", VOCABULARY)
def test_the_vocabulary_imports_nothing_above_it(module: str) -> None:
    """Steps, plans, their measures and the types reach none of ``UPPER``, even indirectly: what
    reads the exchange's schedule registers into their tables from ``redist.exchange_facets``."""
    edges = _import_graph()
    assert not _upper(_reaches(edges, module)), sorted(_upper(_reaches(edges, module)))



_FRESH = """
import json, sys
import redist.plan
from redist.cost import CostModel
from redist.steps import Exchange, ExchangeAllToAll
from spmd_types import Mesh, parse
out = []
for axes, src, dst, step in json.loads(sys.argv[1]):
    mesh = Mesh(axes)
    s, d = parse(src, mesh), parse(dst, mesh)
    cls = {"Exchange": Exchange, "ExchangeAllToAll": ExchangeAllToAll}[step]
    p = redist.plan.Plan.build(s, (cls(d.dims, d.sorted_unreduced() or None),), CostModel(objective="bytes"))
    out.append([[list(m) for m in p.measures], list(p.step_recv_bytes_max)])
print(json.dumps(out))
"""

FRESH_CASES = [  # (mesh, src, dst, step): (recv_bytes, rounds, collectives) and the busiest device's bytes
    (({"x": 2, "y": 4}, "f32[1024@x,1024@y]", "f32[1024@y,1024@x]", "Exchange"), (393216.0, 2, 2), 524288.0),
    (({"x": 2, "y": 3, "z": 2}, "f32[64@x,48]{U:y}", "f32[64,48@x]{U:z}", "Exchange"), (4608.0, 9, 9), 15360.0),
    (({"x": 8}, "f32[64@x,32]", "f32[64,32@x]", "ExchangeAllToAll"), (896.0, 3, 1), 896.0),
]


def test_a_fresh_interpreter_importing_only_the_plan_measures_exchanges() -> None:
    """The exchange facets register where ``redist/__init__.py`` imports ``redist.exchange_facets``,
    so a fresh interpreter that imports only ``redist.plan`` measures an exchange (plain, with
    pending sums, as one all-to-all) exactly as this process does, with the exact bytes, rounds,
    collectives and busiest-device bytes of the schedule."""
    from redist.device_recv import RECV_MAX
    from redist.measure import MEASURE
    from redist.plan import Plan
    from redist.steps import ADMIT, Exchange, ExchangeAllToAll, Permute

    for table, classes in ((MEASURE, (Permute, Exchange, ExchangeAllToAll)), (RECV_MAX, (Permute, Exchange)),
                           (ADMIT, (ExchangeAllToAll,))):
        assert {table[c].__module__ for c in classes} == {"redist.exchange_facets"}
    cases = [case for case, _, _ in FRESH_CASES]
    run = subprocess.run([sys.executable, "-c", _FRESH, json.dumps(cases)], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    fresh = json.loads(run.stdout)
    for (case, (recv, rounds, collectives), busiest), (measures, recv_max) in zip(FRESH_CASES, fresh, strict=True):
        axes, src, dst, step = case
        mesh = Mesh(axes)
        s, d = parse(src, mesh), parse(dst, mesh)
        cls = {"Exchange": Exchange, "ExchangeAllToAll": ExchangeAllToAll}[step]
        here = Plan.build(s, (cls(d.dims, d.sorted_unreduced() or None),), CostModel(objective="bytes"))
        assert measures == [list(m) for m in here.measures] and recv_max == list(here.step_recv_bytes_max)
        ((m_recv, _, m_rounds, m_collectives),) = measures
        assert (m_recv, m_rounds, m_collectives) == (recv, rounds, collectives) and recv_max == [busiest]

def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def test_the_partitioner_knows_every_communicating_step_kind() -> None:
    from partir_core.simulate import HLO_OP
    from redist import Comm

    assert {cls.kind for cls in ALL_STEPS if cls.comm is not Comm.LOCAL} <= set(HLO_OP)


def test_cached_property_computes_once_and_stores_in_the_instance() -> None:
    """``spmd_types.memo.cached_property`` (lock-free) behaves as ``functools.cached_property``:
    the first read computes and stores in ``__dict__`` (frozen dataclasses too), later reads do
    not call the function, the class attribute is the descriptor."""
    from dataclasses import dataclass

    calls = []

    @dataclass(frozen=True)
    class Box:
        n: int

        @memo.cached_property
        def double(self) -> int:
            """twice n"""
            calls.append(self.n)
            return 2 * self.n

    b = Box(3)
    assert "double" not in b.__dict__
    assert b.double == 6 and b.double == 6 and calls == [3]
    assert b.__dict__["double"] == 6
    assert isinstance(Box.double, memo.cached_property) and Box.double.__doc__ == "twice n"
    assert Box(4).double == 8 and calls == [3, 4]


def test_no_public_function_shadows_a_submodule() -> None:
    """``redist.reshard`` and ``redist.autotune`` are functions; a submodule of the same name would
    make ``import redist.reshard`` ambiguous and hide both from the API reference."""
    import importlib
    import pkgutil

    for package in ("redist", "spmd_types", "proofs"):
        pkg = importlib.import_module(package)
        modules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
        shadowed = sorted(n for n in getattr(pkg, "__all__", ()) if n in modules
                          and not isinstance(getattr(pkg, n), type(pkg)))
        assert not shadowed, f"{package}: public names {shadowed} shadow submodules of the same name"
