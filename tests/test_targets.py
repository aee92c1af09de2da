"""Targets of any shape (pipeline/data/targets.py): a class id, or a row of 0/1 over the
labels, or a row of numbers (a regression's). Padding, counts and strata come out the same for class
ids as before rows existed."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from pipeline.core.errors import PetalsError
from pipeline.data import datasets, folds, targets

IDS = np.array([2, 0, 2, 1])
ROWS = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0], [1, 0, 1]], np.int32)


def test_padding_is_shaped_as_the_targets_and_found_again():
    for labels in (IDS, ROWS):
        padded = np.concatenate([labels.astype(np.int32), targets.padding(labels, 2)])
        assert padded.shape[1:] == labels.shape[1:]
        assert targets.real(padded).tolist() == [True] * 4 + [False] * 2
        assert (~datasets.is_padding(tf.constant(padded)).numpy()).tolist() == targets.real(padded).tolist()
    assert targets.real(np.zeros((1, 3), np.int32)).tolist() == [True]  # a leaf with no label is real


def test_class_counts_count_a_row_once_in_each_label_it_holds():
    assert targets.class_counts(IDS, 4).tolist() == [1, 1, 2, 0]  # np.bincount, as before
    assert targets.class_counts(ROWS, 3).tolist() == [2, 1, 2]


def test_strata_are_the_class_ids_or_each_rows_combination():
    assert targets.strata(IDS).tolist() == IDS.tolist()
    strata = targets.strata(ROWS)
    assert strata[0] == strata[3] and len(set(strata.tolist())) == 3
    with pytest.raises(
        PetalsError, match="63 labels: folds stratify by the combination of labels, at most 62"
    ):
        targets.strata(np.zeros((2, 63), np.int32))


def test_a_label_rarer_than_the_folds_is_named_in_one_line_a_rarer_combination_is_dealt():
    with pytest.raises(PetalsError, match="class 'rust' has 1 labelled examples, fewer than the folds"):
        folds.check_folds(2, ROWS, ("complex", "rust", "scab"))
    rows = np.concatenate([ROWS] * 3)  # every label 3 times or more; the empty row alone three times
    table = folds.deal(np.array([f"{k:02d}" for k in range(len(rows))]), rows, 3, seed=0)
    assert sorted(np.bincount(table.folds).tolist()) == [4, 4, 4]
    assert table.labels.shape == rows.shape  # the table holds the targets; its file, their strata


def test_dense_targets_are_one_hot_class_ids_or_the_rows_as_floats():
    one_hot = targets.dense_tf(tf.constant(IDS), 3).numpy()
    assert one_hot.tolist() == np.eye(3)[IDS].tolist()
    assert targets.dense_tf(tf.constant(ROWS), 3).numpy().tolist() == ROWS.astype(np.float32).tolist()


NUMBERS = np.array([[37.0], [-1.0], [100.0], [2.5]], np.float32)  # a regression's rows of one number


def test_a_number_pads_as_nan_so_a_target_of_minus_one_stays_real():
    padded = np.concatenate([targets.stored(NUMBERS), targets.padding(NUMBERS, 2)])
    assert padded.dtype == np.float32 and targets.real(padded).tolist() == [True] * 4 + [False] * 2
    assert (~datasets.is_padding(tf.constant(padded)).numpy()).tolist() == targets.real(padded).tolist()
    assert targets.class_counts(NUMBERS, 1).tolist() == [4]  # every example, in its one column
    assert targets.dense_tf(tf.constant(NUMBERS), 1).numpy().tolist() == NUMBERS.tolist()  # never one-hot


def test_numbers_are_stratified_by_equal_count_quantile_bins():
    rng = np.random.default_rng(0)
    scores = rng.gamma(2.0, 15.0, (512, 1)).astype(np.float32)  # skewed, as Pawpularity's are
    bins = targets.strata(scores)
    assert bins.max() == 9  # Sturges: 1 + log2(512) = 10 bins
    assert np.bincount(bins).min() >= 50  # about 51 each, however skewed the scores
    assert (np.diff(bins[np.argsort(scores[:, 0])]) >= 0).all()  # in the order of the scores
    assert len(set(targets.strata(np.full((6, 1), 3.0, np.float32)).tolist())) == 1  # one value: one bin


@pytest.mark.parametrize("grouped", [False, True])
def test_folds_of_numbers_spread_the_scores_and_keep_groups_whole(grouped):
    rng = np.random.default_rng(1)
    scores = rng.uniform(1, 100, (300, 1)).astype(np.float32)
    ids = np.array([f"{k:03d}" for k in range(300)])
    groups = np.repeat(np.arange(100), 3) if grouped else None
    table = folds.deal(ids, scores, 5, seed=0, grouped=groups)
    bins = targets.strata(scores)
    for fold in range(5):
        held = table.held_out(fold)
        assert 40 <= len(held) <= 80 and len(set(bins[held].tolist())) >= 7  # low to high scores
        if grouped:
            assert not set(groups[held]) & set(groups[table.kept(fold)])
