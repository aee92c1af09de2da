"""A competition's splits as the stages read them, whatever its kind of data.

`train_and_val` and `split_for` give `Split`s, read by the competition's reader
(pipeline/data/readers/): TFRecord shards (`RecordSplit`) or the examples of an image folder or a
table (`FileSplit`). Both make datasets of the same structure, (inputs, labels) to train and
(inputs, label[, id]) or (inputs, id) to predict, count their examples and classes, and turn an
unreadable file into one line that names it. Where Kaggle gives no val split, val is one of
`VAL_FOLDS` stratified folds of train, the same on every machine. With `train.folds`, train and
val are the two parts of one fold of the data's fold table (pipeline/data/folds.py): every
labelled example pooled, dealt by id. A fold's training part may also hold pseudo-labelled test
examples (`pseudo`, pipeline/cv/pseudo.py): they are trained on, counted and cached, never part
of a val split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown
from pipeline.data import folds, groups, targets
from pipeline.data.folds import FoldTable
from pipeline.data.readers import Pool, Split, reader_for

VAL_FOLDS = 10  # where the data has no val split: a tenth of train


def fold_table(data_dir: Path, spec: CompetitionSpec, config: Config) -> FoldTable | None:
    """The data's fold table when the config trains a fold (`train.folds`), else None."""
    return folds.fold_table(data_dir, spec, config) if config.train.folds else None


def _fold_parts(root: str, spec: CompetitionSpec, config: Config, table: FoldTable) -> tuple[Split, Split]:
    """(trained on, held out) for fold `train.fold` of the table: every labelled example is in
    exactly one of them, each part in id order."""
    pool = reader_for(spec).pool(root, spec, config, folds.pooled_splits(spec, config))
    kept, held = table.kept(config.train.fold), table.held_out(config.train.fold)
    return pool.part(table.ids[kept], table.labels[kept]), pool.part(table.ids[held], table.labels[held])


def held_out(
    labels: np.ndarray, folds: int, fold: int, grouped: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) rows: fold `fold` of `folds` stratified folds of `labels` (with `grouped`,
    each group whole on one side), the same on every machine, each in the original order."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    if not 0 <= fold < folds:
        raise ValueError(f"held_out needs 0 <= fold < folds, got {fold} of {folds}")  # a caller's bug
    most = int(np.unique(targets.strata(labels), return_counts=True)[1].max(initial=0))
    if most < folds:  # scikit-learn's own refusal is a traceback
        raise PetalsError(
            f"{len(labels)} labelled examples, at most {most} of a class: a stratified val split of "
            f"one in {folds} needs {folds} examples of some class; add examples"
        )
    if grouped is None:
        folding = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
    elif len(set(grouped)) < folds:
        raise PetalsError(
            f"the labelled examples form {len(set(grouped))} groups: a val split of whole groups needs "
            f"{folds}, one in {folds} held out"
        )
    else:
        folding = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=0)
    kept, held = targets.stratified(folding, labels, grouped)[fold]
    return np.sort(kept), np.sort(held)


def _held_out_val(pool: Pool, root: str, spec: CompetitionSpec) -> tuple[Split, Split]:
    """(kept, held out): fold 0 of `VAL_FOLDS` of the pool, each part in the pool's order, each
    group of the competition's whole on one side."""
    ids, labels = pool.ids_and_labels()
    grouped = groups.group_ids(root, spec, ["train"], ids)
    if grouped is None:
        groups.warn_if_suspected(root, spec, ("train",), ids, labels)
    kept, held = held_out(labels, VAL_FOLDS, 0, grouped)
    return pool.part(ids[kept], labels[kept]), pool.part(ids[held], labels[held])


def _check_own_val(root: str, spec: CompetitionSpec, train: Pool, val: Pool) -> None:
    """One line where the competition names groups and its own val split shares one with train: a
    score on that val counts rows of groups the model trained on."""
    if not spec.grouped:
        return
    ids = [pool.ids_and_labels()[0] for pool in (train, val)]
    found = groups.group_ids(root, spec, ["train", "val"], np.concatenate(ids))
    kept, held = np.arange(len(ids[0])), len(ids[0]) + np.arange(len(ids[1]))
    shared = groups.split_groups(held, kept, found)
    if shared:
        raise PetalsError(
            f"{root}: the competition's val split shares {len(shared)} groups with train (e.g. "
            f"{shown(shared[0])}): its score would count groups the model trained on; merge them "
            "(train.merge_val=true) and hold out whole groups with FOLDS=5"
        )


def train_and_val(
    root: str, spec: CompetitionSpec, config: Config, table: FoldTable | None = None
) -> tuple[Split, Split | None]:
    """The training split and the val split scored after epochs (None with `train.merge_val`):
    the data's own val split where it has one, else a tenth of train held out; with
    `train.folds`, fold `train.fold` of `table` (`fold_table`)."""
    train = config.train
    if train.folds:
        if table is None or table.k != train.folds:
            raise ValueError("train.folds needs the data's fold table of as many folds")  # a caller's bug
        return _fold_parts(root, spec, config, table)
    reader = reader_for(spec)
    own_val = "val" in spec.labeled_splits
    if train.merge_val:
        return reader.pool(root, spec, config, ["train", "val"] if own_val else ["train"]).whole(), None
    if own_val:
        train_part, val_part = (reader.pool(root, spec, config, [name]) for name in ("train", "val"))
        _check_own_val(root, spec, train_part, val_part)
        return train_part.whole(), val_part.whole()
    return _held_out_val(reader.pool(root, spec, config, ["train"]), root, spec)


def split_for(
    root: str, spec: CompetitionSpec, config: Config, split: str, table: FoldTable | None = None
) -> Split:
    """The split a trained run predicts: `val` as it was held out in training, or `test`."""
    if split == "val":
        val = train_and_val(root, spec, config, table)[1]
        if val is None:
            raise PetalsError("train.merge_val=true: the run trained on its val split, none is held out")
        return val
    return reader_for(spec).pool(root, spec, config, [split]).whole()


def shown_again(
    root: str, spec: CompetitionSpec, config: Config, ids: np.ndarray, labels: np.ndarray
) -> Split:
    """The labelled examples `ids` (targets `labels`) read again from the splits a val split or a
    fold table draws them from: to show them (evaluate's mistakes). A text split keeps the order
    of `ids`; shards keep theirs, so a caller pairs what it reads with the ids it reads with."""
    if config.train.folds:
        names = folds.pooled_splits(spec, config)
    else:
        names = ["val"] if "val" in spec.labeled_splits else ["train"]
    return reader_for(spec).pool(root, spec, config, names).part(ids, labels)
