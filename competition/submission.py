"""The submission format: `id,<label column>` (or a column per label, Jigsaw's `id,toxic,...`),
every test id exactly once, and per row what the competition's task writes there
(pipeline/tasks/: a class id in range, P(class 1) in [0, 1], ...).

`check_submission` is what Kaggle would reject, caught before an upload: it reads the file
as text (so `3.0`, ` 7` or an empty cell are seen as written) and names the first defect
in one line; the rows' values are checked by the task's `check_values`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from competition.spec import CompetitionSpec
from pipeline.core.csv_bounds import LABEL_CSV, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.foreign import quoted


class SubmissionError(ValueError):
    """A submission Kaggle would reject; the message is one line naming the file and the defect."""


@dataclass(frozen=True)
class SubmissionSummary:
    rows: int
    classes_used: int
    bytes: int


def submission_frame(spec: CompetitionSpec, ids: Iterable[str], column: Iterable) -> pd.DataFrame:
    """The frame Kaggle expects, ids in the order given; `column` as the task writes its values
    (`Task.submission_column`): a value a row, or a row of values where a label has a column."""
    frame = pd.DataFrame({spec.id_column: list(ids)})
    if not spec.column_per_label:
        frame[spec.label_column] = list(column)
        return frame
    values = pd.DataFrame(list(column), columns=list(spec.submission_columns), index=frame.index)
    return pd.concat([frame, values], axis=1)


def _ids(values: pd.Series, limit: int = 3) -> str:
    shown = ", ".join(quoted(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def check_submission(
    path: Path, spec: CompetitionSpec, expected_ids: Iterable[str], check_values: Callable
) -> SubmissionSummary:
    """Raise SubmissionError on the first defect of the CSV at `path`; a summary when it is valid.
    The header and the ids are checked here; the values by `check_values(path, ids, labels)`, the
    task's (`Task.check_values`: what a row may hold is shaped by the label)."""
    path = Path(path)
    if not path.is_file():
        raise SubmissionError(f"{path}: no such file")
    try:
        check_csv(path, LABEL_CSV, id_column=spec.id_column)  # bounded before pandas reads it whole
    except PetalsError as err:
        raise SubmissionError(str(err)) from None
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SubmissionError(f"{path}: not a readable CSV ({reason})") from None
    header = [spec.id_column, *spec.submission_columns]
    if list(frame.columns) != header:
        raise SubmissionError(f"{path}: header is {','.join(frame.columns)!r}, expected {','.join(header)!r}")
    ids = frame[spec.id_column]
    # one column's values, or (a column per label) the frame of them
    labels = frame[list(spec.submission_columns)] if spec.column_per_label else frame[spec.label_column]
    duplicated = ids[ids.duplicated()].unique()
    if len(duplicated):
        raise SubmissionError(f"{path}: {len(duplicated)} duplicate id(s): {_ids(duplicated)}")
    expected = pd.Index(list(expected_ids))
    unknown = ids[~ids.isin(expected)]
    if len(unknown):
        raise SubmissionError(
            f"{path}: {len(unknown)} id(s) not in the test set ({spec.sample_submission}): "
            f"{_ids(unknown.values)}"
        )
    missing = expected[~expected.isin(ids)]
    if len(missing):
        raise SubmissionError(
            f"{path}: {len(missing)} of the {len(expected)} test id(s) missing: {_ids(missing.values)}"
        )
    return check_values(path, ids, labels)


def read_sample_ids(text: str, spec: CompetitionSpec, source: str) -> list[str]:
    """The test ids of `sample_submission.csv` (its text), in its order."""
    from io import StringIO

    frame = pd.read_csv(StringIO(text), dtype=str, keep_default_na=False)
    if spec.id_column not in frame.columns:
        raise SubmissionError(f"{source}: no {spec.id_column!r} column")
    return frame[spec.id_column].tolist()
