"""Where Kaggle mounts a kernel's inputs: found, not assumed.

Kaggle has moved its mounts and no official page states them (../shared/facts/tpus-in-2026.md):
a competition attached to a kernel was at `/kaggle/input/<slug>` and is at
`/kaggle/input/competitions/<slug>` in 2026; datasets are seen at `/kaggle/input/<slug>` and
`/kaggle/input/datasets/<owner>/<slug>`; models at `/kaggle/input/models/<owner>/<model>/...`;
earlier kernels' outputs at `/kaggle/input/notebooks/<owner>/<slug>`. So each lookup asks
`kagglehub` first where it can answer (inside a kernel, when importable), then tries the known
layouts, then searches the input folder for what the source must hold. Every answer says how it
was found, so a kernel's log tells which layout Kaggle used that day.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# PETALS_KAGGLE_ROOT moves it, as it moves the kernel's inputs and outputs (make kernel-emulate): a
# preset named by its handle is then found in the emulated /kaggle, not looked for in the real one.
KAGGLE_INPUT = Path(os.environ.get("PETALS_KAGGLE_ROOT", "/kaggle")) / "input"
SEARCH_DEPTH = 6  # models/<owner>/<model>/<framework>/<variation>/<version>: the deepest layout seen
KIND_FOLDERS = {
    "competition": "competitions",
    "dataset": "datasets",
    "model": "models",
    "notebook": "notebooks",
}
KAGGLEHUB_CALLS = {
    "competition": "competition_download",
    "dataset": "dataset_download",
    "model": "model_download",
}


@dataclass(frozen=True)
class Found:
    path: Path
    how: str  # "kagglehub", "the layout competitions/<slug>", "a search for ..."

    def __str__(self) -> str:
        return f"{self.path} ({self.how})"


def in_kernel() -> bool:
    """Kaggle sets KAGGLE_KERNEL_RUN_TYPE in every kernel session (kagglehub reads the same)."""
    return bool(os.environ.get("KAGGLE_KERNEL_RUN_TYPE"))


def _from_kagglehub(kind: str, handle: str) -> Path | None:
    """kagglehub's mount for an attached source; None where it cannot answer here."""
    if kind not in KAGGLEHUB_CALLS or not in_kernel():
        return None
    try:
        import kagglehub
    except ImportError:
        return None
    try:
        path = Path(getattr(kagglehub, KAGGLEHUB_CALLS[kind])(handle))
    except Exception as err:  # kagglehub raises its own and requests' errors alike
        log.info("kagglehub could not place %s %s (%s); searching the input folder", kind, handle, err)
        return None
    return path if path.is_dir() else None


def layouts(kind: str, handle: str) -> list[str]:
    """The relative folders Kaggle has been seen to mount `handle` at, newest layout first."""
    parts = handle.strip("/").split("/")
    slug = parts[-1] if kind != "model" else parts[1]
    return list(dict.fromkeys([f"{KIND_FOLDERS[kind]}/{handle}", f"{KIND_FOLDERS[kind]}/{slug}", slug]))


def folders(root: Path, depth: int = SEARCH_DEPTH) -> Iterator[Path]:
    """Every folder under `root` down to `depth`, breadth first, in a stable order."""
    level = [root]
    for _ in range(depth):
        nxt = []
        for folder in level:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir())
            except OSError:
                continue
            yield from children
            nxt.extend(children)
        level = nxt


def find(
    kind: str,
    handle: str,
    holds: Callable[[Path], bool],
    what: str,
    root: Path = KAGGLE_INPUT,
    aliases: tuple[str, ...] = (),
) -> Found | None:
    """An attached `kind` ("competition", "dataset", "model", "notebook") named `handle`: kagglehub's
    answer, else the first known layout (for `handle` or an alias) that `holds` the source's files, else
    the first folder under `root` that does (`what` names those files in the log)."""
    hub = _from_kagglehub(kind, handle)
    if hub is not None and holds(hub):
        return Found(hub, "kagglehub")
    for name in dict.fromkeys((handle, *aliases)):
        for relative in layouts(kind, name):
            if holds(root / relative):
                return Found(root / relative, f"the layout {relative}")
    if not root.is_dir():
        return None
    for folder in folders(root):
        if holds(folder):
            return Found(folder, f"a search of {root} for {what}")
    return None


def attached(root: Path = KAGGLE_INPUT) -> list[Path]:
    """Every folder under `root` that holds files: where weights and wheels from attached sources are."""
    if not root.is_dir():
        return []
    return [f for f in [root, *folders(root)] if any(p.is_file() for p in f.iterdir())]


def files_named(name: str, root: Path = KAGGLE_INPUT) -> list[Path]:
    """Files called `name` in any attached source, nearest the top first."""
    return [folder / name for folder in attached(root) if (folder / name).is_file()]
