"""Helpers of the fault-injection suite (tests/test_faults.py): recording its rows of the fault table,
running commands in a private mount namespace (a tiny disk, a read-only folder), and what a fault
left on disk."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

TABLE_VARIABLE = "PETALS_FAULT_TABLE"  # a folder: each fault test writes its row there (make fault-table)
LEFTOVERS = re.compile(r"\.(partial|stale)$|^partial-")


def record(fault: str, stage: str, seen: str, code: int, left: str, rerun: str, paths=()) -> None:
    """One row of the fault table, when `make fault-table` asks for them (else nothing): the
    user's line with this run's temporary paths written as <tmp>."""
    folder = os.environ.get(TABLE_VARIABLE)
    if not folder:
        return
    for path in sorted({str(p) for p in paths}, key=len, reverse=True):
        seen = seen.replace(path, "<tmp>")
    seen = re.sub(r"/tmp/[^\s:;,)]*", "<tmp>", seen)
    seen = re.sub(r"pid \d+ on \S+", "pid <pid> on <host>", seen)
    seen = re.sub(r"since [0-9: -]+\)", "since <time>)", seen)
    row = {"fault": fault, "stage": stage, "seen": seen, "code": code, "left": left, "rerun": rerun}
    name = hashlib.sha1(f"{fault}|{stage}".encode()).hexdigest()[:12]
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{name}.json").write_text(json.dumps(row) + "\n")


def leftovers(*folders: Path) -> list[str]:
    """Half-written files (`.partial`, Keras's `partial-*`, set-aside locks) under the folders."""
    found = []
    for folder in folders:
        if Path(folder).exists():
            found += [str(p) for p in Path(folder).rglob("*") if LEFTOVERS.search(p.name)]
    return found


def petals_lines(stderr: str) -> list[str]:
    """The stage's own error or stop lines."""
    return [line for line in stderr.splitlines() if line.startswith("petals ")]


def namespaces_work() -> bool:
    """Whether this machine lets an unprivileged process have its own user and mount namespace
    (a private tmpfs for the full-disk and read-only faults)."""
    if not shutil.which("unshare"):
        return False
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


def in_private_mount(script: str, timeout: float = 200) -> dict:
    """Run a Python driver `script` as root of a private user and mount namespace (it may mount a
    tmpfs; nobody else sees it) and return the JSON it prints last."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def seeds() -> list[int]:
    """The random kill moments per stage: 1 in `make test`, PETALS_FAULT_SEEDS for the table."""
    return list(range(int(os.environ.get("PETALS_FAULT_SEEDS", "1"))))


def kill_during(command: list[str], env: dict[str, str], marker: str, delay: float) -> bool:
    """Start `command`; `delay` seconds after a line of its stderr holds `marker` (its work has
    begun), kill -9 it, as a lost machine would. Whether it was still running then."""
    proc = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    for line in proc.stderr:
        if marker in line:
            break
    time.sleep(delay)
    running = proc.poll() is None
    proc.kill()
    proc.wait()
    proc.stderr.close()
    return running
