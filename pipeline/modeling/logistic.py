"""Logistic regression as a layer's weights: the inner CV both probes choose their penalty by, and
a fitted model's coefficients as logits over every class (pipeline/modeling/head_fits.py)."""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import StratifiedGroupKFold

INNER_FOLDS = 5
UNSEEN_LOGIT = -30.0  # a class the fold never trained on: probability ~1e-13 beside the others


def inner_folds(labels: np.ndarray, groups: np.ndarray, views: int, seed: int) -> list:
    """Inner CV splits over the stacked views: an example's views (and a group's examples) together."""
    smallest = min(np.unique(groups[labels == c]).size for c in np.unique(labels))
    folds = min(INNER_FOLDS, smallest)
    if folds < 2:
        return []
    # A group's examples share one class or not (a patient's photos need not): stratify what can be.
    splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=seed)
    count = len(labels)
    splits = []
    for train, held in splitter.split(np.zeros(count), labels, groups):
        splits.append((np.concatenate([train + v * count for v in range(views)]),
                       np.concatenate([held + v * count for v in range(views)])))  # fmt: skip
    return splits


def as_logits(model, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """A fitted (multinomial) LogisticRegression -> (weights [features, num_classes], bias
    [num_classes]) whose softmax is its predict_proba; a class it never saw far below the rest."""
    coef, intercept = model.coef_, model.intercept_
    if len(model.classes_) == 2:  # one logit z for class 1: softmax([-z/2, z/2]) = sigmoid(z)
        coef, intercept = np.stack([-coef[0], coef[0]]) / 2, np.array([-intercept[0], intercept[0]]) / 2
    weights = np.zeros((coef.shape[1], num_classes))
    bias = np.full(num_classes, UNSEEN_LOGIT + float(intercept.min()))
    weights[:, model.classes_] = coef.T
    bias[model.classes_] = intercept
    return weights, bias
