"""Kaggle's competition zip unpacked, keeping its layout (used by the kaggle and dir sources).

An archive is a stranger's: its members are checked before anything is written (paths that leave
the folder, links, devices, and declared sizes and counts past `pipeline.core.files`' bounds), and
the bytes actually inflated are counted as they are written.
"""

from __future__ import annotations

import shutil
import zipfile
import zlib
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.files import WORK_MARKER, Budget, check_members, extract_members, open_zip
from pipeline.core.progress import MB, Progress
from pipeline.formats.base import resolutions_of
from pipeline.formats.records import records_of


def unpack(
    archive: Path,
    dest: Path,
    spec,
    sizes: tuple[int, ...] | None,
    progress: bool,
    keep_archive: bool = False,
) -> None:
    """Unpack Kaggle's archive keeping its layout (only the chosen resolutions, if any). A damaged
    or refused download is deleted, so the next run fetches it again; a user's own archive is kept."""
    keep_dirs = {records_of(spec).record_dir(s) for s in sizes} if sizes and resolutions_of(spec) else None
    try:
        budget = Budget.left_after(dest)
        with open_zip(archive, budget) as zf:
            check_members(zf, archive, budget)
            members = [m for m in zf.infolist() if not m.is_dir()]
            if keep_dirs is not None:  # drop the other resolutions' folders, wherever they sit

                def wanted(name: str) -> bool:
                    record_dirs = [
                        p for p in Path(name).parts[:-1] if records_of(spec).size_from_record_dir(p)
                    ]
                    return not record_dirs or record_dirs[0] in keep_dirs

                members = [m for m in members if wanted(m.filename)]
            total = sum(m.file_size for m in members)
            with Progress(f"unpacking {archive.name}", total / MB, "MB", enabled=progress) as bar:
                extract_members(zf, members, dest, archive, budget, lambda n: bar.advance(n / MB))
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:  # damaged bytes, not a full disk
        if keep_archive:
            raise PetalsError(f"corrupt archive {archive} ({err})") from None
        _drop_download(archive)  # so the next run downloads it again
        raise PetalsError(f"corrupt archive {archive} ({err}): it was deleted, run fetch again") from None
    except PetalsError as err:  # refused: a download petals made is not left lying about
        if keep_archive:
            raise
        _drop_download(archive)
        raise PetalsError(f"{err}; the download was deleted") from None


def _drop_download(archive: Path) -> None:
    """Delete a download petals made, and its folder once nothing but petals' marker is left."""
    archive.unlink(missing_ok=True)
    folder = archive.parent
    if (folder / WORK_MARKER).is_file() and {p.name for p in folder.iterdir()} == {WORK_MARKER}:
        shutil.rmtree(folder)
