"""CSV files from a download, bounded before pandas reads them whole: the file's bytes, its rows
and each field's length, checked in one streaming pass of Python's csv reader (C speed, one row
in memory at a time: 0.3 s for 70 MB), so a hostile file is refused in one line before it is
allocated. A label CSV of 2 million extra rows took 4 minutes and 2 GB before its refusal, one
300 MB field 2.3 GB, and an id of 5,000 characters ended in a traceback (ENAMETOOLONG).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown

# ids and labels, a row an image or an example (train.csv, sample_submission.csv, a fold table).
# The largest Kaggle serves is Landmark Recognition's train.csv: 1.6 million rows of a 16-character
# id and a class number, under 50 MB; 256 MiB is five times that.
MAX_LABEL_CSV_BYTES = 256 << 20
# Texts (a row a review or a comment): Jigsaw's Unintended Bias train.csv, Kaggle's largest text
# table, is 0.8 GB (1.8 million comments); 1 GiB holds it.
MAX_TEXT_TABLE_BYTES = 1 << 30
# A label cell: a class id, a name, or Plant Pathology's list of names (under 100 bytes).
MAX_LABEL_FIELD = 64 << 10
# A text cell: the longest IMDB review is 14 KB, a Jigsaw comment 5 KB; 16 MiB is a whole novel
# five times over (War and Peace is 3.2 MB).
MAX_TEXT_FIELD = 16 << 20
# An id names a file (an image's, or a submission's row): a file name's limit (NAME_MAX).
MAX_ID_BYTES = 255


@dataclass(frozen=True)
class CsvBounds:
    """What a kind of CSV may hold: bytes in all, characters a field, and the rows its split
    declares (`[data.counts]`; None: rows are not bounded but by the bytes)."""

    max_bytes: int
    max_field: int
    declared_rows: int | None = None

    @property
    def max_rows(self) -> int | None:
        """Twice the declared rows and a thousand more: room for another version of the data,
        never millions more. (Only a labelled split's rows are bounded so: a code competition's
        hidden test set is far larger than the visible one.)"""
        return None if self.declared_rows is None else 2 * self.declared_rows + 1000

    def declaring(self, rows: int | None) -> CsvBounds:
        return dataclasses.replace(self, declared_rows=rows)


LABEL_CSV = CsvBounds(MAX_LABEL_CSV_BYTES, MAX_LABEL_FIELD)
TEXT_TABLE = CsvBounds(MAX_TEXT_TABLE_BYTES, MAX_TEXT_FIELD)


def check_csv(
    path: Path,
    bounds: CsvBounds,
    *,
    id_column: str | None = None,
    separator: str = ",",
    escapechar: str | None = None,
) -> None:
    """Refuse a local CSV past `bounds` in one line naming the file (and the line), before it is
    read whole; `id_column`'s values at most MAX_ID_BYTES. A missing file passes: the reader that
    follows names it as it always has."""
    try:
        info = path.stat()
    except OSError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise PetalsError(f"{path}: not a regular file")
    with open(path, "rb") as f:
        check_csv_stream(f, str(path), info.st_size, bounds, id_column, separator, escapechar)


def check_csv_stream(
    f: BinaryIO,
    name: str,
    size: int,
    bounds: CsvBounds,
    id_column: str | None = None,
    separator: str = ",",
    escapechar: str | None = None,
) -> None:
    """`check_csv` of an open binary file (a `tf.io.gfile` one on `gs://`) of `size` bytes, read
    from where it stands."""
    if size > bounds.max_bytes:
        raise PetalsError(f"{name}: {size} bytes, more than {_mib(bounds.max_bytes)} for this kind of CSV")
    if len(separator) != 1:  # a pattern (pandas' python engine): the size bound alone
        return
    raw = io.BufferedReader(_Raw(f), 1 << 20)
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")  # pandas names bad bytes
    reader = csv.reader(
        _lines(text, name, bounds), delimiter=separator, escapechar=escapechar, doublequote=True
    )
    before = csv.field_size_limit(bounds.max_field)
    try:
        _check_rows(reader, name, bounds, id_column)
    except csv.Error as err:
        if "field limit" not in str(err):
            return  # a malformed file: pandas' parser says where, as before
        raise PetalsError(
            f"{name}: line {reader.line_num}: a field longer than {_mib(bounds.max_field)} "
            f"(this kind of CSV's bound); not read further"
        ) from None
    finally:
        csv.field_size_limit(before)


class _Raw(io.RawIOBase):
    """Any object with `read(n)` (an open file, a `tf.io.gfile.GFile`) as a raw stream; closing
    it leaves the file open for its owner."""

    def __init__(self, f: BinaryIO):
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._f.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _lines(text: io.TextIOWrapper, name: str, bounds: CsvBounds):
    """The file's lines for the csv reader, none longer than twice a field's bound: a line is read
    whole before the reader sees its fields, so a 300 MB line must stop here."""
    limit = 2 * bounds.max_field
    for number, line in enumerate(iter(lambda: text.readline(limit), ""), start=1):
        if len(line) == limit and not line.endswith(("\n", "\r")):
            raise PetalsError(
                f"{name}: line {number} is longer than {_mib(limit)} (a field may hold "
                f"{_mib(bounds.max_field)}); not read further"
            )
        yield line


def _check_rows(reader, name: str, bounds: CsvBounds, id_column: str | None) -> None:
    header = next(reader, [])
    column = header.index(id_column) if id_column in header else None
    for rows, row in enumerate(reader, start=1):
        if bounds.max_rows is not None and rows > bounds.max_rows:
            raise PetalsError(
                f"{name}: more than {bounds.max_rows} rows, where its split declares "
                f"{bounds.declared_rows} ([data.counts]); not read further"
            )
        if column is not None and column < len(row):
            value = row[column]
            if len(value) * 4 > MAX_ID_BYTES and len(value.encode("utf-8", "replace")) > MAX_ID_BYTES:
                raise PetalsError(
                    f"{name}: line {reader.line_num}: {id_column} {shown(value)} is longer than "
                    f"{MAX_ID_BYTES} bytes (a file name's limit)"
                )


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
