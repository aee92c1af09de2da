"""The submission format: `id,<label column>`, every test id exactly once, and per row a class id
in range or, for a probability submission (`submission.value = "probability"`), P(class 1) in
[0, 1].

`check_submission` is what Kaggle would reject, caught before an upload: it reads the file
as text (so `3.0`, ` 7` or an empty cell are seen as written) and names the first defect
in one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from competition.spec import CompetitionSpec

_INTEGER = r"^-?[0-9]+$"


class SubmissionError(ValueError):
    """A submission Kaggle would reject; the message is one line naming the file and the defect."""


@dataclass(frozen=True)
class SubmissionSummary:
    rows: int
    classes_used: int
    bytes: int


def submission_frame(spec: CompetitionSpec, ids: Iterable[str], values: Iterable) -> pd.DataFrame:
    """Predictions as the two-column frame Kaggle expects, ids in the order given: class ids, or
    probabilities written with 6 decimals."""
    if spec.submission_value == "probability":
        column = [f"{p:.6f}" for p in np.asarray(list(values), dtype=np.float64)]
    else:
        column = np.asarray(list(values), dtype=np.int64)
    return pd.DataFrame({spec.id_column: list(ids), spec.label_column: column})


def _ids(values: pd.Series, limit: int = 3) -> str:
    shown = ", ".join(repr(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def check_submission(path: Path, spec: CompetitionSpec, expected_ids: Iterable[str]) -> SubmissionSummary:
    """Raise SubmissionError on the first defect of the CSV at `path`; a summary when it is valid."""
    path = Path(path)
    if not path.is_file():
        raise SubmissionError(f"{path}: no such file")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SubmissionError(f"{path}: not a readable CSV ({reason})") from None
    header = [spec.id_column, spec.label_column]
    if list(frame.columns) != header:
        raise SubmissionError(f"{path}: header is {','.join(frame.columns)!r}, expected {','.join(header)!r}")
    ids, labels = frame[spec.id_column], frame[spec.label_column]
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
    if spec.submission_value == "probability":
        return _check_probabilities(path, ids, labels, spec)
    bad = labels[~labels.str.match(_INTEGER)]
    if len(bad):
        row = bad.index[0]
        raise SubmissionError(
            f"{path}: label {bad.iloc[0]!r} for id {ids[row]!r} (line {row + 2}) "
            "is not an integer class index"
        )
    values = labels.astype(np.int64)
    outside = values[(values < 0) | (values >= spec.num_classes)]
    if len(outside):
        row = outside.index[0]
        raise SubmissionError(
            f"{path}: label {outside.iloc[0]} for id {ids[row]!r} (line {row + 2}) "
            f"is outside 0..{spec.num_classes - 1}"
        )
    return SubmissionSummary(rows=len(frame), classes_used=int(values.nunique()), bytes=path.stat().st_size)


def _check_probabilities(path: Path, ids: pd.Series, values: pd.Series, spec: CompetitionSpec):
    numbers = pd.to_numeric(values, errors="coerce")
    bad = values[numbers.isna() | (numbers < 0) | (numbers > 1)]
    if len(bad):
        row = bad.index[0]
        raise SubmissionError(
            f"{path}: {spec.label_column} {bad.iloc[0]!r} for id {ids[row]!r} (line {row + 2}) "
            "is not a probability in [0, 1]"
        )
    return SubmissionSummary(
        rows=len(values), classes_used=int((numbers >= 0.5).nunique()), bytes=path.stat().st_size
    )


def read_sample_ids(text: str, spec: CompetitionSpec, source: str) -> list[str]:
    """The test ids of `sample_submission.csv` (its text), in its order."""
    from io import StringIO

    frame = pd.read_csv(StringIO(text), dtype=str, keep_default_na=False)
    if spec.id_column not in frame.columns:
        raise SubmissionError(f"{source}: no {spec.id_column!r} column")
    return frame[spec.id_column].tolist()
