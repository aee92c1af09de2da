"""A regression's submission values: a finite number per row, written with up to 6 decimals, and
what Kaggle would reject in them, read as written (`n/a`, `inf` or an empty cell are no number)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from competition.submission import SubmissionError, SubmissionSummary
from pipeline.core.foreign import quoted


def decide(outputs, spec, val=None) -> np.ndarray:
    """Each row's number, clipped to `spec.value_range`, else to the labelled `val` rows' range."""
    numbers = np.ravel(np.asarray(outputs, np.float64))
    if spec.value_range is not None:
        low, high = spec.value_range
    elif val is not None and val.labels is not None:
        low, high = float(np.min(val.labels)), float(np.max(val.labels))
    else:
        raise ValueError("a number submission needs a stated range or the val rows' labels to clip to")
    return np.clip(numbers, low, high)


def column(values) -> list:
    return [f"{v:.6g}" if abs(v) >= 1e6 else f"{v:.6f}".rstrip("0").rstrip(".") for v in np.ravel(values)]


def check(path: Path, ids: pd.Series, values: pd.Series, spec) -> SubmissionSummary:
    """The first cell that is not a finite number, as a SubmissionError naming it."""
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(numbers)
    if bad.any():
        row = values.index[int(np.argmax(bad))]
        raise SubmissionError(
            f"{path}: {spec.label_column} {quoted(values[row])} for id {quoted(ids[row])} (line {row + 2}) "
            "is not a finite number"
        )
    return SubmissionSummary(
        rows=len(values), classes_used=int(pd.Series(numbers).nunique()), bytes=path.stat().st_size
    )
