"""CV's learning curve: what a probe's CV score would read with every labelled row to train on.

Each fold model of a CV group trains on (K-1)/K of the rows; the submission is their mean (or a
refit on all of them). A probe fold also scored the same fit on a nested half of its training
rows, on the same val rows (`pipeline.modeling.curve_point`). Taking the score as linear in the
log of the training rows between those sizes (the slope of a learning curve of that kind, nothing
fitted beyond it), each fold's pair is carried from its training rows to all the group's rows, and
the folds' mean of those gains is added to the CV score. Only a probe's folds carry the pair: a
group of any other candidate has no such figure (None).
"""

from __future__ import annotations

import math

import numpy as np

from pipeline.modeling.curve_point import FULL_ROWS, HALF_ROWS, HALF_SCORE

RULE = "linear in log(training rows), through each fold's full fit and its fit on a nested half"


def fold_pairs(histories: list, key: str) -> list[tuple[float, float, float, float]] | None:
    """Each fold's (half rows, half score, full rows, full score) from its last epoch, or None
    where a fold did not measure them."""
    pairs = []
    for history in histories:
        needed = [HALF_ROWS, HALF_SCORE, FULL_ROWS, key]
        if any(column not in history for column in needed):
            return None
        row = history.dropna(subset=needed)
        if row.empty:
            return None
        last = row.iloc[-1]
        pairs.append(tuple(float(last[c]) for c in needed))
    return pairs or None


def extrapolated(pairs: list[tuple[float, float, float, float]], rows: int, cv_score: float) -> dict:
    """The CV score carried to `rows` training rows along each fold's slope: the expected score, the
    gain, each fold's gain and the slope per doubling of the rows."""
    gains, doublings = [], []
    for half_rows, half_score, full_rows, full_score in pairs:
        slope = (full_score - half_score) / math.log(full_rows / half_rows)
        gains.append(slope * math.log(rows / full_rows))
        doublings.append(slope * math.log(2))
    gain = float(np.mean(gains))
    return {
        "score": round(cv_score + gain, 5),
        "gain": round(gain, 5),
        "rows": rows,
        "fold_gains": [round(g, 5) for g in gains],
        "per_doubling": round(float(np.mean(doublings)), 5),
        "rule": RULE,
    }


def expected(histories: list, key: str, rows: int, cv_score: float) -> dict | None:
    """The group's CV score carried to all its `rows`, or None where its folds measured no pair."""
    pairs = fold_pairs(histories, key)
    return None if pairs is None else extrapolated(pairs, rows, cv_score)
