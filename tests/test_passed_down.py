"""The competition is passed down, not looked up by name (issue 67, item 5): a stage resolves it once
(`pipeline.tasks.competitions.load_competition`) and the layers below take the Competition, its spec
or its task as an argument. Checked from the source with `ast`: `load_spec` and `load_competition`
are named only in the modules below, each with its reason."""

from __future__ import annotations

import ast

import pytest

from tests.test_architecture import ROOT, modules  # every module of pipeline/ and competition/

LOOKUPS = frozenset({"load_spec", "load_competition"})
# Where a competition may be looked up by its name: a module, or a package and all its modules.
ALLOWED = {
    "pipeline.stages": "each stage resolves its competition once, from its options or its run",
    "pipeline.api": "the Python entry point: a stage's caller, above the stages",
    "pipeline.cli": "the command line's entry point, above the stages",
    "pipeline.kernels.script": "the kernel's own driver on Kaggle: an entry point above the stages",
    "pipeline.tasks.competitions": "where a name becomes a Competition: load_competition itself",
    "pipeline.tasks.recipe_config": "the config's resolver: the competition --set names, before any config",
    "competition": "the spec package: load_spec's definition and its export",
}
# Each embedded dataset is drawn from its own competition's file (a module-level constant).
SYNTHETIC = ("pipeline.data.synthetic_", "each embedded dataset reads its own competition's spec")


def allowed(module: str) -> bool:
    return module.startswith(SYNTHETIC[0]) or any(
        module == place or module.startswith(f"{place}.") for place in ALLOWED
    )


def lookups(source: str) -> list[int]:
    """The lines that name a lookup: a call, a reference (passed on, aliased) or an import."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            given = {alias.name for alias in node.names}
        else:  # a name (`load_spec(...)`) or an attribute (`competitions.load_competition`)
            given = {getattr(node, "id", None), getattr(node, "attr", None)}
        if given & LOOKUPS:
            lines.append(node.lineno)
    return sorted(set(lines))


def calls(source: str) -> int:
    """How many times the source calls a lookup (the counts issue 67 quotes)."""
    return sum(
        isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) in LOOKUPS or getattr(node.func, "attr", None) in LOOKUPS)
        for node in ast.walk(ast.parse(source))
    )


def test_a_competition_is_looked_up_by_name_only_where_it_is_resolved():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in modules().items()
        if not allowed(module)
        for line in lookups(path.read_text())
    ]
    assert not found, (
        f"a competition looked up by name below the stages: {found}; take the Competition (or its spec "
        "or task) as an argument from the stage that resolved it"
    )


LOOKED_UP = (
    "from competition import load_spec\n\ndef later(config):\n    return load_spec(config.competition)\n",
    "def later(config):\n    from pipeline.tasks import competitions\n"
    "    return competitions.load_competition(config.competition).spec\n",
    "def later(runs, resolve=None):\n    from pipeline.tasks.competitions import load_competition\n"
    "    return resolve or load_competition\n",
)


@pytest.mark.parametrize(
    "module", ["pipeline.modeling.inference", "pipeline.cv.merge", "pipeline.runs.report"]
)
@pytest.mark.parametrize("added", LOOKED_UP, ids=["a call", "through its module", "passed on"])
def test_a_lookup_added_below_the_stages_is_caught(module, added):
    """A lookup written into modeling/, cv/ or runs/ (a call, through its module, or passed on) is
    found, and the module as it is has none: the check is the added lines'."""
    source = modules()[module].read_text()
    assert not allowed(module) and not lookups(source)
    assert lookups(source + "\n\n" + added)


def test_each_allowed_place_exists_and_says_why():
    names = modules()
    for place, reason in ALLOWED.items():
        assert any(n == place or n.startswith(f"{place}.") for n in names), place
        assert reason and len(reason) <= 100
    assert any(n.startswith(SYNTHETIC[0]) for n in names)
