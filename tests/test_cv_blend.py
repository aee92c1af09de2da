"""Blends of a CV group judged out of fold: a fold's rows never help choose how they are blended."""

from __future__ import annotations

import numpy as np
import pytest

from competition.metric import METRICS
from pipeline.core.errors import PetalsError
from pipeline.cv import blend as cv_blend

F1, LOG_LOSS = METRICS["macro_f1"], METRICS["log_loss"]
CLASSES, FOLDS = 4, 5


def random_group(seed: int, n: int = 160) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    """Random labels and a balanced fold table for `n` rows."""
    rng = np.random.default_rng(seed)
    return rng, rng.integers(0, CLASSES, n), rng.permutation(np.arange(n) % FOLDS)


def informative_and_noise(rng: np.random.Generator, labels: np.ndarray) -> list[np.ndarray]:
    """One member that leans towards the label, one that is confident and random."""
    n = len(labels)
    good = 0.5 * np.eye(CLASSES)[labels] + 0.5 * rng.dirichlet(np.ones(CLASSES), n)
    return [good, rng.dirichlet(np.full(CLASSES, 0.2), n)]


def noise_members(rng: np.random.Generator, n: int, count: int) -> list[np.ndarray]:
    return [rng.dirichlet(np.ones(CLASSES), n) for _ in range(count)]


def relabelled(rng: np.random.Generator, labels: np.ndarray, folds: np.ndarray, fold: int) -> np.ndarray:
    """The labels with fold `fold`'s rows given new random labels, every other row unchanged."""
    changed = labels.copy()
    held = folds == fold
    changed[held] = rng.integers(0, CLASSES, held.sum())
    assert (changed != labels).any()
    return changed


def test_searched_weights_flatter_their_own_rows_but_the_out_of_fold_score_stays_at_chance():
    rng, labels, folds = random_group(0)
    members = noise_members(rng, len(labels), 3)  # nothing to learn: labels and members are noise
    result = cv_blend.weight_search_oof(members, labels, folds, F1)
    weights = cv_blend.search_weights(members, labels, np.ones(len(members)), F1)
    in_sample = F1.score(labels, cv_blend.blend(members, weights))
    chance = 1 / CLASSES
    assert in_sample > chance + 0.02  # the search fits noise on the rows it is scored on ...
    assert result.score < in_sample - 0.05  # ... which a leaking OOF search would report
    assert result.score < chance + 0.05
    np.testing.assert_allclose(result.weights, weights)


def test_the_weights_for_a_fold_ignore_that_folds_labels():
    rng, labels, folds = random_group(1, 100)
    members = noise_members(rng, len(labels), 3)  # noise: the weights chosen follow the labels seen
    before = cv_blend.weight_search_oof(members, labels, folds, F1)
    after = cv_blend.weight_search_oof(members, relabelled(rng, labels, folds, 2), folds, F1)
    np.testing.assert_array_equal(before.fold_weights[2], after.fold_weights[2])
    moved = [f for f in range(FOLDS) if not np.array_equal(before.fold_weights[f], after.fold_weights[f])]
    assert moved and 2 not in moved  # the other folds' searches saw the new labels
    np.testing.assert_array_equal(before.oof[folds == 2], after.oof[folds == 2])
    assert len(before.fold_weights) == FOLDS
    assert before.fold_scores == [F1.score(labels[folds == f], before.oof[folds == f]) for f in range(FOLDS)]


def test_stacked_predictions_for_a_fold_ignore_that_folds_labels():
    rng, labels, folds = random_group(2)
    members = informative_and_noise(rng, labels)
    before = cv_blend.stack_oof(members, labels, folds, LOG_LOSS)
    after = cv_blend.stack_oof(members, relabelled(rng, labels, folds, 3), folds, LOG_LOSS)
    np.testing.assert_array_equal(before.oof[folds == 3], after.oof[folds == 3])
    assert not np.array_equal(before.oof[folds != 3], after.oof[folds != 3])  # the others learnt from it
    assert before.fold_c[3] == after.fold_c[3] and before.fold_c[3] in cv_blend.STACK_CS


@pytest.mark.parametrize("metric", [LOG_LOSS, F1], ids=lambda m: m.name)
def test_stacking_beats_equal_weights_when_one_member_is_noise(metric):
    rng, labels, folds = random_group(3)
    members = informative_and_noise(rng, labels)
    stacked = cv_blend.stack_oof(members, labels, folds, metric)
    equal = cv_blend.equal_weights(members, labels, folds, metric)
    assert metric.better(stacked.score, equal.score)
    assert abs(stacked.score - equal.score) > 0.1
    np.testing.assert_allclose(stacked.oof.sum(axis=1), 1, atol=1e-5)


def test_equal_weights_score_the_plain_mean_and_blend_the_test_set_the_same_way():
    rng, labels, folds = random_group(4)
    members = noise_members(rng, len(labels), 3)
    tests = noise_members(rng, 7, 3)
    result = cv_blend.equal_weights(members, labels, folds, LOG_LOSS, tests)
    mean = np.mean(members, axis=0)
    assert result.kind == "equal" and result.fold_weights is None
    assert result.score == pytest.approx(LOG_LOSS.score(labels, mean), rel=1e-5)
    np.testing.assert_allclose(result.oof, mean, rtol=1e-6)
    np.testing.assert_allclose(result.test, np.mean(tests, axis=0), rtol=1e-6)
    assert result.fold_scores[0] == pytest.approx(LOG_LOSS.score(labels[folds == 0], mean[folds == 0]), 1e-5)


def test_the_test_blend_uses_the_weights_searched_on_every_row():
    rng, labels, folds = random_group(5)
    members = informative_and_noise(rng, labels)
    tests = [m[:9] for m in informative_and_noise(rng, labels)]
    result = cv_blend.weight_search_oof(members, labels, folds, F1, tests)
    assert result.weights[0] > result.weights[1]  # the informative member wins
    np.testing.assert_allclose(result.test, cv_blend.blend(tests, result.weights))
    assert result.test.shape == (9, CLASSES)


def test_the_final_meta_model_predicts_the_test_set():
    rng, labels, folds = random_group(6)
    members = informative_and_noise(rng, labels)
    tests = [m[:12] for m in members]  # rows it was fitted on: it must find their labels
    result = cv_blend.stack_oof(members, labels, folds, F1, c=1.0, tests=tests)
    assert result.c == 1.0 and result.fold_c == [1.0] * FOLDS
    assert (result.test.argmax(axis=1) == labels[:12]).mean() > 0.9


def test_stacking_gives_no_probability_to_a_class_its_training_part_never_saw():
    rng, labels, folds = random_group(7)
    labels[labels == 3] = 0
    labels[np.flatnonzero(folds == 0)[:6]] = 3  # class 3 only in fold 0
    members = informative_and_noise(rng, labels)
    result = cv_blend.stack_oof(members, labels, folds, LOG_LOSS)
    assert (result.oof[folds == 0][:, 3] == 0).all()
    assert (result.oof[folds != 0][:, 3] > 0).all()
    np.testing.assert_allclose(result.oof.sum(axis=1), 1, atol=1e-5)


def test_stacking_refuses_a_training_part_with_one_row_of_a_class():
    rng, labels, folds = random_group(8)
    labels[labels == 3] = 0
    labels[np.flatnonzero(folds == 0)[0]] = labels[np.flatnonzero(folds == 1)[0]] = 3
    with pytest.raises(PetalsError, match="outside fold 0 has a single row of class"):
        cv_blend.stack_oof(informative_and_noise(rng, labels), labels, folds, LOG_LOSS)
    result = cv_blend.stack_oof(informative_and_noise(rng, labels), labels, folds, LOG_LOSS, c=1.0)
    assert np.isfinite(result.score)  # with C given there is no inner CV to refuse


def _bad_inputs():
    rng, labels, folds = random_group(9, 40)
    members = noise_members(rng, 40, 2)
    yield "one member", ([members[0]], labels, folds, None), "at least 2"
    yield "shapes", ([members[0], members[1][:30]], labels, folds, None), "differ in shape"
    yield "labels", (members, labels[:39], folds, None), "39 labels and 40 fold ids for 40"
    yield "folds", (members, labels, folds[:39], None), "40 labels and 39 fold ids"
    yield "empty fold", (members, labels, np.where(folds == 2, 3, folds), None), r"fold\(s\) \[2\]"
    yield "one fold", (members, labels, np.zeros(40, int), None), "at least 2 folds"
    yield "label range", (members, np.where(labels == 0, CLASSES, labels), folds, None), "outside 0..3"
    yield "tests", (members, labels, folds, [members[0][:5], members[1][:6]]), "test probabilities"


BAD_INPUTS = list(_bad_inputs())


@pytest.mark.parametrize(("case", "inputs", "message"), BAD_INPUTS, ids=[case for case, *_ in BAD_INPUTS])
def test_unblendable_inputs_are_refused_in_one_line(case, inputs, message):
    members, labels, folds, tests = inputs
    for blender in (cv_blend.equal_weights, cv_blend.weight_search_oof, cv_blend.stack_oof):
        with pytest.raises(PetalsError, match=message) as refused:
            blender(members, labels, folds, F1, tests=tests)
        assert "\n" not in str(refused.value)


def test_compare_reports_all_three_blends_scored_out_of_fold():
    rng, labels, folds = random_group(10, 100)
    members = informative_and_noise(rng, labels)
    tests = [m[:5] for m in members]
    results = cv_blend.compare(members, labels, folds, LOG_LOSS, tests)
    assert set(results) == {"equal", "search", "stack"}
    for kind, result in results.items():
        assert result.kind == kind and result.oof.shape == (100, CLASSES)
        assert result.test.shape == (5, CLASSES)
        assert result.score == pytest.approx(LOG_LOSS.score(labels, result.oof), rel=1e-6)
        assert len(result.fold_scores) == FOLDS


def test_numbers_blend_as_a_mean_and_a_ridge_stack_judged_out_of_fold():
    """A regression's OOF numbers [n, 1]: the equal blend is their mean, each blend beats the members
    in RMSE (their errors are independent), and a fold's rows never fit the stack that predicts them."""
    rng = np.random.default_rng(11)
    truth = rng.uniform(1, 100, (200, 1)).astype(np.float32)
    folds = rng.permutation(np.arange(200) % FOLDS)
    members = [truth + rng.normal(0, 10, truth.shape) for _ in range(2)]
    rmse = METRICS["rmse"]
    results = cv_blend.compare(members, truth, folds, rmse, [m[:5] for m in members])
    assert results["equal"].oof == pytest.approx((members[0] + members[1]) / 2, abs=1e-4)
    for result in results.values():
        assert result.oof.shape == (200, 1) and result.test.shape == (5, 1)
        assert result.score < min(rmse.score(truth, m) for m in members) - 1.0, result.kind
    changed = truth.copy()
    changed[folds == 0] = rng.uniform(1, 100, ((folds == 0).sum(), 1))
    again = cv_blend.stack_oof(members, changed, folds, rmse)
    held, other = folds == 0, folds == 1
    assert np.allclose(again.oof[held], results["stack"].oof[held])  # fitted without fold 0's rows
    assert not np.allclose(again.oof[other], results["stack"].oof[other])  # fitted with them


def test_a_stack_these_rows_cannot_fit_leaves_compare_only_when_another_method_was_asked_for():
    rng, labels, folds = random_group(8)
    labels[labels == 3] = 0
    labels[np.flatnonzero(folds == 0)[0]] = labels[np.flatnonzero(folds == 1)[0]] = 3
    members = informative_and_noise(rng, labels)
    assert set(cv_blend.compare(members, labels, folds, LOG_LOSS, needed="equal")) == {"equal", "search"}
    for needed in (None, "stack"):  # the stack asked for, or every method: the one line as before
        with pytest.raises(PetalsError, match="outside fold 0 has a single row of class"):
            cv_blend.compare(members, labels, folds, LOG_LOSS, needed=needed)


def _grouped(seed: int, n: int = 180, size: int = 3):
    """Random labels, groups of `size` rows of one class, a fold table dealing whole groups."""
    rng = np.random.default_rng(seed)
    group_labels = rng.integers(0, CLASSES, n // size)
    labels = np.repeat(group_labels, size)
    groups = np.repeat([f"g{g}" for g in range(n // size)], size)
    folds = np.repeat(rng.permutation(np.arange(n // size) % FOLDS), size)
    return rng, labels, groups, folds


def _straddling(splits, groups: np.ndarray) -> set:
    return {g for train, test in splits for g in set(groups[train]) & set(groups[test])}


def test_a_stacks_inner_cv_deals_whole_groups(monkeypatch):
    """Each meta-model's penalty is chosen on inner folds that keep a group on one side: one group's
    rows on both would reward the C that memorises the group."""
    rng, labels, groups, folds = _grouped(12)
    members = informative_and_noise(rng, labels)
    seen = []
    real = cv_blend.LogisticRegressionCV

    def spy(*args, **kwargs):
        seen.append(kwargs["cv"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cv_blend, "LogisticRegressionCV", spy)
    results = cv_blend.compare(members, labels, folds, LOG_LOSS, groups=groups)
    assert len(seen) == FOLDS + 1  # a meta-model for each fold's rows, and one on every row
    for f, splits in enumerate(seen):
        part = groups[folds != f] if f < FOLDS else groups
        assert not _straddling(splits, part), f
    assert results["stack"].score < LOG_LOSS.score(labels, members[1])
    seen.clear()
    cv_blend.stack_oof(members, labels, folds, LOG_LOSS)  # ungrouped: rows dealt one by one, as before
    assert any(_straddling(splits, groups[folds != f]) for f, splits in enumerate(seen[:FOLDS]))


def test_a_numbers_stacks_alpha_is_chosen_on_whole_groups(monkeypatch):
    import sklearn.linear_model

    rng, _, groups, folds = _grouped(13)
    truth = np.repeat(rng.uniform(1, 100, len(set(groups))), 3)[:, None].astype(np.float32)
    members = [truth + rng.normal(0, 10, truth.shape) for _ in range(2)]
    seen = []
    real = sklearn.linear_model.RidgeCV

    def spy(*args, **kwargs):
        seen.append(kwargs.get("cv"))
        return real(*args, **kwargs)

    monkeypatch.setattr(sklearn.linear_model, "RidgeCV", spy)
    grouped = cv_blend.stack_oof(members, truth, folds, METRICS["rmse"], groups=groups)
    assert len(seen) == FOLDS + 1 and all(splits is not None for splits in seen)
    for f, splits in enumerate(seen):
        assert not _straddling(splits, groups[folds != f] if f < FOLDS else groups), f
    assert grouped.score < min(METRICS["rmse"].score(truth, m) for m in members)
    seen.clear()
    cv_blend.stack_oof(members, truth, folds, METRICS["rmse"])
    assert seen == [None] * (FOLDS + 1)  # ungrouped: leave-one-out, as before


def test_a_stack_on_rows_of_one_group_is_refused_in_one_line():
    rng, labels, _, folds = _grouped(14)
    members = informative_and_noise(rng, labels)
    with pytest.raises(PetalsError, match="holds a single group"):
        cv_blend.stack_oof(members, labels, folds, LOG_LOSS, groups=np.full(len(labels), "one"))
