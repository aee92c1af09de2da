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


def listed_files(root: Path, folders: tuple[str, ...], tracked: bool = True) -> list[str] | None:
    """The files under `folders` of the checkout at `root` that git tracks (with `tracked=False`,
    the ones it does not, ignored ones included), as sorted POSIX paths relative to `root`; None
    when `root` is not the top of a git checkout (an unpacked sdist, a Kaggle kernel, no git)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True, cwd=root
        ).stdout.strip()
        if Path(top).resolve() != Path(root).resolve():
            return None  # a copy inside another checkout: git knows nothing of these files
        which = [] if tracked else ["--others"]
        done = subprocess.run(
            ["git", "ls-files", "-z", *which, "--", *folders], capture_output=True, check=True, cwd=root
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted(name for name in done.stdout.decode().split("\0") if name)
