"""Labels as the competitions write them, read the same whatever the format (a table of texts, a
CSV beside images): the one home of what a label cell means.

A labelled row gives its target in one of four ways:
- `ids`: one column of class ids, 0..n-1 in classes.txt's order (IMDB's `sentiment`);
- `names`: one column of class names (Cassava written with its disease names);
- `name_lists`: one column listing class names separated by spaces, any number a row (Plant
  Pathology's `scab frog_eye_leaf_spot`; an empty cell is a row with no label);
- `numbers`: one column of numbers (a regression's target: Pawpularity's 1-100 score, CommonLit's
  readability), read as a row of one float; or, with `[data] label_columns`, a number in each
  of those columns (Feedback Prize ELL's six scores), read as a row of floats in their order;
- `columns`: one 0/1 column per label (`[data] label_columns`, Jigsaw's `toxic,...,identity_hate`);
  the classes are those columns, in order.
`ids` and `names` give a class id (label rank 0), `name_lists` and `columns` a row of 0/1 over the
classes (rank 1), `numbers` a row of floats, one a column (rank 1, and `numeric`).
A value that is none of these is refused in one line naming the file and the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import listed
from pipeline.core.paths import shown

# How a single label column's cells are read (`labels_are`); `columns` is chosen by naming them.
CELLS = ("ids", "names", "name_lists", "numbers")
KINDS = (*CELLS, "columns")
# A class id's digits: ASCII only, and few (int() reads '²', and takes long on 4,300 digits).
MAX_ID_DIGITS = 6
# A number's text: longer is no number a competition writes (and float() of it costs time).
MAX_NUMBER_CHARS = 64


@dataclass(frozen=True)
class LabelReading:
    """How a labelled split's rows give their targets: `kind` (one of KINDS) over `columns`."""

    kind: str
    columns: tuple[str, ...]
    classes: tuple[str, ...]

    @property
    def rank(self) -> int:
        """0: a class id an example; 1: a row, of 0/1 over the classes or of one number
        (`Task.label_rank`)."""
        return int(self.kind in ("name_lists", "columns", "numbers"))

    @property
    def numeric(self) -> bool:
        """Whether a target is a number (`Task.numeric_target`), not classes or labels."""
        return self.kind == "numbers"


def check_kind(labels_are: object, where: str) -> str:
    """`labels_are` as a format's table writes it, one of CELLS; else a ValueError naming it."""
    if labels_are not in CELLS:
        raise ValueError(f"{where} labels_are {shown(labels_are)} is not one of: {', '.join(CELLS)}")
    return labels_are  # type: ignore[return-value]


def reading(spec, label_column: str | None, labels_are: str = "ids") -> LabelReading:
    """The competition's way: its `[data] label_columns` where it names them (0/1 cells, or numbers
    where the format says `labels_are = "numbers"`), else the format's one label column read as
    `labels_are`; ValueError for a labelled split that names neither."""
    if spec.label_columns:
        kind = "numbers" if labels_are == "numbers" else "columns"
        return LabelReading(kind, spec.label_columns, spec.classes)
    if label_column is None:
        raise ValueError("a labelled split names no label_column (nor [data] label_columns)")
    return LabelReading(labels_are, (label_column,), spec.classes)


def cells(read: LabelReading, rows):
    """A table's label cells (a pandas DataFrame of strings with the reading's columns), a row at a
    time: one string a row where the label has one column, a tuple of strings where it has several."""
    if read.kind == "columns" or len(read.columns) > 1:
        return rows[list(read.columns)].itertuples(index=False, name=None)
    return rows[read.columns[0]]


def target(read: LabelReading, cells, where: str):
    """One row's target from its label cells (a string, or a tuple of one string a column where the
    label has several): an int class id, an int32 row of 0/1, or a float32 row of numbers.
    PetalsError naming `where` (the file and its row)."""
    if read.kind == "numbers":
        row = (cells,) if isinstance(cells, str) else tuple(cells)
        return np.concatenate([_number(c, v, where) for c, v in zip(read.columns, row, strict=True)])
    if read.kind == "columns":
        return _flags(read, cells, where)
    if read.kind == "name_lists":
        return _name_list(read, cells, where)
    if read.kind == "names":
        if cells in read.classes:
            return read.classes.index(cells)
        raise PetalsError(f"{where}: label {shown(cells)} is not a class ({listed(read.classes)})")
    digits = isinstance(cells, str) and cells.isascii() and cells.isdigit() and len(cells) <= MAX_ID_DIGITS
    if digits and int(cells) < len(read.classes):
        return int(cells)
    raise PetalsError(f"{where}: label {shown(cells)} is not a class id (0 to {len(read.classes) - 1})")


def targets(read: LabelReading, rows, path) -> np.ndarray:
    """Every row's target of a table (a pandas DataFrame of strings with the reading's columns, its
    row n on the file's line n + 2): class ids [n], rows of 0/1 [n, classes], or numbers [n, columns]."""
    where = [f"{path}: line {n + 2}" for n in range(len(rows))]
    found = [target(read, c, w) for c, w in zip(cells(read, rows), where, strict=True)]
    if read.numeric:
        return np.array(found, np.float32).reshape(len(found), len(read.columns))
    if read.rank == 1:
        return np.array(found, np.int32).reshape(len(found), len(read.classes))
    return np.array(found, np.int64)


def _name_list(read: LabelReading, cell, where: str) -> np.ndarray:
    """Class names separated by spaces as a row of 0/1; an empty cell is an example with no label."""
    row = np.zeros(len(read.classes), np.int32)
    for name in str(cell).split():
        if name not in read.classes:
            raise PetalsError(f"{where}: label {shown(name)} is not a class ({listed(read.classes)})")
        row[read.classes.index(name)] = 1
    return row


def _flags(read: LabelReading, cells: tuple, where: str) -> np.ndarray:
    """A row's 0/1 cells, one a label column, as written: `1.0`, `-1` or an empty cell refused."""
    for column, cell in zip(read.columns, cells, strict=True):
        if cell not in ("0", "1"):
            raise PetalsError(f"{where}: {column} {shown(cell)} is not 0 or 1")
    return np.array([cell == "1" for cell in cells], np.int32)


def _number(column: str, cell, where: str) -> np.ndarray:
    """A cell holding one finite number (`37`, `-1.25`, `3e2`), as a row of one float32; anything
    else (`n/a`, `inf`, an empty cell) refused in one line naming `where`."""
    try:
        value = float(cell) if isinstance(cell, str) and len(cell) <= MAX_NUMBER_CHARS else float("nan")
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise PetalsError(f"{where}: {column} {shown(cell)} is not a finite number")
    return np.array([value], np.float32)
