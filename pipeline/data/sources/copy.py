"""Your own copy (`dir`): the competition's zip as Kaggle serves it (unpacked into the data dir),
or an unpacked folder (read in place)."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown
from pipeline.data.readers import reader_for
from pipeline.data.sources.archives import unpack
from pipeline.data.sources.base import Context, Got, Source, register


@register
class Copy(Source):
    name = "dir"
    priority = 10

    def auto_reason(self, context: Context) -> str | None:
        given = context.options.data_from
        return f"a copy of the data was given ({given})" if given else None

    def get(self, context: Context, staging: Path) -> Got:
        """The root of the files and the origin, or a PetalsError naming what was given."""
        options, spec = context.options, context.spec
        given = options.data_from
        if given is None:
            raise PetalsError("--source dir needs --from PATH (make fetch SOURCE=dir DATA_FROM=PATH)")
        given = given.expanduser().resolve()
        if given.is_file() and (given.suffix.lower() == ".zip" or zipfile.is_zipfile(given)):
            unpack(given, staging, spec, options.sizes, options.progress, keep_archive=True)
            inner = reader_for(spec).find_in_copy(staging, spec)
            if inner is None:
                raise PetalsError(f"--from {given}: the archive holds no {reader_for(spec).markers(spec)}")
            if inner != staging:
                _lift(staging, inner, given)
            return Got(str(staging), str(given), options.sizes)
        if given.is_file():
            raise PetalsError(
                f"--from {given}: not a zip archive (give the competition's zip or its unpacked folder)"
            )
        if not given.is_dir():
            raise PetalsError(f"--from {given}: no such file or folder")
        found = reader_for(spec).find_in_copy(given, spec)
        if found is None:
            raise PetalsError(f"--from {given}: no folder in it holds {reader_for(spec).markers(spec)}")
        return Got(str(found), str(given), options.sizes)


def _lift(staging: Path, inner: Path, given: Path) -> None:
    """The files of the archive's wrapping folder (`inner`, in `staging`) lifted to `staging`'s top.
    The wrapper is set aside first, so a file named as it is (`flowers/flowers/...`) moves freely."""
    top = staging / inner.relative_to(staging).parts[0]
    aside = Path(tempfile.mkdtemp(prefix=".wrapper-", dir=staging))
    top.rename(aside / top.name)
    for entry in list((aside / inner.relative_to(staging)).iterdir()):
        if (staging / entry.name).exists():
            raise PetalsError(
                f"--from {given}: the archive holds {shown(entry.name)} both at its top and in {top.name}/"
            )
        entry.rename(staging / entry.name)
    shutil.rmtree(aside)
