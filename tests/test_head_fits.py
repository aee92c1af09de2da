"""The probe's head for every target: what the target part names (`Task.probe`) is fitted once by
scikit-learn, and the written weights give what the fitted estimators predict: ridge regression of
standardised numbers (one column or several), a logistic regression per label (a label no
training row holds at its prior), on images' pooled features and on texts' TF-IDF rows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from pipeline.modeling import head_fits, probe, text_probe
from pipeline.tasks import TASKS, get_task
from pipeline.tasks.targets.regression import TargetScale


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def numbers(columns: int, count: int = 60, views: int = 2, seed: int = 0):
    """Pooled features [views, count, 6] of unequal scales, and `columns` noisy linear targets."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 1, (count, 6)) * rng.uniform(0.1, 10, 6)
    features = np.stack([base + rng.normal(0, 0.3, base.shape) for _ in range(views)])
    coef = rng.normal(0, 1, (6, columns))
    targets = 40 + base @ coef + rng.normal(0, 3, (count, columns))
    return features, targets


def standardised(features: np.ndarray) -> np.ndarray:
    x = features.reshape(-1, features.shape[-1])
    return (x - x.mean(0)) / x.std(0)


@pytest.mark.parametrize("columns", [1, 2])
def test_ridge_heads_predict_what_ridge_predicts_one_column_or_several(columns):
    features, targets = numbers(columns)
    scale = TargetScale(targets.mean(0), targets.std(0))
    groups = np.arange(len(targets)).astype(str)
    fitted = probe.fit(features, targets, groups, 0, "ridge", columns, scale)
    assert fitted.weights.shape == (6, columns) and len(fitted.models) == columns
    assert "by a 5-fold inner CV" in fitted.said
    x = features.reshape(-1, 6)
    got = (x @ fitted.weights + fitted.bias) * scale.std + scale.mean  # the network's un-standardising
    for k, model in enumerate(fitted.models):
        assert model.alpha_ in 1 / (2 * probe.CS)
        expected = model.predict(standardised(features)) * scale.std[k] + scale.mean[k]
        np.testing.assert_allclose(got[:, k], expected, atol=1e-5)
    rmse = np.sqrt(((got - np.tile(targets, (2, 1))) ** 2).mean())
    assert rmse < 0.5 * targets.std()  # it learned the linear map, not the mean


def test_ridges_penalty_is_chosen_per_column():
    # Column 0 a clean linear target, column 1 pure noise: the noise wants the strongest penalty.
    features, targets = numbers(1, count=80)
    noise = np.random.default_rng(1).normal(0, 1, (80, 1))
    both = np.concatenate([targets, noise], axis=1)
    fitted = probe.fit(
        features, both, np.arange(80).astype(str), 0, "ridge", 2, TargetScale(both.mean(0), both.std(0))
    )
    clean, noisy = (model.alpha_ for model in fitted.models)
    assert noisy > clean


def labels_of(count: int = 60, views: int = 2, seed: int = 0):
    """Features, and three labels: two carried by features, one no example holds."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 1, (count, 6)) * rng.uniform(0.1, 10, 6)
    features = np.stack([base + rng.normal(0, 0.3, base.shape) for _ in range(views)])
    labels = np.stack([base[:, 0] > 0, base[:, 1] + base[:, 2] > 1, np.zeros(count, bool)], axis=1)
    return features, labels.astype(np.int32)


def test_one_vs_rest_heads_give_each_labels_predict_proba_and_an_absent_label_its_prior():
    features, labels = labels_of()
    fitted = probe.fit(features, labels, np.arange(60).astype(str), 0, "one_vs_rest", 3)
    got = sigmoid(features.reshape(-1, 6) @ fitted.weights + fitted.bias)
    for k in (0, 1):
        assert fitted.models[k].C_[0] in probe.CS
        np.testing.assert_allclose(
            got[:, k], fitted.models[k].predict_proba(standardised(features))[:, 1], atol=1e-5
        )
    # No training example holds label 2: nothing fitted, its probability the prior: 0.5 / (60 + 1).
    assert fitted.models[2] is None and not fitted.weights[:, 2].any()
    np.testing.assert_allclose(got[:, 2], 0.5 / 61, rtol=1e-9)
    assert "C=(" in fitted.said and "prior)" in fitted.said
    assert ((got[:, :2] > 0.5) == np.tile(labels[:, :2], (2, 1))).mean() > 0.9


def test_a_label_every_row_holds_is_near_one_and_a_label_of_one_group_is_not_split():
    features, labels = labels_of(count=20, views=1)
    labels[:, 2] = 1
    labels[:, 1] = np.arange(20) < 3  # three positives, all in one group: no inner CV for it
    groups = np.where(np.arange(20) < 3, "g", np.arange(20).astype(str))
    fitted = probe.fit(features, labels, groups, 0, "one_vs_rest", 3)
    assert sigmoid(fitted.bias[2]) == pytest.approx(20.5 / 21)
    assert fitted.models[1].C_[0] == head_fits.NO_SPLIT_C and "1 too few to split" in fitted.said


@pytest.mark.parametrize(("kind", "columns"), [("ridge", 1), ("ridge", 2), ("one_vs_rest", 2)])
def test_text_heads_on_tfidf_rows_predict_what_the_estimators_predict(kind, columns):
    rng = np.random.default_rng(0)
    found = sparse.random(50, 40, density=0.15, random_state=1, format="csr")
    found.data = np.ceil(found.data * 3)
    x = text_probe.tfidf(found, text_probe.idf(found))
    signal = np.asarray(x[:, :columns].todense())
    targets = signal * 10 + rng.normal(0, 0.5, signal.shape) if kind == "ridge" else (signal > 0).astype(int)
    scale = TargetScale(targets.mean(0), targets.std(0))
    fitted, used = text_probe.fit(x, targets, np.arange(50).astype(str), 0, kind, columns, scale)
    z = np.asarray(x @ text_probe.written(fitted, used, x.shape[1])) + fitted.bias
    for k, model in enumerate(fitted.models):
        if kind == "ridge":
            np.testing.assert_allclose(z[:, k], model.predict(x[:, used]), atol=1e-5)
        else:
            np.testing.assert_allclose(sigmoid(z[:, k]), model.predict_proba(x[:, used])[:, 1], atol=1e-5)


def test_every_task_names_a_fit_for_its_probe():
    for name, task in TASKS.items():
        assert task.probe in head_fits.FITS, name
    assert {get_task(n).probe for n in ("image_regression", "multi_label_text_classification")} == {
        "ridge", "one_vs_rest",
    }  # fmt: skip


def test_ridge_on_one_group_is_not_split_and_says_so():
    features, targets = numbers(1, count=12)
    scale = TargetScale(targets.mean(0), targets.std(0))
    fitted = probe.fit(features, targets, np.full(12, "g"), 0, "ridge", 1, scale)
    assert (
        fitted.models[0].alpha == 1 / (2 * head_fits.NO_SPLIT_C)
        and fitted.said == "alpha=0.5: too few to split"
    )
