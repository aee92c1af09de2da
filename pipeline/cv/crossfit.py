"""A choice made on val, scored on rows it was not made on.

Whatever is picked by its val score (a blend's weights, a single run's epoch) flatters that score:
on a few hundred rows the best of several noisy candidates sits above what the choice earns on
new rows. So val is dealt in CROSS_FOLDS parts (stratified, each group whole), each part is scored
with the choice made on the others, and the pooled rows are the score. What is submitted is still
the choice made on all of val.
"""

from __future__ import annotations

import numpy as np

from competition.metric import Metric

CROSS_FOLDS = 5  # val's parts for a choice's score


def val_parts(ids: np.ndarray, labels: np.ndarray, grouped: np.ndarray | None) -> np.ndarray | None:
    """The part (0..k-1) of each val row, in val's order, each group whole: CROSS_FOLDS parts
    stratified by class (or a number's bin, or a combination of labels) where the commonest has a
    row for each; dealt at random otherwise (a val of one row a class), in as many parts as there
    are rows or groups, up to CROSS_FOLDS. None under 2 rows or groups. The deal depends on the
    rows' ids, never on their order."""
    from pipeline.core.errors import PetalsError
    from pipeline.data import folds, targets

    ids = np.asarray(ids).astype(str)
    groups = ids if grouped is None else np.asarray(grouped).astype(str)
    try:
        common = int(np.bincount(targets.strata(labels)).max())
    except PetalsError:  # too many labels to stratify on their combinations
        common = 0
    if common >= CROSS_FOLDS:
        table = folds.deal(ids, labels, CROSS_FOLDS, 0, None if grouped is None else groups)
        position = {i: n for n, i in enumerate(table.ids)}  # the table is in id order; val in its own
        return table.folds[[position[i] for i in ids]]
    names = np.unique(groups)  # sorted
    if len(names) < 2:
        return None
    order = np.random.default_rng(0).permutation(len(names))
    part_of = dict(zip(names[order], np.arange(len(names)) % min(CROSS_FOLDS, len(names)), strict=True))
    return np.array([part_of[g] for g in groups], np.int64)


def crossed_epochs(run, val, spec, grouped) -> dict | None:
    """Where a single run kept the epoch that scored best on its val rows, out of several scored:
    val's rows with each part (`val_parts`) at the epoch the other parts chose (the kept epoch's
    rows as evaluate predicted them, TTA and all), and the epoch each part got. None where nothing
    was chosen: a CV fold (its schedule's end), one scored epoch, a run trained before its epochs'
    val predictions were kept."""
    from pipeline.modeling import val_epochs

    found = val_epochs.choice(run, val.labels, val.probabilities, spec.score_key)
    part = None if found is None else val_parts(val.ids, val.labels, grouped)
    if part is None:
        return None
    epochs, candidates = found
    picked, probabilities = pick_oof(candidates, val.labels, part, spec.metric)
    return {"probabilities": probabilities, "epochs": [epochs[i] for i in picked]}


def pick_oof(
    candidates: list[np.ndarray], labels: np.ndarray, part: np.ndarray, metric: Metric
) -> tuple[list[int], np.ndarray]:
    """(the candidate picked for each part, the pooled predictions): part p's rows are the
    predictions of the candidate that scored best on the other parts (the first of equals)."""
    labels = np.asarray(labels)
    oof = np.zeros(np.shape(candidates[0]), np.float32)
    picked = []
    for p in range(int(part.max()) + 1):
        held = part == p
        best = best_on(candidates, labels, ~held, metric)
        oof[held] = candidates[best][held]
        picked.append(best)
    return picked, oof


def best_on(candidates: list[np.ndarray], labels: np.ndarray, rows: np.ndarray, metric: Metric) -> int:
    """The candidate that scores best on `rows` (a mask), the first of equals."""
    sign = 1.0 if metric.greater_is_better else -1.0
    return int(np.argmax([sign * metric.score(labels[rows], c[rows]) for c in candidates]))


def blend_oof(
    choices: list[list[np.ndarray]], labels: np.ndarray, part: np.ndarray, metric: Metric, weigh
) -> np.ndarray:
    """Val's rows blended part by part, everything chosen on the other parts: each member's
    candidate (a single run's scored epochs; one where it chose nothing) that scores best there on
    its own, then the blend's weights, `weigh(members' rows, labels)` on those rows (searched, or
    the given ones)."""
    from pipeline.cv.blend import blend

    labels = np.asarray(labels)
    oof = np.zeros(np.shape(choices[0][0]), np.float32)
    for p in range(int(part.max()) + 1):
        held = part == p
        members = [c[best_on(c, labels, ~held, metric)] if len(c) > 1 else c[0] for c in choices]
        oof[held] = blend([m[held] for m in members], weigh([m[~held] for m in members], labels[~held]))
    return oof
