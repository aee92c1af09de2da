"""Small data: cross-validation chooses by default (`train.choose_up_to`).

On a few hundred real photos every way of fine-tuning scored what a linear probe on frozen
features scores, and a single val split of a few dozen images could not tell them apart; on
thousands the recipe's fine-tuned block is worth points (the embedded flowers: 0.956 against the
probe's 0.878). So a recipe says up to how many labelled examples `make train` (evaluate, predict)
trains its candidates as K-fold CV groups and takes the one CV prefers (`pipeline.cv.choose`):
the same as `FOLDS=5 CHOOSE=1`, chosen for the user by the data's size. Above it, or where the
recipe has no candidates, a run asked for by name, a val split merged in, or the limit set to 0,
the recipe trains alone as before.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.config import Config
from pipeline.data import targets
from pipeline.data.manifest import read_manifest

FOLDS = 5


def labelled_examples(data_dir, spec) -> int | None:
    """How many labelled examples the fetched data holds (its manifest's counts: a layout's
    `splits`, or TFRecords' `sizes`, the same examples at each size), None if it does not say."""
    manifest = read_manifest(data_dir)
    if manifest is None:
        return None
    splits = manifest.get("splits") or next(iter((manifest.get("sizes") or {}).values()), {})
    counts = []
    for split in spec.labeled_splits:
        found = splits.get(split) if isinstance(splits, dict) else None
        found = found if isinstance(found, dict) else {}
        number = next((v for k, v in found.items() if k != "shards" and isinstance(v, int)), None)
        if number is None:
            return None
        counts.append(number)
    return sum(counts)


def applies(config: Config, count: int | None, has_candidates: bool) -> bool:
    """Whether CV chooses for this config and this many labelled examples."""
    train = config.train
    return bool(
        train.choose_up_to
        and count is not None
        and count <= train.choose_up_to
        and has_candidates
        and not train.folds
        and not train.merge_val
    )


def folds_for(labels: np.ndarray, num_classes: int, grouped: np.ndarray | None) -> int:
    """FOLDS, or fewer where a class has fewer labelled examples (or the data fewer groups): each
    fold holds some of every class, and whole groups."""
    counts = targets.class_counts(labels, num_classes)
    most = int(counts[counts > 0].min()) if counts.any() else 0
    if grouped is not None:
        most = min(most, len(set(grouped)))
    return min(FOLDS, most)


def said(count: int, folds: int, config: Config, names: list[str]) -> str:
    return (
        f"{count:,} labelled examples, at most the recipe's train.choose_up_to "
        f"({config.train.choose_up_to:,}): "
        f"{folds}-fold CV chooses among its candidates ({', '.join(names)}), as FOLDS={folds} CHOOSE=1; "
        "SET=train.choose_up_to=0 trains the recipe alone"
    )
