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
    assert any(i.startswith("pdroute_proxy") for i in _imported_by("app")["app.cli.commands.proxy"])


def test_the_service_imports_no_profiling_code_at_module_level() -> None:
    # pdroute profile imports the profiler inside its command: the service never loads torch.
    bad = {
        m: sorted(i for i in v if i.startswith("profiling"))
        for m, v in _imported_by("app", top_level_only=True).items()
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_service_never_imports_the_command_line() -> None:
    # The offline tools are not the service: nothing of app outside app.cli (and the
    # ``python -m app`` entry point) imports it, at module level or inside a function.
    def is_cli(name: str) -> bool:
        return name == "app.cli" or name.startswith("app.cli.")

    bad = {
        m: sorted(i for i in v if is_cli(i))
        for m, v in _imported_by("app").items()
        if not is_cli(m) and m != "app.__main__"
    }
    assert {m: v for m, v in bad.items() if v} == {}
    assert "app.cli.main" in _imported_by("app")["app.__main__"]


def test_app_keeps_few_top_level_modules() -> None:
    # app/ is read through its packages (http, routes, schemas, metrics, learners, engines, cli):
    # a new module belongs in one of them, not beside the factory and the settings.
    top_level = sorted(path.name for path in (ROOT / "app").glob("*.py"))
    assert len(top_level) <= 10, top_level


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
    assert any(i.startswith("profiling") for i in _imported_by("app")["app.cli.commands.profile"])


# NamedTuple's public methods start with an underscore so as not to clash with field names.
_PUBLIC_UNDERSCORED = frozenset(("_replace", "_asdict", "_fields", "_make", "_field_defaults"))
_CHECKED_FOR_PRIVATES = (*PACKAGES, "tests", "bench")


def _own_private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions, classes, assignments, ``self._x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def _private_reads(path: Path, root: Path = ROOT) -> list[str]:
    """``x._name`` where ``_name`` is another module's private (dunders and ``self`` aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _own_private_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in _PUBLIC_UNDERSCORED or name in own:
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_attributes() -> None:
    # A module's underscored names are its own: another module (a test included) that needs one
    # needs a public name instead.
    paths = [p for top in _CHECKED_FOR_PRIVATES for p in sorted((ROOT / top).rglob("*.py"))]
    assert [hit for path in paths for hit in _private_reads(path)] == []


def _private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``from m import _name``: another module's private name imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_module_imports_another_modules_private_names() -> None:
    # Shared test helpers live in tests/factories.py (or a conftest) under public names.
    paths = [p for top in _CHECKED_FOR_PRIVATES for p in sorted((ROOT / top).rglob("*.py"))]
    assert [hit for path in paths for hit in _private_imports(path)] == []


def _defined_names(tree: ast.AST) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef)}


def test_errors_are_imported_from_the_module_that_defines_them() -> None:
    # An exception class is named once: no module passes on an error it imports (a package's
    # __init__ exporting its own modules' names aside).
    bad = []
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module not in MODULES or node.level:
                continue
            source = MODULES[node.module]
            is_package = (ROOT / node.module.replace(".", "/") / "__init__.py").exists()
            for alias in node.names:
                is_error = alias.name.endswith("Error") or alias.name.startswith("Invalid")
                if is_error and not is_package and alias.name not in _defined_names(source):
                    bad.append(f"{name}: from {node.module} import {alias.name}")
    assert bad == []


def test_the_private_attribute_check_sees_a_read(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    own = "class A:\n    _own = 1\n\n    def f(self) -> int:\n        return A._own + self._own\n"
    module.write_text("import os\n\nX = os._exit\n\n\n" + own)
    assert _private_reads(module, tmp_path) == ["probe.py:3: os._exit"]
    module.write_text("from os import _exit, __name__\n")
    assert _private_imports(module, tmp_path) == ["probe.py:1: from os import _exit"]
