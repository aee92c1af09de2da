"""Atomic writes: an output is either the old file or the complete new one, never half of it.

Figures go the same way: `pyplot()` gives matplotlib on its file-only backend (servers and
kernels have no display), `plain_text` makes a figure draw every text as written, and
`save_figure` writes a PNG atomically and frees the figure. Archives are
unpacked only after their members are counted (`open_zip`, before zipfile reads their records)
and checked (`check_members`: no paths out, no links or devices, bounded sizes), and as plain
files (`extract_members`); the folders petals works in carry a marker (`make_work_folder`), so
that petals deletes only what it made (`is_work_folder`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import shutil
import stat
import struct
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown


def write_atomically(path: Path, write: Callable[[Path], None], tmp_name: str | None = None) -> None:
    """`write(tmp)` beside `path`, then rename over it; the temporary file never outlives a failure.

    The temporary name is this writer's own: two processes of one sweep drawing the study's plot
    at once each rename a whole file (the last one stays), where a shared name had one of them
    replace or delete the file the other was still writing. `tmp_name` is for writers that insist
    on a file name ending (Keras wants `.weights.h5`) and hold their folder's lock.
    """
    tmp = path.with_name(tmp_name or f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
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


# Bounds on what one fetch unpacks, checked against the members' declared sizes before anything is
# written and against the bytes actually written while inflating. The largest competition petals
# knows unpacks to about 6 GB (cassava-leaf-disease-classification: 21,397 JPEGs and its TFRecords;
# tpu-getting-started is about 5 GB) and the most files are dogs-vs-cats' 37,500 JPEGs: ten times
# the bytes and over twenty-five times the files leave room for any real competition, and a zip bomb
# (a few kB declaring or inflating to terabytes) is refused in one line instead of filling the disk.
MAX_UNPACKED_BYTES = 64 * 2**30
MAX_MEMBERS = 1_000_000

# Written into every work folder petals makes (a fetch's staging folder, the download folder), so
# that a folder petals is about to delete can be told apart from one of the user's.
WORK_MARKER = ".petals-work"

_FILE_TYPES = (0, stat.S_IFREG, stat.S_IFDIR)  # 0: a zip made without Unix modes (Windows, DOS)


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


UNIX_ZIP = 3  # ZipInfo.create_system of a zip made on Unix: only there do the high bits hold a mode


def _member_type(member: zipfile.ZipInfo) -> int:
    """The Unix file type a member declares (a link, a pipe); 0 for a zip made elsewhere, whose
    external attributes mean something else (a Windows zip's would look like anything)."""
    return stat.S_IFMT(member.external_attr >> 16) if member.create_system == UNIX_ZIP else 0


@dataclass
class Budget:
    """What is left to unpack in one fetch: bytes and files. Nested archives (a competition's zip
    holding `train.zip`) draw on the same budget, so a bomb cannot hide one level down."""

    bytes: int = MAX_UNPACKED_BYTES
    members: int = MAX_MEMBERS

    @classmethod
    def left_after(cls, folder: Path) -> Budget:
        """The budget left once what `folder` already holds is counted (the outer archive's files)."""
        held = (
            [p for p in folder.rglob("*") if p.is_file() and p.name != WORK_MARKER] if folder.is_dir() else []
        )
        sizes = [p.stat().st_size for p in held]
        return cls(MAX_UNPACKED_BYTES - sum(sizes), MAX_MEMBERS - len(sizes))


def _in_words(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def _too_big(archive: Path, size: int) -> PetalsError:
    return PetalsError(
        f"archive {archive}: its members unpack to {_in_words(size)} or more, over the "
        f"{_in_words(MAX_UNPACKED_BYTES)} petals unpacks in one fetch (a zip bomb?); nothing was kept"
    )


CENTRAL_HEADER = struct.Struct("<4s24xHHH12x")  # a central directory entry's 46 bytes: what it spans


def open_zip(archive: Path, budget: Budget | None = None) -> zipfile.ZipFile:
    """`archive` opened, once its central directory is known to list at most `budget.members`: zipfile
    holds every member's record (about 0.8 KB each) as it opens, so a directory of tens of millions
    of entries (a GB of file) would fill memory before `check_members` could count them. The entries
    are counted by their headers, not by the end record's total, which can say anything."""
    limit = (budget or Budget()).members
    with open(archive, "rb") as f:
        end = zipfile._EndRecData(f)  # what zipfile itself reads first (zip64 and comments handled)
        if end is not None:
            size = end[zipfile._ECD_SIZE]
            zip64 = end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64
            f.seek(max(0, end[zipfile._ECD_LOCATION] - size - (76 if zip64 else 0)))
            counted = spanned = 0
            while spanned + CENTRAL_HEADER.size <= size and counted <= limit:
                header = f.read(CENTRAL_HEADER.size)
                if len(header) < CENTRAL_HEADER.size or header[:4] != b"PK\x01\x02":
                    break  # zipfile says what is wrong
                _, name, extra, comment = CENTRAL_HEADER.unpack(header)
                f.seek(name + extra + comment, os.SEEK_CUR)
                spanned += CENTRAL_HEADER.size + name + extra + comment
                counted += 1
            if counted > limit:
                raise PetalsError(
                    f"archive {archive}: over {limit} members, more than petals unpacks in one fetch "
                    "(a zip bomb?); nothing was kept"
                )
    return zipfile.ZipFile(archive)


def check_members(zf: zipfile.ZipFile, archive: Path, budget: Budget) -> None:
    """Refuse, in one line naming the archive and the member, an archive petals will not unpack:
    a path leaving the folder (absolute, `..`), a member that is not a plain file or folder
    (a symbolic link, a device, a pipe), more declared bytes than `budget` allows (`open_zip` bounded
    their number)."""
    members = zf.infolist()
    if (unsafe := unsafe_member(zf)) is not None:
        raise PetalsError(f"corrupt archive {archive}: unsafe member path {shown(unsafe)}")
    for m in members:
        kind = _member_type(m)
        if kind not in _FILE_TYPES:
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a plain file or folder"
            raise PetalsError(
                f"archive {archive}: member {shown(m.filename)} is {what}; petals unpacks only "
                "files and folders"
            )
    declared = sum(m.file_size for m in members)
    if declared > budget.bytes:
        raise _too_big(archive, MAX_UNPACKED_BYTES - budget.bytes + declared)


def extract_members(
    zf: zipfile.ZipFile,
    members: Sequence[zipfile.ZipInfo],
    dest: Path,
    archive: Path,
    budget: Budget,
    progress: Callable[[int], Any] | None = None,
) -> None:
    """Unpack `members` (checked by `check_members`) into `dest` as plain files, counting the bytes
    actually written against `budget`: a header may understate what a member inflates to."""
    for m in members:
        target = dest / m.filename
        try:
            if m.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as source, open(target, "wb") as out:
                while chunk := source.read(1 << 20):
                    budget.bytes -= len(chunk)
                    if budget.bytes < 0:
                        raise _too_big(archive, MAX_UNPACKED_BYTES - budget.bytes)
                    out.write(chunk)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            raise PetalsError(
                f"corrupt archive {archive}: member {shown(m.filename)} collides with another member"
            ) from None
        budget.members -= 1
        if progress is not None:
            progress(m.file_size)


def is_work_folder(path: Path, markers: Sequence[str] = ()) -> bool:
    """Whether petals may delete `path`: it is absent, empty, or holds petals' work marker (or one
    of `markers`, e.g. the manifest a fetch writes into the data dir)."""
    if not path.exists():
        return True
    if not path.is_dir() or path.is_symlink():
        return False
    return any((path / m).is_file() for m in (WORK_MARKER, *markers)) or not any(path.iterdir())


def remove_work_folder(path: Path, markers: Sequence[str] = ()) -> None:
    """Delete a folder `is_work_folder` allows, its marker last: a removal cut short (kill -9)
    leaves a folder that is still recognisably petals'."""
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return
    last = {WORK_MARKER, *markers}
    for entry in sorted(path.iterdir(), key=lambda p: p.name in last):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    path.rmdir()


def make_work_folder(path: Path) -> Path:
    """A folder petals works in (created if need be), marked as petals' own."""
    path.mkdir(parents=True, exist_ok=True)
    (path / WORK_MARKER).touch()
    return path


def copy_plain(source: Path, dest: Path, leave_out: Sequence[str] = ()) -> list[Path]:
    """`source`, a file or a folder, copied to `dest` with only its regular files and folders; what
    else it holds is left out and returned. A folder downloaded or shared (a kernel's output, an
    earlier version's runs) can hold a link to `~/.kaggle/kaggle.json`, which `shutil.copytree`
    would copy as the file it points at, or a pipe, on which its read never returns. `leave_out`:
    names (glob patterns) not copied, wherever they sit."""
    skipped: list[Path] = []
    patterns = shutil.ignore_patterns(*leave_out)

    def ignored(folder: str, names: list[str]) -> set[str]:
        out = set(patterns(folder, names))
        for name in set(names) - out:
            if not _plain(Path(folder) / name):
                out.add(name)
                skipped.append(Path(folder) / name)
        return out

    if not _plain(source):
        return [source]
    if source.is_dir():
        shutil.copytree(source, dest, ignore=ignored, dirs_exist_ok=True)
    else:
        shutil.copy2(source, dest)
    return skipped


def _plain(path: Path) -> bool:
    """A regular file or a folder, not reached through a link."""
    mode = os.lstat(path).st_mode
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


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


def plain_text(draw: Callable[..., Any]) -> Callable[..., Any]:
    """`draw`, a function that makes a figure, with matplotlib's TeX parsing off for each text it
    creates: class and column names come from shared files, and a name such as `a$\\frac{x$` would
    otherwise stop the stage with mathtext's parse error (or draw `$5 to $10` as math)."""

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> Any:
        with pyplot().rc_context({"text.parse_math": False}):  # read as each Text is made
            return draw(*args, **kwargs)

    return drawn


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """A matplotlib figure as a PNG at `path`, atomically, then closed."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):  # what tight_layout leaves
        fig.set_layout_engine(None)  # it lays out nothing, but savefig drew the figure twice for it
    write_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    pyplot().close(fig)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text))
