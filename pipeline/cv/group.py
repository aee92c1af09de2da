"""A CV group: K fold runs of one recipe on one fold table, and what they say together.

`runs/<group-id>/` (a run dir in shape: `pipeline.core.rundir.RunDir`) holds `group.json` (the
recipe, the fold table's digest and K, and each fold's run id), `oof_predictions.npz` (every
labelled example exactly once, in id order, predicted by the fold run that never trained on it),
`test_predictions.npz` (the fold runs' test probabilities averaged) and `metrics.json`: the CV
score (the metric on the out-of-fold rows), each fold's score, their mean and spread, and the
epoch CV chooses (the best of the folds' mean val curve), which a refit on all data trains to.
The functions here are plain numpy over predictions; `pipeline.cv.experiment` runs the folds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.data.folds import FoldTable
from pipeline.modeling.inference import Predictions

KIND = "cv"


def fold_config(config: Config, fold: int) -> Config:
    """The config of fold `fold`'s run: the group's, holding that fold out."""
    return dataclasses.replace(config, train=dataclasses.replace(config.train, fold=fold))


def group_id(config: Config, identity: str) -> str:
    """Same recipe, overrides, K, seed and data -> the same group: `cv5-<recipe>-<backbone>-<hash>`.
    Which fold a config holds out is not part of it."""
    described = fold_config(config, 0).to_dict()
    digest = hashlib.sha256(json.dumps([KIND, described, identity], sort_keys=True).encode()).hexdigest()
    return f"{KIND}{config.train.folds}-{config.recipe}-{config.model.backbone}-{digest[:8]}"


def fold_tags(config: Config, identity: str) -> dict:
    """A fold run's tags in its tracking (pipeline/runs/tracking.py): its group and fold."""
    return {"cv_group": group_id(config, identity), "fold": config.train.fold}


def missing(table: FoldTable, held: dict[int, Predictions]) -> list[int]:
    return [fold for fold in range(table.k) if fold not in held]


def check_dealt(run, fold: int, table: FoldTable) -> None:
    """One line unless fold run `run` was trained on this fold table: with another (another
    scikit-learn's deal, a table dealt again), its training part may hold this table's val rows."""
    from pipeline.core.rundir import RunDir

    recorded = run.read_json(RunDir.RUN_INFO, default={}).get("fold_table")
    if recorded != table.digest:
        raise PetalsError(
            f"fold {fold} ({run.name}): trained on fold table {recorded or 'unrecorded'}, not this data's "
            f"{table.digest}: its training part may hold this table's val rows; train it again (RETRAIN=1)"
        )


def out_of_fold(table: FoldTable, held: dict[int, Predictions]) -> Predictions:
    """Every labelled example once, in the table's id order, with the probabilities of the fold
    run that held it out. A fold whose predictions are not exactly its held-out examples, with
    their labels, was trained on other data or another table: refused, never blended in."""
    absent = missing(table, held)
    if absent:
        raise PetalsError(f"folds {', '.join(map(str, absent))} of {table.k} are not trained: no OOF yet")
    width = {p.probabilities.shape[1] for p in held.values()}
    if len(width) != 1:
        raise PetalsError(f"the fold runs predict different numbers of classes ({sorted(width)})")
    probabilities = np.zeros((len(table), width.pop()), np.float32)
    for fold, predictions in sorted(held.items()):
        rows = table.held_out(fold)
        wanted = table.ids[rows]
        if len(predictions.ids) != len(rows) or set(predictions.ids.tolist()) != set(wanted.tolist()):
            raise PetalsError(
                f"fold {fold}: its run predicted {len(predictions.ids)} val examples, not the {len(rows)} "
                f"the fold table holds out (table {table.digest}): trained on other data or folds"
            )
        ordered = predictions.by_ids(wanted)
        if ordered.labels is not None and not np.array_equal(ordered.labels, table.labels[rows]):
            raise PetalsError(f"fold {fold}: its val labels are not the fold table's: trained on other data")
        probabilities[rows] = ordered.probabilities
    tta = {p.tta for p in held.values()}.pop()
    return Predictions(table.ids, probabilities, table.labels, tta=tta, source=f"cv {table.digest}")


def scores(spec, table: FoldTable, oof: Predictions) -> dict:
    """The CV score (the metric over every out-of-fold row at once), each fold's, and their spread,
    at the metric's own decision (a multi-label row's labels at 0.5; a group's metrics take its CV
    score from the task's evaluation, thresholds cross-fitted); the task's accuracy over every
    out-of-fold row."""
    from pipeline.tasks.competitions import task_of

    metric = spec.metric
    per_fold = [
        float(metric.score(table.labels[rows], oof.probabilities[rows]))
        for rows in (table.held_out(fold) for fold in range(table.k))
    ]
    return {
        "cv_score": float(metric.score(table.labels, oof.probabilities)),
        "fold_scores": per_fold,
        "fold_mean": float(np.mean(per_fold)),
        "fold_std": float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else 0.0,
        "cv_accuracy": task_of(spec).scores(oof.probabilities, table.labels)["accuracy"],
    }


def mean_curve(histories: list, column: str):
    """The folds' val scores averaged per epoch, over the epochs every fold scored (None if none)."""
    import pandas as pd

    curves = [h.dropna(subset=[column]).set_index("epoch")[column] for h in histories if column in h]
    if len(curves) != len(histories) or not curves:
        return None
    mean = pd.concat(curves, axis=1, join="inner").mean(axis=1)
    return None if mean.empty else mean


def cv_epoch(histories: list, column: str, greater_is_better: bool) -> int | None:
    """The epoch whose val score, averaged over the folds, is best: what a refit on all the data
    trains to. Only epochs every fold scored count; None when none did (no val curves)."""
    mean = mean_curve(histories, column)
    if mean is None:
        return None
    return int(mean.idxmax() if greater_is_better else mean.idxmin())


def score_at_epoch(histories: list, column: str, epoch: int | None) -> float | None:
    """The folds' mean val score at one epoch for all. Each fold's OOF rows come from its own best
    epoch, chosen on those rows: the CV score leans optimistic by that choice; this one leans less
    (one epoch chosen for all, on the mean)."""
    mean = mean_curve(histories, column)
    return None if mean is None or epoch is None else float(mean.loc[epoch])


def last_scores(histories: list, column: str) -> list[float] | None:
    """Each fold's val score at its last scored epoch: the schedule as written, with no epoch chosen
    on the rows that score it (None without val curves). On folds of a few dozen rows the best of
    six epochs is the luckiest of six draws; the last is one draw."""
    curves = [h.dropna(subset=[column])[column] for h in histories if column in h]
    if len(curves) != len(histories) or any(c.empty for c in curves):
        return None
    return [float(c.iloc[-1]) for c in curves]


def averaged(tests: list[Predictions]) -> Predictions:
    """The fold runs' test probabilities averaged, in the first run's id order."""
    first = tests[0]
    ids = set(first.ids.tolist())
    for other in tests[1:]:
        if set(other.ids.tolist()) != ids:
            raise PetalsError("the fold runs predicted different test examples: predict them on one data dir")
    stacked = np.stack([first.probabilities, *(t.by_ids(first.ids).probabilities for t in tests[1:])])
    return Predictions(first.ids, stacked.mean(axis=0), tta=first.tta, source="cv mean of folds")
