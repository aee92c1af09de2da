"""A labelled example's target, in either shape a task gives it: one class id (an integer), or a
row of 0/1 over the classes when an example may carry several labels (the competition's label
cells list names: pipeline/formats/image_csv.py). The task says which it reads
(`Task.label_rank`); what the data and training floors do with targets, they do here without
asking which: pad them, find the padding, count the classes, stratify, make them dense.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.errors import PetalsError

PAD_LABEL = -1  # every entry of a padding example's target (eval_dataset(pad_to_batch=True))
# A row of labels is stratified by its combination, held in one int64: 62 labels at most.
MAX_STRATIFIED_LABELS = 62


def padding(labels: np.ndarray, count: int) -> np.ndarray:
    """`count` padding targets shaped as `labels`' rows."""
    return np.full((count, *np.shape(labels)[1:]), PAD_LABEL, np.int32)


def real(labels: np.ndarray) -> np.ndarray:
    """True for the rows of a batch of targets that are examples, not padding."""
    real = np.asarray(labels) != PAD_LABEL
    return real if real.ndim == 1 else real.any(axis=1)


def class_counts(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Examples per class: a row of labels counts once in each class it holds."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        return labels.sum(axis=0).astype(np.int64)
    return np.bincount(labels, minlength=num_classes)


def strata(labels: np.ndarray) -> np.ndarray:
    """What folds stratify on, one integer an example: the class id, or a row's combination of
    labels as the bits of one integer (Kaggle's way for multi-label data: stratify by the label
    string)."""
    labels = np.asarray(labels)
    if labels.ndim == 1:
        return labels.astype(np.int64)
    if labels.shape[1] > MAX_STRATIFIED_LABELS:
        raise PetalsError(
            f"{labels.shape[1]} labels: folds stratify by the combination of labels, "
            f"at most {MAX_STRATIFIED_LABELS}"
        )
    return (labels.astype(np.int64) << np.arange(labels.shape[1], dtype=np.int64)).sum(axis=1)


def stratified(folding, labels: np.ndarray, groups: np.ndarray | None = None) -> list:
    """`folding.split` (a scikit-learn StratifiedKFold, or StratifiedGroupKFold with `groups`) over
    the targets' strata: (kept, held) row numbers per fold. A class or combination rarer than the
    folds is dealt as it comes, unwarned: a combination of labels often is (the callers refuse a
    class rarer than the folds)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        return list(folding.split(np.zeros(len(labels)), strata(labels), groups))


def dense_tf(labels, num_classes: int):
    """A batch of targets as float rows (TensorFlow, inside tf.data): class ids one-hot, rows of
    labels as they are."""
    import tensorflow as tf

    if labels.shape.rank == 1:
        return tf.one_hot(tf.cast(labels, tf.int32), num_classes, dtype=tf.float32)
    return tf.cast(labels, tf.float32)


def padded_tf(labels):
    """True for the padding examples of a batch of targets (TensorFlow)."""
    import tensorflow as tf

    padded = tf.equal(labels, PAD_LABEL)
    return padded if padded.shape.rank == 1 else tf.reduce_all(padded, axis=-1)
