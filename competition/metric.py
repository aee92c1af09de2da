"""The competition metric: macro-averaged F1, exactly as scikit-learn computes it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import f1_score


def macro_f1(y_true: Sequence[int] | np.ndarray, y_pred: Sequence[int] | np.ndarray) -> float:
    """Macro F1 over the classes present in either labels or predictions (scikit-learn's default)."""
    return float(f1_score(np.asarray(y_true), np.asarray(y_pred), average="macro", zero_division=0))
