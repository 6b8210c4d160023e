"""Imports flow one way: no module of annotated/ imports one that imports it back, directly or
around a longer loop. Guards wrap taught code from above; what two modules share moves down, to
one that both import.

The imports are read from the source with ``ast``, so an import inside a function counts as much
as one at the top: placed there, it hides a cycle from Python at load time, not from a reader.
"""

import ast
import math
from collections import deque
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "annotated"


def module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a folder), by dotted name: ``annotated.support.beams``, and
    ``annotated.support`` for its ``__init__.py``."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The modules of ``modules`` that module ``name`` imports anywhere in its source (at the top,
    in a function, under ``if TYPE_CHECKING``, by ``importlib.import_module("...")``), each with
    the first line that imports it. ``from package import module`` imports the module;
    ``from module import name``, the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x, from ..y import z
                parts = package.split(".")
                source = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            targets = [node.args[0].value]
        else:
            continue
        for target in targets:
            if target in modules and target != name:
                found[target] = min(found.get(target, math.inf), node.lineno)
    return found


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    modules = module_names(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle (its modules in import order, the first repeated at the end) for every
    group of modules that reach each other by imports (Tarjan's strongly connected components)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while v not in group:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for group in groups:
        start = min(group)
        parent, queue = {start: None}, deque([start])
        while queue:  # breadth first inside the group: the shortest way from start back to start
            v = queue.popleft()
            if start in graph[v]:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                found.append(path[::-1] + [start])
                break
            for w in sorted(graph[v]):
                if w in group and w not in parent:
                    parent[w] = v
                    queue.append(w)
    return sorted(found)


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join([cycle[0]] + [f"{b} (line {graph[a][b]} of {a})" for a, b in zip(cycle, cycle[1:])])


def test_no_two_modules_of_annotated_import_each_other_nor_form_a_longer_cycle():
    graph = import_graph(PACKAGE)
    found = cycles(graph)
    assert not found, (
        "modules of annotated/ that import each other:\n  " + "\n  ".join(describe(c, graph) for c in found)
        + "\nMake the imports go one way: guards wrap taught code from above; the piece both need moves down "
        "(into the lower module or a small new one both import), or is handed in as an argument."
    )


def test_the_reader_sees_imports_at_the_top_and_inside_functions():
    """Not a vacuous pass: imports known to be there are found, one of them inside a function."""
    graph = import_graph(PACKAGE)
    assert "annotated.support.beams" in graph["annotated.beam_search"]  # at the top
    assert "annotated.support.translation_guards" in graph["annotated.data"]  # `from package import module`
    assert "annotated.support.download" in graph["annotated.support.translation_guards"]  # inside a function
    assert len(graph) > 50


def test_the_check_finds_a_pair_and_a_longer_cycle_of_imports_inside_functions(tmp_path):
    package = tmp_path / "pkg"
    sources = {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg.sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "from pkg import c\n",
        "c.py": "import pkg.a as a\n",
        "d.py": "from . import e\n",
        "e.py": "def g():\n    import importlib\n    return importlib.import_module('pkg.d')\n",
        "f.py": "from pkg.d import g\n",  # imports into a cycle without being part of one
    }
    for name, text in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    graph = import_graph(package)
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"], ["pkg.d", "pkg.e", "pkg.d"]]
    assert describe(["pkg.d", "pkg.e", "pkg.d"], graph) == "pkg.d -> pkg.e (line 1 of pkg.d) -> pkg.d (line 3 of pkg.e)"
