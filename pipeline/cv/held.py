"""A fold run's predictions wherever it was trained: made from its weights when they are here,
else the ones it saved beside its files (a Kaggle kernel's fold, `pipeline.cv.merge`), checked
against this data dir first. The CV group's OOF and fold mean read them through `held_predictions`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.modeling.inference import Predictions

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition


def held_predictions(
    run: RunDir, competition: Competition, data_dir: Path, split: str, tta: int, platform
) -> Predictions:
    """The fold run's `split` predictions (it is on `competition`): made (or reused)
    from its weights when they are here, else the ones it saved where it was trained, checked
    against this data dir."""
    from pipeline.modeling.inference import predict_split

    if run.best_weights.is_file():  # val at TTA 1: as training scored them, if it kept them
        return predict_split(run, competition, data_dir, split, tta, platform)
    return saved_predictions(run, data_dir, split, tta)


def saved_predictions(run: RunDir, data_dir: Path, split: str, tta: int) -> Predictions:
    """A run's saved predictions without its weights: only of this data dir's labelled data (so its
    val part is this data's fold), at the TTA asked for, and test predictions of this test set."""
    from pipeline.modeling.inference import check_same_data

    manifest = check_same_data(run, data_dir)
    path = run.predictions(split, tta)
    if not path.is_file():
        raise PetalsError(
            f"{run.name}: no weights here and no saved {split} predictions at TTA {tta} ({path.name}): "
            f"copy its {RunDir.BEST} into {run.path}, or use the TTA it was predicted with"
        )
    saved = Predictions.load(path)
    if saved.tta != tta:
        raise PetalsError(f"{path}: predicted with TTA {saved.tta}, not {tta}; delete it")
    made_from = _source(saved.source, path)
    if split != "val" and made_from.get("data") != manifest.get("fingerprint"):
        raise PetalsError(
            f"{path}: {split} predictions of other data ({made_from.get('data')}), not {data_dir}'s "
            f"({manifest.get('fingerprint')}): predict them with the run's weights here"
        )
    return saved


def _source(text: str, path: Path) -> dict:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # a kernel's output says anything: [[[[...
        value = None
    if not isinstance(value, dict):
        raise PetalsError(f"{path}: its source {text[:80]!r} is not what predict writes; delete it")
    return value
