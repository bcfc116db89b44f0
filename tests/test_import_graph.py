"""The core's module graph, read from the source (every import statement, those inside
functions included; type-only imports under ``TYPE_CHECKING`` left out), has no loop that
crosses a package boundary, and keeps the boundaries ARCHITECTURE.md draws: the core never
imports a plugin; the tuning database never reaches the JIT, the cost model, the runtime,
the kit or the census; the kit never reaches the census; the records in ``types`` reach no
database, kit or runtime.

A loop inside one package (two database modules that call each other) is that package's
business; a loop across packages means a lower layer imports a higher one, which imports
inside functions would only hide. Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so an
import of a module counts as an import of its packages too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "oasr_core"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of ``oasr_core``: dotted name -> (file, is a package)."""
    found = {}
    for path in CORE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


MODULES = _modules()


def _type_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom | ast.Call]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_only(child):
            for other in child.orelse:
                yield from _imports(other)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
              and child.func.attr == "import_module" and child.args
              and isinstance(child.args[0], ast.Constant)):
            yield child  # importlib.import_module("oasr_core.x"), a literal name
        yield from _imports(child)


def _targets(module: str, package: bool, node: ast.AST) -> list[str]:
    """The modules ``node`` imports, as dotted names (a name imported from a package is its
    submodule when there is one)."""
    if isinstance(node, ast.Call):
        return [node.args[0].value]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if package else module.split(".")[:-1]
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _graph() -> dict[str, set[str]]:
    """module -> the modules (of oasr_core, or a plugin's top-level package) it imports."""
    graph: dict[str, set[str]] = {}
    for module, (path, package) in MODULES.items():
        edges = graph.setdefault(module, set())
        for node in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(module, package, node):
                if target.startswith("oasr_") and not target.startswith("oasr_core"):
                    edges.add(target)  # a plugin: see test_the_core_never_imports_a_plugin
                    continue
                if not target.startswith("oasr_core"):
                    continue
                while target not in MODULES:
                    target = target.rpartition(".")[0]
                parts = target.split(".")
                edges.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        edges.discard(module)
    return graph


GRAPH = _graph()


def _package(module: str) -> str:
    return module if MODULES[module][1] else module.rpartition(".")[0]


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    loops.append(sorted(members))
    return loops


def _reach(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in GRAPH.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _path(source: str, target_prefix: str) -> list[str]:
    """One import chain from ``source`` to a module under ``target_prefix`` (for messages)."""
    parents = {source: None}
    todo = [source]
    while todo:
        node = todo.pop(0)
        if node == target_prefix or node.startswith(target_prefix + "."):
            chain = []
            while node is not None:
                chain.append(node)
                node = parents[node]
            return chain[::-1]
        for nxt in sorted(GRAPH.get(node, ())):
            if nxt not in parents:
                parents[nxt] = node
                todo.append(nxt)
    return []


def test_the_reader_sees_function_level_and_package_imports():
    # the graph this suite checks is the real one: an import inside a function counts, and
    # importing a submodule counts as importing its package
    assert "oasr_core.runtime" in GRAPH["oasr_core.commands.state"]
    assert {"oasr_core.database", "oasr_core.database.codec"} <= GRAPH["oasr_core.arch"]


def test_no_import_loop_crosses_a_package():
    crossing = [loop for loop in _loops(GRAPH) if len({_package(m) for m in loop}) > 1]
    assert crossing == [], "import loops across packages: " + "; ".join(
        " <-> ".join(loop) for loop in crossing)


def test_the_core_never_imports_a_plugin():
    plugins = sorted((module, target) for module, targets in GRAPH.items() for target in targets
                     if not target.startswith("oasr_core"))
    assert plugins == []


@pytest.mark.parametrize(("lower", "higher"), [
    ("oasr_core.database", "oasr_core.jit"),
    ("oasr_core.database", "oasr_core.cost_model"),
    ("oasr_core.database", "oasr_core.runtime"),
    ("oasr_core.database", "oasr_core.selection"),
    ("oasr_core.database", "oasr_core.kit"),
    ("oasr_core.database", "oasr_core.census"),
    ("oasr_core.kit", "oasr_core.census"),
    ("oasr_core.types", "oasr_core.database"),
    ("oasr_core.types", "oasr_core.kit"),
    ("oasr_core.types", "oasr_core.runtime"),
    ("oasr_core.epoch", "oasr_core.runtime"),
    ("oasr_core.layers", "oasr_core.census"),
    ("oasr_core.layers", "oasr_core.kit"),
])
def test_a_lower_layer_never_reaches_a_higher_one(lower, higher):
    sources = [m for m in MODULES if m == lower or m.startswith(lower + ".")]
    for source in sources:
        chain = _path(source, higher)
        assert chain == [], f"{lower} must never reach {higher}: " + " -> ".join(chain)
