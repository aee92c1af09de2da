"""The shape of the code, checked from its source with `ast` (nothing is imported): modules stay
short, imports run one way, flowers is no special case, and stages do not import each other."""

from __future__ import annotations

import ast
from collections import deque
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "competition")
MAX_LINES = 400
STAGES = "pipeline.stages"
# The one place the name of the default competition may be written: competition/spec.py's
# `DEFAULT_COMPETITION = "flowers"`. Everything else asks for it by that name.
DEFAULT_COMPETITION_FILE, DEFAULT_COMPETITION_NAME = "competition/spec.py", "DEFAULT_COMPETITION"


@cache
def modules() -> dict[str, Path]:
    """Every module of the checked packages, by dotted name (a package by its `__init__.py`)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


@cache
def tree(name: str) -> ast.Module:
    path = modules()[name]
    return ast.parse(path.read_text(), filename=str(path))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST):
    """Every import statement under `node`, in functions too, except those under `if TYPE_CHECKING:`
    (they never run)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes(ast.Module(body=[other], type_ignores=[]))
            continue
        yield from _import_nodes(child)


def _known(dotted: str, known: set[str]) -> str | None:
    """`dotted` if it is a module, else its longest prefix that is one; None outside the packages."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def imported_modules(name: str, module: ast.Module, known: set[str]) -> set[str]:
    """The checked modules `name` imports: `from a.b import c` is a.b.c when that is a module,
    else a.b; relative imports are resolved from `name`'s package."""
    is_package = modules().get(name, Path()).name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _import_nodes(module):
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
            names: list[str] = []
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            bases, names = [base], [alias.name for alias in node.names]
        for base in bases:
            for target in [f"{base}.{n}" for n in names] or [base]:
                found = _known(target, known)
                if found is not None and found != name:
                    targets.add(found)
    return targets


@cache
def import_graph() -> dict[str, frozenset[str]]:
    known = set(modules())
    return {name: frozenset(imported_modules(name, tree(name), known)) for name in sorted(known)}


def cycles(graph: dict[str, frozenset[str]]) -> list[tuple[list[str], list[str]]]:
    """Each strongly connected group of modules (every one reaches every other), with one shortest
    cycle through it as a path that ends where it starts: (cycle, group). Tarjan's algorithm finds
    the groups, a breadth-first search the cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        start, members = group[0], set(group)
        previous: dict[str, str] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if start in graph[node]:
                path = [start]
                while node != start:
                    path.append(node)
                    node = previous[node]
                found.append(([start, *reversed(path[1:]), start], group))
                break
            for target in sorted(graph[node] & members):
                if target not in previous and target != start:
                    previous[target] = node
                    queue.append(target)
    return found


# ----------------------------------------------------------------------------- the checks


def test_no_module_is_longer_than_400_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by responsibility): {long}"


def test_no_modules_import_each_other_in_a_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (functions' imports included):\n" + "\n".join(
        f"{' -> '.join(cycle)}  (modules in this cycle group: {', '.join(group)})" for cycle, group in found
    )


def test_flowers_is_named_only_where_the_default_competition_is_defined():
    found = []
    for name, path in modules().items():
        relative = path.relative_to(ROOT).as_posix()
        allowed: set[int] = set()
        for node in ast.walk(tree(name)):
            if (
                relative == DEFAULT_COMPETITION_FILE
                and isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == DEFAULT_COMPETITION_NAME for t in node.targets)
            ):
                allowed.add(id(node.value))
        found += [
            f"{relative}:{node.lineno}"
            for node in ast.walk(tree(name))
            if isinstance(node, ast.Constant) and node.value == "flowers" and id(node) not in allowed
        ]
    assert not found, (
        f'"flowers" written outside {DEFAULT_COMPETITION_FILE}\'s {DEFAULT_COMPETITION_NAME}: {found}'
    )


def test_stages_do_not_import_each_other():
    graph = import_graph()
    found = [
        f"{name} imports {target}"
        for name in graph
        if name.startswith(f"{STAGES}.")
        for target in sorted(graph[name])
        if target.startswith(f"{STAGES}.")
    ]
    assert not found, "stages importing stages (share the code from pipeline/ instead):\n" + "\n".join(found)


# ----------------------------------------------------------------------------- the checks' own parts


def test_the_import_reader_resolves_names_skips_type_checking_and_sees_functions():
    source = """
from typing import TYPE_CHECKING
from pipeline.core import config, errors as e
from . import sibling
from .sibling import helper
if TYPE_CHECKING:
    from pipeline.stages import train
else:
    import pipeline.stages.predict
def later():
    from pipeline.stages.evaluate import main
"""
    known = {
        "pipeline.core", "pipeline.core.config", "pipeline.core.errors", "pipeline.stages",
        "pipeline.stages.train", "pipeline.stages.predict", "pipeline.stages.evaluate",
        "pipeline.stages.sibling", "pipeline.stages.me",
    }  # fmt: skip
    assert imported_modules("pipeline.stages.me", ast.parse(source), known) == {
        "pipeline.core.config", "pipeline.core.errors", "pipeline.stages.sibling",
        "pipeline.stages.predict", "pipeline.stages.evaluate",
    }  # fmt: skip
    assert "pipeline.core.overrides" in import_graph()["pipeline.core.config"]  # a real edge is found


def test_the_cycle_finder_names_the_modules_of_each_cycle():
    edges = {"a": "bx", "b": "c", "c": "ad", "d": "", "e": "f", "f": "e", "x": "a"}
    graph = {name: frozenset(targets) for name, targets in edges.items()}
    assert cycles(graph) == [
        (["a", "x", "a"], ["a", "b", "c", "x"]),
        (["e", "f", "e"], ["e", "f"]),
    ]  # the shortest
    assert cycles({"a": frozenset({"b"}), "b": frozenset()}) == []
