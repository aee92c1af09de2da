"""A labelled example's target, in any shape a task gives it: one class id (an integer), a row
of 0/1 over the classes when an example may carry several labels (the competition's label cells
list names: pipeline/formats/image_csv.py), or a row of numbers (float32, a regression's target:
one column, or several). The task says which it reads (`Task.label_rank`, `Task.numeric_target`); what the
data and training floors do with targets, they do here without asking which: pad them, find the
padding, count the classes, stratify, make them dense.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.errors import PetalsError

PAD_LABEL = -1  # every entry of a padding example's target (eval_dataset(pad_to_batch=True))
# A padding example's number: NaN, since -1 is a real target (CommonLit's run from -3.7 to 1.7),
# and a number read from the competition's files is refused when it is not finite.
PAD_NUMBER = np.nan
# A row of labels is stratified by its combination, held in one int64: 62 labels at most.
MAX_STRATIFIED_LABELS = 62


def numeric(labels) -> bool:
    """Whether targets are numbers (a regression's), not class ids or rows of 0/1."""
    return np.asarray(labels).dtype.kind == "f"


def stored(labels: np.ndarray) -> np.ndarray:
    """Targets as tf.data carries them: numbers as float32, class ids and rows of 0/1 as int32."""
    return np.asarray(labels, np.float32 if numeric(labels) else np.int32)


def padding(labels: np.ndarray, count: int) -> np.ndarray:
    """`count` padding targets shaped as `labels`' rows."""
    shape = (count, *np.shape(labels)[1:])
    return np.full(shape, PAD_NUMBER, np.float32) if numeric(labels) else np.full(shape, PAD_LABEL, np.int32)


def real(labels: np.ndarray) -> np.ndarray:
    """True for the rows of a batch of targets that are examples, not padding."""
    labels = np.asarray(labels)
    real = ~np.isnan(labels) if numeric(labels) else labels != PAD_LABEL
    return real if real.ndim == 1 else real.any(axis=1)


def class_counts(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Examples per class: a row of labels counts once in each class it holds; a row of numbers
    once in each column it has a number in (a regression's one column: every example)."""
    labels = np.asarray(labels)
    if numeric(labels):
        return np.isfinite(labels).reshape(len(labels), -1).sum(axis=0).astype(np.int64)
    if labels.ndim == 2:
        return labels.sum(axis=0).astype(np.int64)
    return np.bincount(labels, minlength=num_classes)


def quantile_bins(values: np.ndarray) -> np.ndarray:
    """Numbers as the equal-count bin each falls in, Sturges' count of bins (1 + log2 n: the
    PetFinder Pawpularity notebooks' way to stratify a score); ties share a bin."""
    values = np.asarray(values, np.float64)
    bins = int(1 + np.log2(max(len(values), 1)))
    edges = np.unique(np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1])) if len(values) else []
    return np.searchsorted(edges, values, side="right").astype(np.int64)


def strata(labels: np.ndarray) -> np.ndarray:
    """What folds stratify on, one integer an example: the class id, a row's combination of
    labels as the bits of one integer (Kaggle's way for multi-label data: stratify by the label
    string), or a number's quantile bin (of several numbers a row, their mean's)."""
    labels = np.asarray(labels)
    if numeric(labels):
        numbers = labels.reshape(len(labels), -1)
        # Several numbers a row (Feedback Prize ELL's six scores) move together: each is a rater's
        # view of one writer's level, so the row mean bins that level and every fold gets as many
        # weak and strong writers. The first column alone would balance one score of six; the
        # combinations of every column's bins (the labels' way above) are mostly rows of their own.
        return quantile_bins(numbers[:, 0] if numbers.shape[1] == 1 else numbers.mean(axis=1))
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
    labels and of numbers as they are."""
    import tensorflow as tf

    if labels.shape.rank == 1 and not labels.dtype.is_floating:
        return tf.one_hot(tf.cast(labels, tf.int32), num_classes, dtype=tf.float32)
    return tf.cast(labels, tf.float32)


def padded_tf(labels):
    """True for the padding examples of a batch of targets (TensorFlow)."""
    import tensorflow as tf

    padded = tf.math.is_nan(labels) if labels.dtype.is_floating else tf.equal(labels, PAD_LABEL)
    return padded if padded.shape.rank == 1 else tf.reduce_all(padded, axis=-1)
