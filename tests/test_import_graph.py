"""The import graph of src/: no cycle at import time, and what is left of the others, listed.

Read from the source with ``ast`` (nothing is imported). An import is made at import time (module
level), for type checking only (under ``if TYPE_CHECKING:``) or lazily (inside a function). The
cycles and the imports of another module's private names that remain are listed below, each
with why: the runtime redesign of issue 23 takes them out, and a new one fails here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

SRC = Path(__file__).resolve().parents[1] / "src"

When = Literal["import", "typing", "lazy"]

KNOWN_CYCLES: dict[frozenset[str], str] = {
    frozenset({"handoff_builder._host", "handoff_builder._workflow"}): (
        "typing only: HandoffWorkflow annotates the GroupChatHost it specialises"
    ),
    frozenset({"handoff_builder._hosting", "handoff_builder._hosted_agent"}): (
        "typing only: the hosted agent annotates the ConversationHost it serves"
    ),
}
"""The cycles left once typing-only and lazy imports count; none is made at import time."""


class Import(NamedTuple):
    """One import of a module of the package by another."""

    importer: str
    imported: str
    names: tuple[str, ...]
    when: When


def modules_in(src: Path) -> dict[str, Path]:
    """Every module under ``src``, by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _visit(
    nodes: Iterable[ast.AST], when: When
) -> Iterator[tuple[ast.Import | ast.ImportFrom, When]]:
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, when
        elif isinstance(node, ast.If) and _type_checking(node.test):
            yield from _visit(node.body, "typing")
            yield from _visit(node.orelse, when)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _visit(ast.iter_child_nodes(node), "lazy" if when == "import" else when)
        else:
            yield from _visit(ast.iter_child_nodes(node), when)


def imports_in(src: Path) -> list[Import]:
    """Every import of one module of ``src`` by another."""
    modules = modules_in(src)
    found: list[Import] = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node, when in _visit([ast.parse(path.read_text(encoding="utf-8"))], "import"):
            targets: list[tuple[str, tuple[str, ...]]]
            if isinstance(node, ast.Import):
                targets = [(alias.name, ()) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                names = tuple(alias.name for alias in node.names)
                submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in modules]
                targets = [(name, ()) for name in submodules]
                rest = tuple(name for name in names if f"{base}.{name}" not in modules)
                if rest:
                    targets.append((base, rest))
            found.extend(
                Import(module, target, names, when)
                for target, names in targets
                if target in modules and target != module
            )
    return found


def cycles(imports: Iterable[Import]) -> set[frozenset[str]]:
    """The import cycles: each largest set of modules that reach one another by imports."""
    graph: dict[str, set[str]] = {}
    for edge in imports:
        graph.setdefault(edge.importer, set()).add(edge.imported)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for other in graph.get(todo.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return seen

    reaches = {module: reach(module) for module in graph}
    return {
        frozenset({module, *(other for other in found if module in reaches.get(other, ()))})
        for module, found in reaches.items()
        if module in found
    }


def private_imports(imports: Iterable[Import]) -> set[tuple[str, str, str]]:
    """(importer, module, name) for each name starting with ``_`` taken from another module."""
    return {
        (edge.importer, edge.imported, name)
        for edge in imports
        for name in edge.names
        if name.startswith("_") and not name.startswith("__")
    }


IMPORTS = imports_in(SRC)


def test_no_cycle_is_made_at_import_time() -> None:
    assert cycles(edge for edge in IMPORTS if edge.when == "import") == set()


def test_no_cycle_that_is_not_typing_only() -> None:
    """Imports made when the code runs (at import time or inside a function) form no cycle."""
    assert cycles(edge for edge in IMPORTS if edge.when != "typing") == set()


def test_no_cycle_but_the_known_ones_even_counting_typing_and_lazy_imports() -> None:
    assert cycles(IMPORTS) == set(KNOWN_CYCLES)


def test_the_manager_contract_imports_nothing_of_the_handoff_manager() -> None:
    """GroupChatManager and ManagerSettings stand alone: HandoffManager is one manager of many."""
    assert [
        edge
        for edge in IMPORTS
        if edge.importer == "handoff_builder._manager"
        and edge.imported == "handoff_builder._handoff_manager"
    ] == []


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(IMPORTS) == set()


def test_the_graph_is_read_as_python_reads_it() -> None:
    """Known edges of each kind, so that an empty answer above is not a blind reader's."""
    edges = {(e.importer, e.imported, e.when) for e in IMPORTS}
    assert ("handoff_builder._host", "handoff_builder._manager", "import") in edges
    assert ("handoff_builder._workflow", "handoff_builder._host", "typing") in edges
    assert ("handoff_builder._hosting", "handoff_builder._hosted_agent", "lazy") in edges
    assert ("handoff_builder", "handoff_builder.exceptions", "import") in edges  # from . import
    assert (
        "handoff_builder.temporal._host_settings",
        "handoff_builder._hosting",
        "import",
    ) in edges


def write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_cycle_and_a_private_import_are_found(tmp_path: Path) -> None:
    src = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import _helper\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .c import C\n"
                "def f():\n    from . import a\n"
            ),
            "pkg/c.py": "from pkg.a import thing\n",
        },
    )
    imports = imports_in(src)
    assert sorted(imports) == [
        Import("pkg.a", "pkg.b", ("_helper",), "import"),
        Import("pkg.b", "pkg.a", (), "lazy"),
        Import("pkg.b", "pkg.c", ("C",), "typing"),
        Import("pkg.c", "pkg.a", ("thing",), "import"),
    ]
    assert cycles(imports) == {frozenset({"pkg.a", "pkg.b", "pkg.c"})}
    assert cycles(e for e in imports if e.when == "import") == set()
    assert private_imports(imports) == {("pkg.a", "pkg.b", "_helper")}
