"""Tables of texts as Kaggle serves them: read exactly, or refused in one line.

The text competitions ship TSV/CSV files whose quoting pandas' defaults get wrong. In
`word2vec-nlp-tutorial` every id and review is wrapped in quotes and inner quotes are written
`\\"`: with the defaults a review holding `\\"` swallows the tab after it, and rows come back
merged or cut (tests/test_tables.py shows it). A `TableLayout` (table_layout.py) says how
one file is written; the competition file names one per split.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.csv_bounds import TEXT_TABLE, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.paths import shown
from pipeline.formats.table_layout import TableLayout


def read_table(
    path: Path,
    layout: TableLayout,
    num_classes: int | None = None,
    declared_rows: int | None = None,
    every_column: bool = False,
) -> pd.DataFrame:
    """The file's rows with string ids and texts (and int labels in [0, num_classes) where the
    layout has labels, finite numbers where they are numbers; `every_column`: the file's other
    columns too). Raises PetalsError naming the file, and the row or value, for a file that does
    not parse as laid out, a missing column, an empty or repeated id, an empty text, or a label
    outside the classes (not a finite number); and, before it is read
    whole, for one past TEXT_TABLE's bytes or a text's length, more rows than `declared_rows`
    allow, or an id past MAX_ID_BYTES."""
    if not path.is_file():
        raise PetalsError(f"{path}: no such file")
    bounds = TEXT_TABLE.declaring(declared_rows)
    check_csv(
        path, bounds, id_column=layout.id_column, separator=layout.separator, escapechar=layout.escapechar
    )
    try:
        table = pd.read_csv(
            path,
            sep=layout.separator,
            quoting=csv.QUOTE_MINIMAL,
            escapechar=layout.escapechar,
            dtype=str,
            keep_default_na=False,  # a review that reads "NA" is a review
            on_bad_lines="error",
            engine="python" if len(layout.separator) > 1 else "c",
        )
    except (pd.errors.ParserError, UnicodeDecodeError, csv.Error) as err:
        raise PetalsError(f"{path}: does not parse as a {_describe(layout)} table ({_reason(err)})") from None
    except pd.errors.EmptyDataError:
        raise PetalsError(f"{path}: empty file") from None
    wanted = [layout.id_column, *layout.text_columns, *([layout.label_column] if layout.label_column else [])]
    missing = [column for column in wanted if column not in table.columns]
    if missing:
        raise PetalsError(f"{path}: no column {missing[0]!r} (columns: {', '.join(map(str, table.columns))})")
    _check_ids(path, table[layout.id_column])
    for column in layout.text_columns:
        _check_texts(path, table[column], column)
    if layout.label_column and layout.labels_are == "numbers":
        table[layout.label_column] = _numbers(path, table[layout.label_column], layout.label_column)
    elif layout.label_column:
        table[layout.label_column] = _labels(path, table[layout.label_column], num_classes)
    return (table if every_column else table[wanted]).reset_index(drop=True)


def _describe(layout: TableLayout) -> str:
    separator = {"\t": "tab", ",": "comma"}.get(layout.separator, repr(layout.separator))
    escape = f", quotes escaped with {layout.escapechar!r}" if layout.escapechar else ""
    return f"{separator}-separated{escape}"


def _reason(err: BaseException) -> str:
    return str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__


def _row(index: int) -> int:
    """The file's line of a table row (the header is line 1), for rows without embedded newlines."""
    return index + 2


def _check_ids(path: Path, ids: pd.Series) -> None:
    empty = ids.index[ids.str.strip() == ""]
    if len(empty):
        raise PetalsError(f"{path}: empty id on line {_row(empty[0])}")
    repeated = ids[ids.duplicated()]
    if len(repeated):
        raise PetalsError(f"{path}: id {repeated.iloc[0]!r} appears more than once")


def _check_texts(path: Path, texts: pd.Series, column: str) -> None:
    empty = texts.index[texts.str.strip() == ""]
    if len(empty):
        raise PetalsError(f"{path}: empty {column} on line {_row(empty[0])}")


def _labels(path: Path, values: pd.Series, num_classes: int | None) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() | (numbers != numbers.round())
    if num_classes is not None:
        bad |= (numbers < 0) | (numbers >= num_classes)
    if bad.any():
        where = bad.idxmax()
        allowed = f" (classes are 0..{num_classes - 1})" if num_classes is not None else ""
        raise PetalsError(
            f"{path}: label {shown(values[where])} on line {_row(where)} is not a class{allowed}"
        )
    return numbers.astype("int64")


def _numbers(path: Path, values: pd.Series, column: str) -> pd.Series:
    """A regression's targets: each cell a finite number, else one line naming the file and row."""
    numbers = pd.to_numeric(values.where(values.str.len() <= 64), errors="coerce")
    bad = ~np.isfinite(numbers.to_numpy(np.float64))
    if bad.any():
        where = int(np.argmax(bad))
        raise PetalsError(
            f"{path}: {column} {shown(values.iloc[where])} on line {_row(values.index[where])} "
            "is not a finite number"
        )
    return numbers.astype("float64")


def write_table(
    path: Path, rows: Sequence[dict[str, object]], columns: Sequence[str], layout: TableLayout
) -> None:
    """Write rows as Kaggle writes this layout (`table_text`), renamed into place when whole."""
    text = table_text(rows, columns, layout)
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline=""))


def table_text(rows: Sequence[dict[str, object]], columns: Sequence[str], layout: TableLayout) -> str:
    """Rows as Kaggle writes this layout: with an escapechar, every string value quoted and inner
    quotes (and escapes) escaped; numbers bare. The inverse of `read_table`."""
    lines = [
        layout.separator.join(columns),
        *(layout.separator.join(_cell(row[c], layout) for c in columns) for row in rows),
    ]
    return "\n".join(lines) + "\n"


def _cell(value: object, layout: TableLayout) -> str:
    if not isinstance(value, str):
        return str(value)
    if layout.escapechar:
        escape = layout.escapechar
        return '"' + value.replace(escape, escape * 2).replace('"', escape + '"') + '"'
    return (
        '"' + value.replace('"', '""') + '"'
        if any(c in value for c in (layout.separator, '"', "\n"))
        else value
    )
