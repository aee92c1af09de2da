"""User pages carry no project history: no commit hashes and no issue numbers in README.md, docs/
or `make help`. History lives in CHANGELOG.md and the benchmark journal.

Pages not read: docs/BENCHMARKS.md and its journal (every figure names the commit it was measured
at), and docs/FAULTS.md and docs/SECURITY.md, tables their suites generate (`make fault-table`,
`make security-table`), each stamped with the commit it ran at: evidence, not a page to learn from.

A hex token is allowed only where it provably is not a commit: a run id's config hash (the first
8 hex digits of a SHA-256 of the config, `pipeline.core.rundir.run_id`), a Kaggle file's name
(`85f8cb619c66b863.jpg`), a digest petals prints as `sha256:...`, or part of a web address."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_READ = ("BENCHMARKS", "FAULTS.md", "SECURITY.md")
HEX = re.compile(r"(?<![\w.:/-])([0-9a-f]{7,40})(?![\w])")
ISSUE = re.compile(r"\bissues?\s+#?\d+|\bissue-\d+", re.IGNORECASE)
NOT_A_COMMIT = (
    re.compile(r"-\d+-[0-9a-f]{8}\b"),  # a run id: <recipe>-<backbone>-<size>-<config hash>
    re.compile(r"\b[0-9a-f]{7,40}\.(?:jpg|png|tfrec)\b"),  # a Kaggle file's name
    re.compile(r"sha256[:=]\s*[0-9a-f]+"),
    re.compile(r"https?://\S+"),
)


def user_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if not page.name.startswith(NOT_READ)]


def make_help() -> str:
    """What `make help` prints of the targets: each rule's `## ` text (the awk rule in the Makefile)."""
    text = (ROOT / "Makefile").read_text()
    return "\n".join(re.findall(r"^[a-zA-Z_-]+:.*## (.*)$", text, flags=re.MULTILINE))


def history_in(text: str) -> list[str]:
    """The commit-like tokens and issue numbers of a text, each with a little context."""
    cleared = text
    for allowed in NOT_A_COMMIT:
        cleared = allowed.sub(" ", cleared)
    hexes = [m for m in HEX.finditer(cleared) if re.search(r"\d", m.group(1))]
    found = [m for m in hexes if re.search(r"[a-f]", m.group(1))]  # digits alone: a number
    found += list(ISSUE.finditer(cleared))
    return [cleared[max(0, m.start() - 40) : m.end() + 20].replace("\n", " ") for m in found]


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_a_user_page_names_no_commit_and_no_issue(page):
    assert history_in(page.read_text()) == []


def test_make_help_names_no_commit_and_no_issue():
    assert make_help().count("\n") > 30 and history_in(make_help()) == []


def test_the_history_check_finds_commits_and_issues_and_spares_ids():
    page = (
        "trained at b2df06f (issue 43); see Issue #7.\n"
        "run runs/cpu-efficientnet-lite0-192-66ebcffe, the file 85f8cb619c66b863.jpg,\n"
        "sha256:857935351047, https://x.example/a-39e0f9fd8281, 1048576 bytes, a decade"
    )
    found = history_in(page)
    assert len(found) == 3 and "b2df06f" in found[0] and "issue 43" in found[1] and "Issue #7" in found[2]
