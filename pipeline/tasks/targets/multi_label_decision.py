"""Which labels a multi-label prediction holds: a threshold per label, chosen on labelled
predictions, and what a row with none over its threshold becomes.

Each label's threshold is the one of THRESHOLDS that gives it the best F1 on the predictions it is
chosen on (the nearest to 0.5 among equals): one label's rare positives need a lower bar than a
common label's (a 2026 public Plant Pathology notebook tuned 0.2 to 0.6 and gained 0.05 of F1 on
its fold). When every labelled example has a label, a row left empty takes its likeliest one, as
the strong Plant Pathology 2021 solutions did (docs/competitions/plant-pathology-2021.md).
"""

from __future__ import annotations

import numpy as np

THRESHOLDS = np.round(np.arange(0.05, 0.96, 0.05), 2)


def choose(labels: np.ndarray, probabilities: np.ndarray) -> dict:
    """The thresholds for these labelled predictions, and whether an empty row is filled."""
    truth = np.asarray(labels) > 0.5
    thresholds = [_best(truth[:, k], probabilities[:, k]) for k in range(truth.shape[1])]
    return {"thresholds": thresholds, "fill_empty": bool(truth.any(axis=1).all())}


def _best(truth: np.ndarray, scores: np.ndarray) -> float:
    if not truth.any():
        return 0.5  # no positive to choose on
    decided = scores[None, :] >= THRESHOLDS[:, None]
    tp = (decided & truth).sum(axis=1)
    f1 = 2 * tp / np.maximum(decided.sum(axis=1) + truth.sum(), 1)
    best = np.flatnonzero(f1 == f1.max())
    return float(THRESHOLDS[best[np.argmin(np.abs(THRESHOLDS[best] - 0.5))]])


def decide(probabilities: np.ndarray, decision: dict) -> np.ndarray:
    """Rows of 0/1: each label over its threshold; an empty row its likeliest label if filled."""
    decided = probabilities >= np.asarray(decision["thresholds"])[None, :]
    if decision["fill_empty"]:
        empty = ~decided.any(axis=1)
        decided[empty, probabilities[empty].argmax(axis=1)] = True
    return decided.astype(np.int32)


def cross_fitted(labels: np.ndarray, probabilities: np.ndarray, groups=None) -> np.ndarray:
    """Rows of 0/1 where each half of the rows (alternate rows; with `groups`, alternate groups, so
    a group is all in one half) is decided by thresholds chosen on the other half: what the
    thresholds earn on rows, and groups, they were not chosen on."""
    rows = np.arange(len(labels)) if groups is None else np.unique(groups, return_inverse=True)[1]
    decided = np.zeros(np.shape(probabilities), np.int32)
    for judged in (rows % 2 == 0, rows % 2 == 1):
        decision = choose(labels[~judged], probabilities[~judged])
        decided[judged] = decide(probabilities[judged], decision)
    return decided
