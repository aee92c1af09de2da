"""A regression's submission values: a finite number per row and column, written with up to 6
decimals, and what Kaggle would reject in them, read as written (`n/a`, `inf` or an empty cell are
no number). One column is the competition's `label_column`; several (Feedback Prize ELL's six
scores) are its `submission_columns`, a number each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from competition.submission import SubmissionError, SubmissionSummary
from pipeline.core.foreign import quoted


def decide(outputs, spec, val=None) -> np.ndarray:
    """Each row's numbers, clipped to `spec.value_range`, else to each column's range in the
    labelled `val` rows: [n] for one column, [n, columns] for several."""
    numbers = np.asarray(outputs, np.float64)
    numbers = numbers.reshape(len(numbers), -1)
    if spec.value_range is not None:
        low, high = spec.value_range
    elif val is not None and val.labels is not None:
        labels = np.asarray(val.labels, np.float64).reshape(len(val.labels), -1)
        low, high = labels.min(axis=0), labels.max(axis=0)  # a column's own: scores of unlike scales
    else:
        raise ValueError("a number submission needs a stated range or the val rows' labels to clip to")
    clipped = np.clip(numbers, low, high)
    return clipped[:, 0] if clipped.shape[1] == 1 else clipped


def _written(value: float) -> str:
    return f"{value:.6g}" if abs(value) >= 1e6 else f"{value:.6f}".rstrip("0").rstrip(".")


def column(values, spec=None) -> list:
    """The label column as written: a number a row, or (a column a number) a row of them."""
    values = np.asarray(values)
    if values.ndim == 2 and spec is not None and spec.column_per_label:
        return [[_written(v) for v in row] for row in values]
    return [_written(v) for v in np.ravel(values)]


def check(path: Path, ids: pd.Series, values, spec) -> SubmissionSummary:
    """The first cell that is not a finite number, as a SubmissionError naming it and its column.
    `values`: the one column (a Series), or the frame of them."""
    frame = values.to_frame(spec.label_column) if isinstance(values, pd.Series) else values
    used = 0
    for name in frame.columns:
        cells = frame[name]
        numbers = pd.to_numeric(cells, errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(numbers)
        if bad.any():
            row = cells.index[int(np.argmax(bad))]
            raise SubmissionError(
                f"{path}: {name} {quoted(cells[row])} for id {quoted(ids[row])} (line {row + 2}) "
                "is not a finite number"
            )
        used = max(used, int(pd.Series(numbers).nunique()))
    return SubmissionSummary(rows=len(frame), classes_used=used, bytes=path.stat().st_size)
