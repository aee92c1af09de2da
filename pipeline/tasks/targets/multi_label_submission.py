"""A multi-label submission's values, read as written: each cell lists label names separated by
single spaces (`scab frog_eye_leaf_spot`), each a label of the competition's, none twice. An empty
cell is a row with no label: Kaggle's format allows it and scores it as such. Or, a column per
label (Jigsaw's `id,toxic,...`), each cell a probability in [0, 1]."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from competition.submission import SubmissionError, SubmissionSummary
from pipeline.core.foreign import listed, quoted
from pipeline.tasks.targets.single_label_submission import probabilities


def check(path: Path, ids: pd.Series, cells: pd.Series, spec) -> SubmissionSummary:
    """The first cell Kaggle would not read as a list of labels, as a SubmissionError naming it."""
    known, used = set(spec.classes), set()
    for row, cell in cells.items():
        names = cell.split(" ") if cell else []
        bad = next((n for n in names if n not in known), None)
        if bad is not None or len(set(names)) < len(names):
            why = f"{quoted(bad)} is not a label" if bad is not None else "a label is listed twice"
            raise SubmissionError(
                f"{path}: {spec.label_column} {quoted(cell)} for id {quoted(ids[row])} (line {row + 2}): "
                f"{why} "
                f"(labels: {listed(spec.classes)}, separated by single spaces)"
            )
        used.update(names)
    return SubmissionSummary(rows=len(cells), classes_used=len(used), bytes=path.stat().st_size)


def check_columns(path: Path, ids: pd.Series, columns: pd.DataFrame, spec) -> SubmissionSummary:
    """The first cell of a column per label that is not a probability in [0, 1] (an empty cell,
    `nan`, `1.2`), as a SubmissionError naming its column and row."""
    numbers = {column: probabilities(path, ids, columns[column], column) for column in columns.columns}
    held = pd.DataFrame(numbers).ge(0.5).any(axis=0)
    return SubmissionSummary(rows=len(columns), classes_used=int(held.sum()), bytes=path.stat().st_size)
