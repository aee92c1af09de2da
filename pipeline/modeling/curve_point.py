"""A probe fold's second point on CV's learning curve: the same fit on half its training rows.

A CV score reads fold models trained on (K-1)/K of the data; the submission is their mean (or a
refit on all of it), which on real texts scored 0.02-0.03 macro-F1 above the fold models
(docs/BENCHMARKS.md, "Real data, judged honestly"). A probe's fit takes seconds, so a fold of a
CV group (train.folds set, a val part to score) also fits it on a nested half of its training
rows (whole groups, stratified by class) and scores that on the same val rows as the full fit:
two sizes, one held-out part, their difference nearly free of the val part's own noise.
`pipeline.cv.curve` extrapolates the folds' pairs to all the data. What is saved is the full fit:
the half is written into the network only to be scored, then the full fit is written back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
from sklearn.model_selection import StratifiedGroupKFold

log = logging.getLogger(__name__)

# The history columns a probe fold writes beside its val score (the full fit's, same val rows).
HALF_ROWS, HALF_SCORE, FULL_ROWS = "curve_half_rows", "curve_half_score", "curve_full_rows"


def wanted(trainer) -> bool:
    """Whether this run measures the point: a CV fold with a val part to score it on."""
    return bool(trainer.config.train.folds) and trainer._val is not None


def nested_half(labels: np.ndarray, groups: np.ndarray, seed: int) -> np.ndarray | None:
    """Half of the training rows (indices), whole groups, every class kept; None where a class has
    fewer than two groups to share between the halves."""
    smallest = min(np.unique(groups[labels == c]).size for c in np.unique(labels))
    if smallest < 2:
        return None
    splitter = StratifiedGroupKFold(2, shuffle=True, random_state=seed)
    kept, _ = next(splitter.split(np.zeros(len(labels)), labels, groups))
    return np.sort(kept)


def measure(trainer, rows: int, half: np.ndarray | None, write_half: Callable[[np.ndarray], None],
            write_full: Callable[[], None]) -> dict[str, float]:  # fmt: skip
    """The half's val score (`write_half(half)` puts it into the network), the full fit written back
    after: the history columns, or none where the half cannot be dealt."""
    if half is None:
        return {}
    write_half(half)
    try:
        score = trainer._score(trainer._val)[trainer.job.spec.score_key]
    finally:
        write_full()  # what is scored after, and saved, is the full fit
    log.info("train: the same fit on half the training rows (%d of %d) scores %.4f on val "
             "(CV's learning curve)", len(half), rows, score)  # fmt: skip
    return {HALF_ROWS: float(len(half)), HALF_SCORE: float(score), FULL_ROWS: float(rows)}
