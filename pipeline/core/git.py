"""The checkout's commit, recorded with every run and kernel."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit() -> str:
    """The checkout's commit, `+dirty` when it has uncommitted changes, or `unknown` outside git."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        )
        return done.stdout.strip()

    try:
        return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
