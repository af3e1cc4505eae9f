"""The shape of the code that issue 10 asked for, held by tests so it cannot drift back:

* every step facet is a table with an entry for every step class (a new step that misses one
  fails here, naming the table and the class, instead of at run time);
* ``isinstance`` on step classes appears nowhere outside the tables;
* every cache is a registered ``spmd_types.memo`` table, and clearing leaves the planner cold;
* no function over 60 lines in the core packages.
"""

from __future__ import annotations

import ast
import pathlib

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
from redist import ALL_STEPS, KINDS, clear_caches, redistribute
from redist.facets import MissingFacetError, tables
from spmd_types import Mesh, memo

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("spmd_types", "redist", "proofs", "partir_core", "benchmarks", "redist_cli")
CORE = ("spmd_types", "redist", "proofs")
STEP_NAMES = {cls.__name__ for cls in ALL_STEPS} | {"Step"}


def _sources(packages: tuple[str, ...]) -> list[tuple[pathlib.Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))]


EXPECTED_TABLES = {
    "redist.measure.MEASURE", "redist.measure.PROFILE_KIND", "redist.simulate.SIMULATE", "redist.executor.LOWER", "redist.synth.FUSE",
    "redist.synth.VARIANTS", "redist.search.NEIGHBOURS", "proofs.steps_semantics.SEMANTICS",
    "proofs.measures.RECV", "proofs.soundness.CANDIDATES", "redist.render.DESCRIBE", "redist.visualize.TRAFFIC",
    "redist.steps.ADMIT", "redist.measure.WRITTEN", "redist.plan.EXCHANGES",
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


def test_no_isinstance_on_step_classes() -> None:
    """Dispatch on a step's class goes through a facet table, never an ``isinstance`` chain."""
    bad = []
    for path, tree in _sources(PACKAGES):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & STEP_NAMES:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


def test_no_function_over_60_lines_in_the_core() -> None:
    long = [
        f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"  # type: ignore[operator]
        for p, tree in _sources(CORE) for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60  # type: ignore[operator]
    ]
    assert not long, long


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
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


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
    for expected in ("redist.synth.cached_synthesize", "redist.exchange.schedule", "proofs.link.prove_link",
                     "redist.executor.collective_group", "redist.executor._compiled", "spmd_types.layout.block_bounds"):
        assert expected in names, sorted(names)


def test_bad_cache_level_is_a_typed_error() -> None:
    from redist.errors import RedistError

    with pytest.raises(RedistError, match="level must be one of"):
        clear_caches("everything")


def test_no_import_circles() -> None:
    """No module imports one that (transitively) imports it back, imports inside functions
    included; ``if TYPE_CHECKING`` imports are annotations and do not count."""
    grimp = pytest.importorskip("grimp")
    g = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    edges = {m: {i for i in g.find_modules_directly_imported_by(m) if i in g.modules} for m in g.modules}
    cycles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert not cycles, cycles


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
