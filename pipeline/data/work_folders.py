"""The data dir and the work folders beside it (`.partial`, `.old`, `.download`): which of them
are petals' own, and the refusal of a source that overlaps them, so that a fetch deletes only what
it made and never the user's copy of the data.

Petals' own: the data dir holding a fetch's manifest (or empty), a work folder carrying petals'
marker (`pipeline.core.files.WORK_MARKER`), or holding a manifest (a data dir set aside).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.files import WORK_MARKER, is_work_folder, make_work_folder, remove_work_folder
from pipeline.core.options import FetchOptions
from pipeline.data.manifest import MANIFEST

# The folders beside the data dir a fetch works in: built there, the old data set aside there, the
# Kaggle download kept there.
STAGING, OLD, DOWNLOAD = ".partial", ".old", ".download"


def _named(path: object) -> str:
    """A path in a refusal: whole (its end names the folder), quoted, control characters visible."""
    return repr(str(path))


def beside(data_dir: Path, suffix: str) -> Path:
    """The work folder `suffix` beside the data dir (`data.partial` beside `data`)."""
    return data_dir.with_name(data_dir.name + suffix)


def check_apart(data_dir: Path, given: object, flag: str) -> None:
    """Refuse a source that is, holds or lies inside the data dir or one of its work folders:
    fetch replaces those, and the user's files would go with them."""
    source = Path(str(given)).expanduser().resolve()
    data = data_dir.expanduser().resolve()
    for work in (data, *(beside(data, suffix) for suffix in (STAGING, OLD, DOWNLOAD))):
        named = "the data dir" if work == data else f"its work folder {work.name}"
        if source == work:
            overlap = f"{flag} is {named}"
        elif source.is_relative_to(work):
            overlap = f"{flag} lies inside {named}"
        elif work.is_relative_to(source):
            overlap = f"{named} lies inside {flag}"
        else:
            continue
        raise PetalsError(
            f"{flag} {_named(given)} and --data-dir {_named(data_dir)} overlap ({overlap}): fetch "
            "replaces the data dir and its work folders; choose a --data-dir apart from your copy"
        )


def check_sources_apart(options: FetchOptions) -> None:
    """`check_apart` for every local path the options name as a source."""
    if options.data_from is not None and options.source in ("auto", "dir"):
        check_apart(options.data_dir, options.data_from, "--from")
    gcs = options.gcs_path
    if gcs and "://" not in gcs and options.source in ("auto", "gcs"):
        check_apart(options.data_dir, gcs, "--gcs-path")
    if options.source == "kaggle-input":
        check_apart(options.data_dir, options.kaggle_input, "--kaggle-input")


def check_replaceable(data_dir: Path, source: str, cache_dir: Path, slug: str) -> None:
    """Refuse, before anything is written, to replace or delete a folder petals did not make: the
    data dir (petals' holds its manifest) and the work folders beside it (petals' marker)."""
    if data_dir.is_symlink():  # replacing it would put the data beside the link, not where it points
        raise PetalsError(
            f"--data-dir {_named(data_dir)} is a link; fetch replaces the data dir: give the folder "
            f"it points to ({_named(data_dir.resolve())})"
        )
    if data_dir.exists() and not is_work_folder(data_dir, (MANIFEST,)):
        raise PetalsError(
            f"--data-dir {_named(data_dir)} holds files petals did not put there (no {MANIFEST}); "
            "fetch would replace it: move them away or choose another --data-dir"
        )
    work = [beside(data_dir, STAGING), beside(data_dir, OLD)]
    for folder in work + ([cache_dir] if source == "kaggle" else []):
        if not is_own(folder, slug):
            raise PetalsError(
                f"{_named(folder)} is in fetch's way and is not a folder petals made "
                f"(no {WORK_MARKER}): move it away or choose another --data-dir (a fetch of a petals "
                "before 2026-11-26 killed mid-way leaves one unmarked: remove it yourself)"
            )


def is_own(folder: Path, slug: str) -> bool:
    """A work folder petals made: marked, holding a manifest (a data dir set aside), or a download
    folder holding nothing but the Kaggle client's `<slug>.*` files (from before the marker)."""
    if is_work_folder(folder, (MANIFEST,)):
        return True
    entries = list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else [folder]
    return folder.name.endswith(DOWNLOAD) and all(
        p.is_file() and not p.is_symlink() and p.name.startswith(f"{slug}.") for p in entries
    )


@contextmanager
def staging_for(data_dir: Path) -> Iterator[Path]:
    """A fresh sibling folder to build the data dir in; swapped into place only on success."""
    staging, old = beside(data_dir, STAGING), beside(data_dir, OLD)
    for leftover in (staging, old):  # from an interrupted earlier run; petals' own (check_replaceable)
        if leftover.exists():
            remove_work_folder(leftover, (MANIFEST,))
    make_work_folder(staging)
    try:
        yield staging
    except BaseException:
        with contextlib.suppress(OSError):  # the error that stopped the fetch is the one to show
            remove_work_folder(staging)
        raise
    (staging / WORK_MARKER).unlink(missing_ok=True)  # staging now holds the manifest: the data dir's
    if data_dir.exists():  # petals' own (check_replaceable): its manifest, or empty
        data_dir.rename(old)
    staging.rename(data_dir)
    with contextlib.suppress(OSError):  # the new data is in place; a leftover goes next time
        remove_work_folder(old, (MANIFEST,))


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def drop_if_unused(folder: Path) -> None:
    """A work folder petals made that holds nothing but its marker: removed (a failed download)."""
    if folder.is_dir() and {p.name for p in folder.iterdir()} == {WORK_MARKER}:
        shutil.rmtree(folder)
