"""The numeric columns an example's row holds beside its image (`[data] feature_columns`).

Read from the split's CSV (a labelled split's label CSV, an unlabelled one's `table`), by id, as
float32 [examples, columns]: what an `image_table` input standardises and feeds its network. A
missing column, a row missing for an id, or a cell that is not a finite number is refused in one
line naming the file, the row (its line and id) and the column.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown


def numbers(path, rows, ids: np.ndarray, columns: tuple[str, ...], id_column: str) -> np.ndarray:
    """The `columns` of `rows` (the CSV at `path` as strings, indexed by `id_column`) for each of
    `ids`, in their order, as float32 [len(ids), len(columns)]."""
    import pandas as pd

    missing = [column for column in columns if column not in rows.columns]
    if missing:
        raise PetalsError(
            f"{path}: no column {shown(missing[0])} of [data] feature_columns "
            f"(columns: {shown(', '.join(rows.columns))})"
        )
    absent = [key for key in ids if key not in rows.index]
    if absent:
        raise PetalsError(f"{path}: no row for {id_column} {shown(absent[0])} (its image is there)")
    cells = rows.loc[list(ids), list(columns)]
    values = cells.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(values) | (np.abs(values) > np.finfo(np.float32).max)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        line = rows.index.get_loc(ids[row]) + 2  # after the header, counted from 1
        raise PetalsError(
            f"{path}: line {line} ({id_column} {shown(ids[row])}) column {shown(columns[col])}: "
            f"{shown(cells.iat[row, col])} is not a finite number"
        )
    return values.astype(np.float32)
