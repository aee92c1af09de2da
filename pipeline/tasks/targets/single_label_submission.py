"""A single-label submission's values: a class id per row, or for a probability submission
(`submission.value = "probability"`) P(class 1) in [0, 1] written with 6 decimals; and what Kaggle
would reject in them, read as written (`3.0`, ` 7` or an empty cell are not class ids)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from competition.submission import SubmissionError, SubmissionSummary
from pipeline.core.foreign import quoted

_INTEGER = r"^-?[0-9]+$"


def column(values, spec) -> list:
    """The label column as written: class ids, or probabilities with 6 decimals."""
    if spec.submission_value == "probability":
        return [f"{p:.6f}" for p in np.asarray(list(values), dtype=np.float64)]
    return np.asarray(list(values), dtype=np.int64).tolist()


def checker(spec):
    """`check_values(path, ids, labels)` for `competition.submission.check_submission`."""
    return partial(_probabilities if spec.submission_value == "probability" else _class_ids, spec=spec)


def _class_ids(path: Path, ids: pd.Series, labels: pd.Series, spec) -> SubmissionSummary:
    bad = labels[~labels.str.match(_INTEGER)]
    if len(bad):
        row = bad.index[0]
        raise SubmissionError(
            f"{path}: label {quoted(bad.iloc[0])} for id {quoted(ids[row])} (line {row + 2}) "
            "is not an integer class index"
        )
    values = labels.astype(np.int64)
    outside = values[(values < 0) | (values >= spec.num_classes)]
    if len(outside):
        row = outside.index[0]
        raise SubmissionError(
            f"{path}: label {outside.iloc[0]} for id {quoted(ids[row])} (line {row + 2}) "
            f"is outside 0..{spec.num_classes - 1}"
        )
    return SubmissionSummary(rows=len(labels), classes_used=int(values.nunique()), bytes=path.stat().st_size)


def probabilities(path: Path, ids: pd.Series, values: pd.Series, column: str) -> pd.Series:
    """A column's cells as numbers, or a SubmissionError naming the first that is not a
    probability in [0, 1] (an empty cell, `nan`, `1.2`), its column and row."""
    numbers = pd.to_numeric(values, errors="coerce")
    bad = values[numbers.isna() | (numbers < 0) | (numbers > 1)]
    if len(bad):
        row = bad.index[0]
        raise SubmissionError(
            f"{path}: {column} {quoted(bad.iloc[0])} for id {quoted(ids[row])} (line {row + 2}) "
            "is not a probability in [0, 1]"
        )
    return numbers


def _probabilities(path: Path, ids: pd.Series, values: pd.Series, spec) -> SubmissionSummary:
    numbers = probabilities(path, ids, values, spec.label_column)
    return SubmissionSummary(
        rows=len(values), classes_used=int((numbers >= 0.5).nunique()), bytes=path.stat().st_size
    )
