"""The flows of docs/architecture.md walk one way: checked on every import in the tree.

Read with ``ast`` (nothing is imported): every ``import`` and ``from ... import`` of the four
packages, at module level and inside functions, except under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "solver", "profiling", "pdroute_core", "pdroute_client", "pdroute_proxy")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, *, top_level_only: bool) -> set[str]:
    """Project modules imported by ``tree`` (relative imports resolved against ``module``)."""
    found: set[str] = set()

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            is_scope = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if isinstance(child, ast.Import) and not (top_level_only and nested):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and not (top_level_only and nested):
                base = child.module or ""
                if child.level:
                    package = module.split(".")[: -child.level]
                    base = ".".join([*package, base] if base else package)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child, nested or is_scope)

    visit(tree, False)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _modules() -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[_module_name(path)] = ast.parse(path.read_text(), filename=str(path))
    return out


MODULES = _modules()


def _known(names: set[str]) -> set[str]:
    """Keep the names that are modules (``from x import y`` also yields ``x.y`` for a function y)."""
    return {name for name in names if name in MODULES}


def _imported_by(prefix: str, *, top_level_only: bool = False) -> dict[str, set[str]]:
    return {
        name: _known(_imports(tree, name, top_level_only=top_level_only))
        for name, tree in MODULES.items()
        if name == prefix or name.startswith(prefix + ".")
    }


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("solver", ("app", "profiling")),  # the core never reaches the edges
        # The model core ships alone in the gateway client: it imports nothing else of pdroute.
        ("pdroute_core", ("app", "solver", "profiling", "pdroute_client")),
        # The gateway client ships with pdroute_core alone (the pdroute-client distribution).
        ("pdroute_client", ("app", "solver", "profiling")),
        # The service never depends on its client.
        ("app", ("pdroute_client",)),
        ("solver", ("pdroute_client",)),
        # The proxy builds on the service's pieces; nothing below it knows it.
        ("pdroute_core", ("pdroute_proxy",)),
        ("solver", ("pdroute_proxy",)),
        ("pdroute_client", ("pdroute_proxy",)),
        ("pdroute_proxy", ("pdroute_client", "profiling")),
        ("solver.sim", ("solver.plan", "solver.plots")),
        ("solver.fit", ("pdroute_core.routing", "solver.sim", "solver.plan")),
        ("solver.fit_queue", ("pdroute_core.routing", "solver.sim", "solver.plan")),
        ("solver.params", ("pdroute_core.routing", "solver.sim", "solver.plan", "solver.fit")),
    ],
)
def test_no_module_imports_what_calls_it(importer: str, forbidden: tuple[str, ...]) -> None:
    bad = {
        module: sorted(i for i in imports if any(i == f or i.startswith(f + ".") for f in forbidden))
        for module, imports in _imported_by(importer).items()
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_service_loads_the_proxy_only_for_its_command() -> None:
    bad = {
        m: sorted(i for i in v if i.startswith("pdroute_proxy"))
        for m, v in _imported_by("app", top_level_only=True).items()
    }
    assert {m: v for m, v in bad.items() if v} == {}
    assert any(i.startswith("pdroute_proxy") for i in _imported_by("app")["app.commands.proxy"])


def test_the_service_imports_no_profiling_code_at_module_level() -> None:
    # pdroute profile imports the profiler inside its command: the service never loads torch.
    bad = {
        m: sorted(i for i in v if i.startswith("profiling"))
        for m, v in _imported_by("app", top_level_only=True).items()
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_module_level_imports_have_no_cycles() -> None:
    graph = {
        name: _known(_imports(tree, name, top_level_only=True)) - {name} for name, tree in MODULES.items()
    }
    # A package's __init__ importing its own submodules is how packages export; the rule is
    # about modules importing their callers, so edges into a package's own __init__ are dropped.
    for name, edges in graph.items():
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
                return True
            if nxt not in state and visit(nxt, [*path, nxt]):
                return True
        state[node] = 2
        return False

    for start in sorted(graph):
        if start not in state and visit(start, [start]):
            break
    assert cycle == []


def test_the_reader_sees_real_edges() -> None:
    # The checks above are only worth something if edges are found: a few known ones.
    assert "pdroute_core.routing.queue_aware" in _imported_by("solver.sim")["solver.sim.policies"]
    assert "solver.params" in _imported_by("app")["app.params_store"]
    assert any(i.startswith("profiling") for i in _imported_by("app")["app.commands.profile"])
