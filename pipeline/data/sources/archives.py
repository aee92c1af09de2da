"""Kaggle's competition zip unpacked, keeping its layout (used by the kaggle and dir sources)."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from tqdm import tqdm

from pipeline.core.errors import PetalsError
from pipeline.core.files import unsafe_member


def unpack(
    archive: Path,
    dest: Path,
    spec,
    sizes: tuple[int, ...] | None,
    progress: bool,
    keep_archive: bool = False,
) -> None:
    """Unpack Kaggle's archive keeping its layout (only the chosen resolutions, if any). A damaged
    download is deleted, so the next run fetches it again; a user's own archive is kept."""
    keep_dirs = {spec.records.record_dir(s) for s in sizes} if sizes and spec.format.sharded else None
    try:
        with zipfile.ZipFile(archive) as zf:
            if (unsafe := unsafe_member(zf)) is not None:
                raise PetalsError(f"corrupt archive {archive}: unsafe member path {unsafe!r}")
            members = [m for m in zf.infolist() if not m.is_dir()]
            if keep_dirs is not None:  # drop the other resolutions' folders, wherever they sit

                def wanted(name: str) -> bool:
                    record_dirs = [p for p in Path(name).parts[:-1] if spec.records.size_from_record_dir(p)]
                    return not record_dirs or record_dirs[0] in keep_dirs

                members = [m for m in members if wanted(m.filename)]
            total = sum(m.file_size for m in members)
            # Progress bars use tqdm's disable=None: drawn on a terminal, left out of logs.
            with tqdm(
                total=total, unit="B", unit_scale=True, desc="unpacking", disable=None if progress else True
            ) as bar:
                for m in members:
                    zf.extract(m, dest)
                    bar.update(m.file_size)
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:  # damaged bytes, not a full disk
        if keep_archive:
            raise PetalsError(f"corrupt archive {archive} ({err})") from None
        archive.unlink(missing_ok=True)  # so the next run downloads it again
        raise PetalsError(f"corrupt archive {archive} ({err}): it was deleted, run fetch again") from None
