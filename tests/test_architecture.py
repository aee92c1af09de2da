"""The shape of the code. The layers and the absence of cycles are import-linter's contracts
(`.importlinter`, run by `make lint` and here); what it cannot say is checked from the source
with `ast`: every module sits in a layer, modules stay short, and flowers is no special case."""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "competition")
MAX_LINES = 400
CONTRACTS = ROOT / ".importlinter"
# The one place the name of the default competition may be written: pipeline/core/config.py's
# `DEFAULT_COMPETITION = "flowers"`. Everything else asks for it by that name.
DEFAULT_COMPETITION_FILE, DEFAULT_COMPETITION_NAME = "pipeline/core/config.py", "DEFAULT_COMPETITION"


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


def layers() -> list[list[str]]:
    """The main layers contract's layers, top first, each a list of its modules."""
    config = configparser.ConfigParser()
    config.read(CONTRACTS)
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [[part.strip() for part in line.split("|")] for line in lines if line.strip()]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's verdict on the packages under `root` (found first on the path)."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; c()",
         "--config", str(root / ".importlinter"), "--no-cache"],
        cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


# ----------------------------------------------------------------------------- the checks


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout


def test_every_module_sits_in_a_layer():
    """A new package or top-level module is placed in a layer, or the contracts would not see it."""
    placed = [module for layer in layers() for module in layer]
    holders = {name for name in modules() if any(m.startswith(f"{name}.") for m in placed)}
    unplaced = [
        name
        for name in modules()
        if name not in holders and not any(name == m or name.startswith(f"{m}.") for m in placed)
    ]
    assert not unplaced, f"modules in no layer of {CONTRACTS.name}: {unplaced}"
    # A package that only holds layers (pipeline, pipeline/kernels/ with its two halves) is in none
    # itself: its __init__ may hold a docstring and constants, nothing that imports, or its code
    # would go unchecked.
    for name in holders:
        init = ROOT / name.replace(".", "/") / "__init__.py"
        body = ast.parse(init.read_text()).body
        constant = (ast.Expr, ast.Assign)  # its docstring, `__version__ = "..."`
        assert all(isinstance(node, constant) and isinstance(node.value, ast.Constant) for node in body), (
            f"{init}: a package holding layers holds a docstring and constants only"
        )


IN_A_FUNCTION = "def later():\n    {}\n"
TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {}\n"


@pytest.mark.parametrize(
    ("where", "line"),
    [
        # up the layers, at module level
        ("pipeline/core/paths.py", "import pipeline.cli\n"),
        # up the layers, inside a function
        ("pipeline/formats/records.py", IN_A_FUNCTION.format("from pipeline.tasks import base")),
        # up the layers, for type checkers only
        ("competition/metric.py", TYPE_ONLY.format("import pipeline.data.splits")),
        # a stage importing a sibling stage
        ("pipeline/stages/train.py", IN_A_FUNCTION.format("from pipeline.stages import predict")),
        # a cycle inside one floor (splits imports folds)
        ("pipeline/data/folds.py", IN_A_FUNCTION.format("from pipeline.data import splits")),
    ],
)
def test_the_contracts_catch_an_import_wherever_it_is_written(tmp_path, where, line):
    """The contracts see imports inside functions and under TYPE_CHECKING: a copy of the packages
    with one forbidden import added is refused, and the clean copy passes."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONTRACTS, tmp_path / CONTRACTS.name)
    if where == "pipeline/core/paths.py":  # the clean copy once: it passes, so the refusal is the line's
        assert lint_imports(tmp_path).returncode == 0
    path = tmp_path / where
    path.write_text(path.read_text() + "\n\n" + line)
    result = lint_imports(tmp_path)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout[-3000:]


def test_no_module_is_longer_than_400_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by responsibility): {long}"


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
