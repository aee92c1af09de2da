"""The table in docs/SECURITY.md, produced by the hostile-input suite, never written by hand.

Runs tests/test_hostile*.py with PETALS_SECURITY_ROWS set (each case writes its row as it passes:
the input, the one line the user sees, the exit code, what is left on disk), then replaces the
part of docs/SECURITY.md between the two markers with the rows as a table. A failing case fails
the command and leaves the docs as they were.

    make security-table
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from fault_table import cell, git_commit, suite_rows  # noqa: E402

BEGIN, END = "<!-- security-table: begin -->", "<!-- security-table: end -->"


def render(rows: list[dict], commit: str, summary: str) -> str:
    lines = [
        BEGIN,
        f"Commit {commit}, {time.strftime('%Y-%m-%d')}, `make security-table`: {summary}.",
        "",
        "| case | input | what the user sees | exit | left on disk |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: r["case"]):
        seen = cell(r["seen"]) if r["seen"].startswith("(") else f"`{cell(r['seen'])}`"
        code = "(a call)" if r["exit"] is None else str(r["exit"])  # the function's line, no process
        cells = (cell(r["case"]), cell(r["input"]), seen, code, cell(r["left"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, END])


def splice(document: str, table: str) -> str:
    """`document` with the text between the markers (markers included) replaced by `table`."""
    if BEGIN not in document or END not in document:
        return document.rstrip("\n") + "\n\n" + table + "\n"
    head, rest = document.split(BEGIN, 1)
    return head + table + rest.split(END, 1)[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "SECURITY.md")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers")
    args = parser.parse_args()
    tests = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_hostile*.py"))
    found = suite_rows(tests, "PETALS_SECURITY_ROWS", args.workers, "security-table")
    if found is None:
        return 1
    rows, summary = found
    document = args.out.read_text() if args.out.is_file() else ""
    tmp = args.out.with_name(args.out.name + ".partial")
    tmp.write_text(splice(document, render(rows, git_commit(), summary)))
    tmp.replace(args.out)
    print(f"security-table: {len(rows)} rows -> {args.out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
