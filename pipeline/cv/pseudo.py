"""Pseudo-labels from a CV group (`train.pseudo_labels`), never reaching a fold's validation part.

A student's fold f trains on its labelled part and on the test examples that the teacher group's
fold-f run predicts with a top probability of at least `train.pseudo_threshold`, labelled with
that prediction. The teacher's fold f never trained on fold f's held-out examples, so nothing it
learnt from them reaches student fold f, and its val score stays out of fold. Only the same fold
table (same data, K and seed) can promise that: another is refused, as is a teacher fold without
test predictions of this data. Test ids are unlabelled, so a pseudo id that is a labelled id is
refused too. At most `train.pseudo_max_share` pseudo examples per labelled training example are
taken, the most confident first. Each student run writes `pseudo_labels.csv`: which examples, the
label, the teacher's confidence and which run gave it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.paths import check_name
from pipeline.core.rundir import RunDir
from pipeline.data.folds import FoldTable
from pipeline.modeling.inference import Predictions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PseudoLabels:
    """Test examples a teacher fold labelled confidently, in id order."""

    ids: np.ndarray  # str
    labels: np.ndarray  # int64: the teacher's most probable class
    confidence: np.ndarray  # float32: its probability
    teacher: str  # the teacher fold run's id

    def __len__(self) -> int:
        return len(self.ids)


def teacher_run(runs_dir: Path, config: Config, table: FoldTable) -> RunDir:
    """The teacher group's run of this config's fold, after checking the group dealt the same folds."""
    train = config.train
    name = check_name(train.pseudo_labels, "train.pseudo_labels")
    group = RunDir(Path(runs_dir) / name)
    if not group.file(RunDir.GROUP).is_file():
        raise PetalsError(
            f"train.pseudo_labels={name}: no CV group {group} ({RunDir.GROUP}); "
            f"train it first (make train FOLDS={train.folds})"
        )
    described = group.read_json(RunDir.GROUP)
    if described.get("fold_table") != table.digest:
        raise PetalsError(
            f"train.pseudo_labels={name}: the group's fold table {described.get('fold_table')} "
            f"(FOLDS={described.get('folds')}, fold_seed={described.get('fold_seed')}) is not this run's "
            f"{table.digest} (FOLDS={table.k}, fold_seed={table.seed}): its folds saw other folds' val parts"
        )
    fold_run = described.get("fold_runs", {}).get(str(train.fold))
    if not fold_run:
        raise PetalsError(f"train.pseudo_labels={name}: {RunDir.GROUP} names no run for fold {train.fold}")
    run = RunDir(Path(runs_dir) / check_name(fold_run, f"fold {train.fold}'s run", group.file(RunDir.GROUP)))
    from pipeline.cv.group import check_dealt

    check_dealt(run, train.fold, table)  # the fold run itself, not only the group's record of it
    return run


def teacher_predictions(run: RunDir, group: str, folds: int, manifest: dict) -> Predictions:
    """The teacher fold run's test predictions (without TTA if there are those), of this data's test set."""
    candidates = [run.predictions("test"), *sorted(run.path.glob("test_predictions-tta*.npz"))]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise PetalsError(
            f"{run.name}: the teacher fold has no test predictions; run `make predict FOLDS={folds}` "
            f"for {group} first"
        )
    predictions = Predictions.load(path)
    try:
        made_from = json.loads(predictions.source).get("data")
    except (json.JSONDecodeError, AttributeError, RecursionError):  # a kernel's output says anything
        made_from = None
    if made_from != manifest.get("fingerprint"):
        raise PetalsError(
            f"{path}: test predictions of other data ({made_from}), not this data dir's "
            f"({manifest.get('fingerprint')}); run `make predict FOLDS={folds}` for {group} again"
        )
    return predictions


def select(predictions: Predictions, threshold: float, limit: int, teacher: str) -> PseudoLabels:
    """The examples whose top probability is at least `threshold`, at most `limit` of them (the
    most confident; ties by id), in id order."""
    confidence = predictions.probabilities.max(axis=1)
    ids = predictions.ids.astype(str)
    rows = np.flatnonzero(confidence >= threshold)
    if len(rows) > limit:
        by_confidence = np.lexsort((ids[rows], -confidence[rows]))  # last key sorts first
        rows = rows[by_confidence[:limit]]
    rows = rows[np.argsort(ids[rows], kind="stable")]
    return PseudoLabels(
        ids[rows],
        predictions.probabilities[rows].argmax(axis=1).astype(np.int64),
        confidence[rows].astype(np.float32),
        teacher,
    )


def check_apart(pseudo: PseudoLabels, table: FoldTable) -> None:
    """One line when a pseudo id is a labelled one: it could be a val example of the fold."""
    shared = np.intersect1d(pseudo.ids, table.ids.astype(str))
    if shared.size:
        raise PetalsError(
            f"pseudo-label id {shared[0]!r} (of {pseudo.teacher}'s test predictions) is a labelled "
            f"example's id ({shared.size} are): test and labelled ids must differ"
        )


def for_fold(runs_dir: Path, config: Config, table: FoldTable, manifest: dict, labelled: int) -> PseudoLabels:
    """This fold's pseudo-labels: the teacher group's same fold's confident test predictions, at
    most `pseudo_max_share` x the `labelled` training examples."""
    train = config.train
    run = teacher_run(runs_dir, config, table)
    predictions = teacher_predictions(run, train.pseudo_labels, train.folds, manifest)
    limit = int(train.pseudo_max_share * labelled)
    chosen = select(predictions, train.pseudo_threshold, limit, run.name)
    check_apart(chosen, table)
    log.info(
        "train: fold %d: %d of %d test examples pseudo-labelled by %s (top probability >= %g)",
        train.fold,
        len(chosen),
        len(predictions.ids),
        run.name,
        train.pseudo_threshold,
    )
    return chosen


def attached(train, pseudo: PseudoLabels, root: str, spec: CompetitionSpec, config: Config):
    """A fold's training part (a `Split`) that also trains on the pseudo-labelled test examples."""
    from pipeline.data.readers import reader_for

    if not len(pseudo):
        return train
    test = reader_for(spec).pool(root, spec, config, ["test"])
    return replace(train, pseudo=test.as_pseudo(pseudo.ids, pseudo.labels, f"{pseudo.teacher}'s predictions"))


def write_csv(path: Path, pseudo: PseudoLabels) -> None:
    """`pseudo_labels.csv`: id, label, confidence, teacher run: what the run trained on besides its fold."""
    import pandas as pd

    frame = pd.DataFrame(
        {"id": pseudo.ids, "label": pseudo.labels, "confidence": pseudo.confidence, "teacher": pseudo.teacher}
    )
    write_atomically(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6f"))
