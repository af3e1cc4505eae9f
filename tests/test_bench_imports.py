"""Every module of ``benchmarks/`` names only modules and names that exist in this checkout.

Why: suites and studies run as ``python -m benchmarks.X`` and nothing else imports most of them, so
a module moved or renamed elsewhere breaks them silently; this reads their imports without running
them (importing a suite would set its XLA flags for the whole test process).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("benchmarks", "redist", "redist_cli", "spmd_types", "proofs", "partir_core")


def _module_file(name: str) -> pathlib.Path | None:
    base = ROOT.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _top_level_names(path: pathlib.Path) -> set[str]:
    """Names a module binds at its top level (definitions, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions count: read them too
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    names.add(sub.name)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
                elif isinstance(sub, ast.Assign):
                    names |= {n.id for t in sub.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _project_imports(path: pathlib.Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every import of a project module in ``path`` (``name`` None for ``import m``)."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in PACKAGES:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] in PACKAGES]
    return out


def _unresolved(path: pathlib.Path) -> list[str]:
    bad = []
    for module, name in _project_imports(path):
        target = _module_file(module)
        if target is None:
            bad.append(f"{module} (no such module)")
        elif name is not None and name != "*" and _module_file(f"{module}.{name}") is None \
                and name not in _top_level_names(target):
            bad.append(f"{module}.{name} (no such name)")
    return bad


BENCH_FILES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").rglob("*.py"))


@pytest.mark.parametrize("rel", BENCH_FILES)
def test_benchmark_module_imports_resolve(rel: str) -> None:
    assert not _unresolved(ROOT / rel), f"{rel} imports what does not exist: {_unresolved(ROOT / rel)}"


def test_the_check_catches_a_moved_module(tmp_path: pathlib.Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from benchmarks.plan_ab import parse_steps\nfrom benchmarks.harness import no_such_name\n")
    assert _unresolved(planted) == ["benchmarks.plan_ab (no such module)", "benchmarks.harness.no_such_name (no such name)"]
