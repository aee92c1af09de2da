"""What `make inspect` shows of numbers: each labelled split's count, mean, std, minimum, quartiles
and maximum of each target column (`number_summary.csv`, and a table in the terminal), where
classes show their counts (class_counts.py): a number has no rarest class."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.core.foreign import EACH, text
from pipeline.tasks.base import LabelsSummary

STATISTICS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")  # pandas' `describe`


def summary(labeled: dict, spec, config) -> LabelsSummary:
    """A row per labelled split and target column: pandas' `describe` of its numbers."""
    rows = []
    for split, examples in labeled.items():
        numbers = np.asarray(examples.training_examples.labels, np.float64)
        frame = pd.DataFrame(numbers.reshape(len(numbers), -1), columns=list(spec.classes))
        for column, described in frame.describe().T.iterrows():
            rows.append({"split": split, "column": column, **described[list(STATISTICS)].to_dict()})
    table = pd.DataFrame(rows, columns=["split", "column", *STATISTICS])
    table["count"] = table["count"].astype(np.int64)
    return LabelsSummary("number_summary.csv", table, lines(table), index_label=None)


def lines(table: pd.DataFrame) -> list[str]:
    width = max(8, *(len(text(c, EACH)) + 2 for c in table["column"]))
    shown = [f"{'split':<8}{'column':<{width}}{'count':>8}" + "".join(f"{s:>9}" for s in STATISTICS[1:])]
    for row in table.itertuples(index=False):
        figures = "".join(f"{v:>9.4g}" for v in row[3:])
        shown.append(f"{row.split:<8}{text(row.column, EACH):<{width}}{row.count:>8}{figures}")
    return shown
