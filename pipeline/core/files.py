"""Atomic writes: an output is either the old file or the complete new one, never half of it.

Figures go the same way: `pyplot()` gives matplotlib on its file-only backend (servers and
kernels have no display), `save_figure` writes a PNG atomically and frees the figure.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def write_atomically(path: Path, write: Callable[[Path], None], tmp_name: str | None = None) -> None:
    """`write(tmp)` beside `path`, then rename over it; the temporary file never outlives a failure.

    `tmp_name` is for writers that insist on a file name ending (Keras wants `.weights.h5`).
    """
    tmp = path.with_name(tmp_name or path.name + ".partial")
    try:
        with naming(path):
            write(tmp)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An OSError raised inside (a full disk mid-write says only "No space left on device") made
    to name `path`, so the line the user sees says what was being written."""
    try:
        yield
    except OSError as err:
        if err.errno is None or err.filename:
            raise
        raise OSError(err.errno, os.strerror(err.errno), str(path)) from err


def write_zip(path: Path, members: Sequence[tuple[str, bytes]]) -> None:
    """A zip of these (name, bytes) members, renamed into place when whole. Each member has a fixed
    time stamp, so the same members give the same bytes (the clock's would change them)."""

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=(2017, 3, 1, 0, 0, 0))
                # JPEGs are compressed already: stored; text deflated, as Kaggle's zips are
                info.compress_type = (
                    zipfile.ZIP_STORED if name.lower().endswith(".jpg") else zipfile.ZIP_DEFLATED
                )
                archive.writestr(info, data)

    write_atomically(path, write)


def unsafe_member(archive: zipfile.ZipFile) -> str | None:
    """The first member whose path would land outside the folder it is unpacked into, or None."""
    return next(
        (
            m.filename
            for m in archive.infolist()
            if m.filename.startswith("/") or ".." in Path(m.filename).parts
        ),
        None,
    )


def sha256(path: Path) -> str:
    """The hex sha256 of a local file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend, which only writes files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """A matplotlib figure as a PNG at `path`, atomically, then closed."""
    write_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    pyplot().close(fig)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text))
