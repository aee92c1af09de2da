"""The suite's tiers: every test lands in exactly one tier CI runs, so none is dropped.

A tier is a `test*` target of the Makefile and the `-m` expression it hands pytest; CI is
`.ci/run`. A tier CI does not run (the inner loop, `make test-fast`) must run only tests of
`make test`. The markers are read from this session's own collection when it collected every test file,
else from a collection of the whole suite in a fresh process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from _pytest.mark.expression import Expression  # pytest's own reading of `-m`

from tests.conftest import COLLECTED_MARKERS, MARKERS_FILE, REPO

# A target named test* and its recipe; each pytest line of it and its marker expression.
TARGET = re.compile(r"^(test[\w-]*):[^\n]*\n((?:\t[^\n]*\n)*)", re.M)
PYTEST_MARKS = re.compile(r'-m pytest [^\n]*?-m ("[^"]*"|\w+)')


def make_tiers() -> dict[str, str]:
    """Each tier's target and the tests it runs, as a marker expression: its pytest lines' own,
    joined by `or` (`make test-heavy` runs its tests in two passes)."""
    tiers = {}
    for name, recipe in TARGET.findall((REPO / "Makefile").read_text()):
        passes = [expr.strip('"') for expr in PYTEST_MARKS.findall(recipe)]
        if passes:
            tiers[name] = " or ".join(f"({expr})" for expr in passes)
    return tiers


def ci_targets() -> set[str]:
    """The make targets .ci/run runs."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [shlex.split(line)[1:] for line in lines if line.startswith("make ")]
    return {word for command in commands for word in command if "=" not in word}


def in_tier(expression: str, markers: frozenset[str]) -> bool:
    return Expression.compile(expression).evaluate(lambda name, **_: name in markers)


def misplaced(collected: dict[str, frozenset[str]], tiers: dict[str, str]) -> dict[str, list[str]]:
    """The tests that are in no tier or in more than one, with the tiers they are in."""
    placed = {
        test: [tier for tier, expr in tiers.items() if in_tier(expr, marks)]
        for test, marks in collected.items()
    }
    return {test: found for test, found in placed.items() if len(found) != 1}


@pytest.fixture(scope="module")
def collected(request, tmp_path_factory) -> dict[str, frozenset[str]]:
    """Every test of the suite and its markers."""
    seen = request.config.stash.get(COLLECTED_MARKERS, {})
    files = {path.relative_to(REPO).as_posix() for path in (REPO / "tests").glob("test_*.py")}
    if files <= {test.split("::")[0] for test in seen}:
        return seen
    out = tmp_path_factory.mktemp("markers") / "markers.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=REPO,
        env={**os.environ, MARKERS_FILE: str(out)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {test: frozenset(marks) for test, marks in json.loads(out.read_text()).items()}


def test_every_test_is_in_exactly_one_tier_ci_runs(collected):
    tiers = {name: expr for name, expr in make_tiers().items() if name in ci_targets()}
    assert {"test", "test-thorough", "test-heavy"} <= set(tiers)
    assert len(collected) > 1000  # the whole suite, not a part of it
    wrong = misplaced(collected, tiers)
    assert not wrong, f"{len(wrong)} tests not in exactly one tier CI runs, e.g. {sorted(wrong.items())[:5]}"


def test_a_tier_ci_does_not_run_holds_only_tests_of_the_readmes_tier(collected):
    tiers, ci = make_tiers(), ci_targets()
    assert "test" in ci and "test-fast" in tiers
    for name in set(tiers) - ci:
        outside = [
            t
            for t, marks in collected.items()
            if in_tier(tiers[name], marks) and not in_tier(tiers["test"], marks)
        ]
        assert not outside, f"make {name} runs tests `make test` does not: {outside[:5]}"
    fast = [t for t, marks in collected.items() if in_tier(tiers["test-fast"], marks)]
    assert fast and all("slow" not in collected[t] for t in fast)  # the inner loop trains nothing


def test_only_heavy_tests_are_marked_to_run_alone_and_the_heavy_tier_runs_them_all(collected):
    alone = [t for t, marks in collected.items() if "alone" in marks]
    assert alone and not [t for t in alone if "heavy" not in collected[t]]
    heavy = make_tiers()["test-heavy"]
    assert all(in_tier(heavy, collected[t]) for t in alone)
    assert not in_tier(heavy, frozenset({"alone"}))  # `alone` alone puts no test in the tier


def test_a_test_in_no_tier_or_in_two_is_named():
    tiers = {"test": "not heavy and not thorough", "test-thorough": "thorough", "test-heavy": "heavy"}
    collected = {"a": frozenset({"slow"}), "b": frozenset({"thorough", "heavy"}), "c": frozenset({"heavy"})}
    assert misplaced(collected, tiers) == {"b": ["test-thorough", "test-heavy"]}
    assert misplaced(collected, {"test": "not heavy"}) == {"b": [], "c": []}
