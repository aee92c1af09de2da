"""The hostile-input suite's shared parts (tests/test_hostile*.py).

Every case drives petals as a user would (a stage's command line, `make`, the real `kaggle` client
on loopback) with one crafted input, then asserts three things: the one line the user sees, the
exit code, and that nothing outside the run's own folders changed. `Tree` snapshots a folder
(paths, sizes, contents' digests) so a case can say what a stage was allowed to touch.

With PETALS_SECURITY_ROWS set to a folder, each case also writes its row there (`record`), and
`benchmarks/security_table.py` turns the rows into docs/SECURITY.md's table: the table is what
the suite saw, never written by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROWS_VARIABLE = "PETALS_SECURITY_ROWS"
ERROR_LINE = re.compile(r"^petals [a-z-]+: error: ")
MAKE_FAILED = re.compile(r"^make(\[\d+\])?: \*\*\* ")  # Make's own word on a failed recipe (a sub-make's too)
# pytest's temporary folders and the checkout, as the table shows them
TMP_PATH = re.compile(r"/tmp/pytest-of-[^/]+/pytest-[^/]+/(popen-gw\d+/)?[^/\s'\"]+")  # a test's own folder
CHECKOUT = str(Path(__file__).resolve().parents[1])


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir", "link" or "special"
    size: int
    digest: str  # a file's content sha256, a link's target


def _entry(path: Path) -> Entry:
    if path.is_symlink():
        return Entry("link", 0, os.readlink(path))
    if path.is_dir():
        return Entry("dir", 0, "")
    if not path.is_file():  # a pipe or a device: reading it would block, or never end
        return Entry("special", 0, "")
    return Entry("file", path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())


class Tree:
    """A snapshot of everything under `root` except the folders a case lets petals write."""

    def __init__(self, root: Path, allowed: tuple[Path, ...] = ()):
        self.root, self.allowed = Path(root), tuple(Path(p) for p in allowed)
        self.entries = self._take()

    def _skipped(self, path: Path) -> bool:
        return any(path == a or a in path.parents for a in self.allowed)

    def _take(self) -> dict[str, Entry]:
        found = {}
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                if not self._skipped(path):
                    found[path.relative_to(self.root).as_posix()] = _entry(path)
        return found

    def changes(self) -> list[str]:
        """What differs now from the snapshot: `+added`, `-removed`, `~changed`, sorted."""
        now = self._take()
        added = [f"+{p}" for p in now.keys() - self.entries.keys()]
        removed = [f"-{p}" for p in self.entries.keys() - now.keys()]
        changed = [f"~{p}" for p in now.keys() & self.entries.keys() if now[p] != self.entries[p]]
        return sorted(added + removed + changed)


def one_error_line(stderr: str) -> str:
    """The stage's single error line: asserted to be the only `petals ...: error:` line, with no
    traceback anywhere in the output."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if ERROR_LINE.match(line)]
    assert len(lines) == 1, stderr[-3000:]
    # nothing after it but Make's own word on the failed recipe: a message of two lines would show
    after = stderr.split(lines[0], 1)[1].splitlines()
    assert all(MAKE_FAILED.match(line) for line in after if line.strip()), stderr[-3000:]
    return lines[0]


def record(case: str, given: str, seen: str, code: int | None, left: str) -> None:
    """One row of docs/SECURITY.md's table: the case, the input, what the user saw, the exit code
    and what is left on disk. Written only when the suite is run for the table. `code` is None
    where the case calls the function that refuses (its PetalsError's line) rather than a stage:
    no exit code was seen, so the table claims none."""
    folder = os.environ.get(ROWS_VARIABLE)
    if not folder:
        return
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", case)
    seen = TMP_PATH.sub("<tmp>", seen).replace(CHECKOUT, "<checkout>")
    row = {"case": case, "input": given, "seen": seen, "exit": code, "left": left}
    Path(folder, f"{safe}.json").write_text(json.dumps(row))


# A child's peak memory, as its own: a process this test worker starts inherits the worker's own
# peak in ru_maxrss (Linux records the old address space's high-water mark at exec, and a large
# worker's is a GB), so the command runs as the child of a small Python that measures it.
_MEASURED = """import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """`args` run to its end (`kwargs` as subprocess.run's), and its peak resident memory in MB."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # outside any Tree a case snapshots
        out = Path(folder) / "peak"
        done = subprocess.run([sys.executable, "-c", _MEASURED, str(out), *args], check=False, **kwargs)
        return done, int(out.read_text()) / 1024
