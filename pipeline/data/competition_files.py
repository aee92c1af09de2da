"""Competitions whose data is plain files, as Kaggle serves them: found, unpacked and verified.

What each split is made of is its format's (pipeline/formats/). An image-folder
competition ships a zip per split (`train.zip` holding `train/cat.0.jpg`...), a
table competition a CSV or TSV per split, sometimes zipped again inside the download
(`labeledTrainData.tsv.zip`). Wherever the files come from (the Kaggle API's zip, your copy,
`/kaggle/input`, the embedded dataset), the data dir ends up holding them unpacked: each split's
folder or table, and the sample submission. Verifying reads every table exactly as laid out and
every image's name and JPEG header (the first of each split decoded whole), so a stray file, a
label outside the classes or a file that is not a JPEG is named in one line before any training.
TFRecord competitions are pipeline/data/layout.py's.
"""

from __future__ import annotations

import hashlib
import shutil
import zipfile
import zlib
from pathlib import Path

import pandas as pd

from competition import CompetitionSpec
from pipeline.core.csv_bounds import LABEL_CSV, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.files import WORK_MARKER, Budget, check_members, extract_members, open_zip, sha256
from pipeline.core.paths import inside, shown
from pipeline.formats.base import format_of


def _entries(spec: CompetitionSpec) -> dict[str, tuple[str, str | None]]:
    """Per split (and the sample submission): what the data dir holds (a folder or a file) and
    the zip Kaggle may ship it in."""
    return {
        **format_of(spec).entries(spec),
        "sample submission": (spec.sample_submission, spec.sample_submission_archive),
    }


def markers(spec: CompetitionSpec) -> str:
    """What a folder holding the competition has, in words."""
    names = [archive or name for name, archive in _entries(spec).values()]
    return ", ".join(names[:-1]) + " and " + names[-1]


def holds_competition(spec: CompetitionSpec):
    """A test of whether a folder holds the competition's files, unpacked or in their zips."""

    def holds(folder: Path) -> bool:
        return all(
            (folder / name).exists() or (archive is not None and (folder / archive).is_file())
            for name, archive in _entries(spec).values()
        )

    return holds


def unpack_into(source: Path, dest: Path, spec: CompetitionSpec) -> None:
    """Put every entry of `source` into `dest` unpacked: copied where `source` has it unpacked,
    unzipped where it has its zip. Unpacking in place (`dest` is `source`, the fetch's own staging
    folder), everything else in it goes: the zips once unpacked, and files petals does not read
    (word2vec's unlabelled reviews), so the data dir holds what is verified and fingerprinted.
    Nothing is copied through a link that leads out of `source`."""
    entries = _entries(spec).values()
    in_place = source.resolve() == dest.resolve()
    if in_place and not (dest / WORK_MARKER).is_file():  # only a folder petals made is pruned
        raise PetalsError(f"{dest}: not a folder petals made; it will not unpack into it in place")
    for name, archive in entries:
        if (source / name).exists() or (source / name).is_symlink():
            if not in_place:
                _copy_inside(source, name, dest)
            continue
        if archive is None or not (source / archive).is_file():
            raise PetalsError(f"{source}: no {name}" + (f" nor {archive}" if archive else ""))
        _unzip(inside(source, archive, "file", source), dest)
    if in_place:
        kept = {name for name, _ in entries} | {WORK_MARKER}
        for path in dest.iterdir():
            if path.name not in kept:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _copy_inside(source: Path, name: str, dest: Path) -> None:
    """`source / name` copied to `dest / name`, refused in one line if it, or any link in it, leads
    out of `source` (a `sample_submission.csv` linking to /etc/passwd, a split folder elsewhere)."""
    path = inside(source, name, "file", source)
    for entry in [path, *(path.rglob("*") if path.is_dir() else ())]:
        relative = entry.relative_to(source).as_posix()
        if entry.is_symlink():
            inside(source, relative, "file", source)
            if entry.is_dir():  # a folder linked into the tree would be copied twice, or forever
                raise PetalsError(f"{source}: file {shown(relative)} is a link to a folder (copy it in)")
        if not (entry.is_file() or entry.is_dir()):  # a pipe would block the copy, a device never end
            raise PetalsError(f"{source}: file {shown(relative)} is not a plain file or folder")
    if path.is_dir():
        shutil.copytree(path, dest / name)
    else:
        shutil.copy2(path, dest / name)


def _unzip(archive: Path, dest: Path) -> None:
    try:
        budget = Budget.left_after(dest)  # the outer archive's files count against the same bounds
        with open_zip(archive, budget) as opened:
            check_members(opened, archive, budget)
            extract_members(opened, opened.infolist(), dest, archive, budget)
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:
        raise PetalsError(f"corrupt archive {archive} ({err})") from None


# ----------------------------------------------------------------------------- verifying


def verify(root: Path, spec: CompetitionSpec) -> dict[str, dict[str, int]]:
    """Check an unpacked data dir against the spec; {split: {"images" or "rows": count}}."""
    counts: dict[str, dict[str, int]] = {}
    test_ids = None
    for split in spec.splits:
        count, ids = format_of(spec).verify_split(root, spec, split)
        counts[split] = {format_of(spec).unit: count}
        if not spec.is_labeled(split):
            test_ids = ids
    _check_sample_submission(root / spec.sample_submission, spec, test_ids or [])
    return counts


def _check_sample_submission(path: Path, spec: CompetitionSpec, test_ids: list[str]) -> None:
    if not path.is_file():
        raise PetalsError(f"{path}: missing")
    check_csv(path, LABEL_CSV, id_column=spec.id_column)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    header = [spec.id_column, *spec.submission_columns]
    if list(frame.columns) != header:
        raise PetalsError(f"{path}: header is {list(frame.columns)}, expected {','.join(header)}")
    if len(frame) != len(test_ids) or set(frame[spec.id_column]) != set(map(str, test_ids)):
        raise PetalsError(f"{path}: its {len(frame)} ids are not the test split's {len(test_ids)}")


def data_files(root: Path, spec: CompetitionSpec, labelled_only: bool = False) -> list[Path]:
    """Every file the data dir's competition data is made of; or only the labelled splits'."""
    files = []
    for key, (name, _) in _entries(spec).items():
        if labelled_only and not spec.is_labeled(key.split()[0]):  # keys: "<split>" or "<split> <part>"
            continue
        path = root / name
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return files


def combine(digests: dict[str, bytes]) -> str:
    """One sha256 over files' relative paths and their contents' sha256 digests, in the dict's order."""
    digest = hashlib.sha256()
    for name, file_digest in digests.items():
        digest.update(name.encode() + b"\0")
        digest.update(file_digest)
    return "sha256:" + digest.hexdigest()


def fingerprints(root: Path, spec: CompetitionSpec) -> tuple[str, str]:
    """(every data file's fingerprint, the labelled splits' files' fingerprint), each file read once.

    The first names the data dir (a changed test set is other data: predictions are made again);
    the second is what a run trains on, and is part of its id: a code competition's scoring rerun,
    with the hidden test set mounted in place of the visible one, finds the same run."""
    labelled = {p.relative_to(root).as_posix() for p in data_files(root, spec, labelled_only=True)}
    digests = {p.relative_to(root).as_posix(): bytes.fromhex(sha256(p)) for p in data_files(root, spec)}
    return combine(digests), combine({name: d for name, d in digests.items() if name in labelled})


def fingerprint(root: Path, spec: CompetitionSpec) -> str:
    """sha256 over the relative path and content of every data file."""
    return fingerprints(root, spec)[0]
