"""The linear head fitted once by scikit-learn, as the task's target part names it (`Task.probe`):
the map from features to the logits its activation reads, each penalty chosen by an inner CV over
whole examples and groups (`logistic.inner_folds`), on the penalty grid of the input's features
(the image probe's standardised features, the text probe's unit-length TF-IDF rows).

- "logistic": one class an example (softmax). Multinomial logistic regression, C by log loss.
- "one_vs_rest": several labels an example (a sigmoid each). A binary logistic regression per
  label, each its own C by that label's log loss. Per label, not one C shared: Kaggle's label sets
  run from common to rare (Jigsaw's toxic on ~10% of comments, threat on 0.3%), and a rare label's
  few positives want a stronger penalty than a common one's many; a shared C would be chosen by
  the common labels' losses, which dominate the sum. Each label's CV costs what a shared grid
  costs it anyway (every label is fitted at every C either way). A label no training row holds
  (or every row holds) has nothing to fit: its logit is the prior's, (k + 1/2) / (n + 1) of its
  n rows (Jeffreys'), not a probability of ~0 that a first positive in val would cost ~30 nats.
- "ridge": numbers (a standardised linear head). Ridge regression of each standardised target
  column, its alpha by squared error, alpha = 1 / (2 C) over the input's grid of C: logistic
  regression minimises C x (sum of log losses) + |w|^2 / 2 and ridge the sum of squared errors +
  alpha |w|^2, the same balance of fit and penalty where C = 1 / (2 alpha). A column each, as
  labels each: a noisy target column wants more shrinkage than a clean one.

Each returns a `Fitted` on the rows as given (the caller folds any scaling of its own in).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from sklearn.linear_model import LogisticRegressionCV, Ridge, RidgeCV
from threadpoolctl import threadpool_limits

from pipeline.modeling.logistic import as_logits, inner_folds

NO_SPLIT_C = 1.0  # too few examples (or groups) for an inner CV: C = 1, and the log says so


@dataclass(frozen=True)
class Fitted:
    weights: np.ndarray  # [features, outputs]
    bias: np.ndarray  # [outputs]
    said: str  # the penalties chosen, and how: for the training log
    models: tuple  # the fitted scikit-learn estimators, an output's (or the outputs') each; None: a prior


@contextmanager
def _quiet():
    # One BLAS thread: on a busy 2-core machine OpenBLAS's spinning threads made each small fit
    # ~50x slower (benchmarks/cv_data.py). Scikit-learn 1.8 announces 1.10's arguments; Kaggle's is older.
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _every_row(rows: int) -> list:
    return [(np.arange(rows), np.arange(rows))]  # too few to split: one "fold", at NO_SPLIT_C only


def _logistic_cv(x, y: np.ndarray, splits: list, cs: np.ndarray, seed: int) -> LogisticRegressionCV:
    model = LogisticRegressionCV(
        Cs=cs if splits else [NO_SPLIT_C],
        cv=splits or _every_row(len(y)),
        scoring="neg_log_loss",
        max_iter=2000,
        random_state=seed,
    )
    with _quiet():
        return model.fit(x, y)


def _how(name: str, values: list[str], folds: list[int]) -> str:
    """`C=0.1 by a 5-fold inner CV`, `C=1: too few to split`; several outputs: each one's value."""
    shown = values[0] if len(values) == 1 else f"({', '.join(values)})"
    split = sorted({f for f in folds if f})
    if not split:
        return f"{name}={shown}: too few to split"
    how = f"a {split[0]}-fold inner CV" if len(split) == 1 else f"inner CVs of {split[0]}-{split[-1]} folds"
    unsplit = sum(1 for f, v in zip(folds, values, strict=True) if not f and v != "prior")
    return f"{name}={shown} by {how}" + (f"; {unsplit} too few to split" if unsplit else "")


def logistic(x, targets, groups, views: int, seed: int, cs: np.ndarray, outputs: int, summary=None) -> Fitted:
    """One class id an example: multinomial logistic regression; a class no row holds far below."""
    labels = np.asarray(targets).astype(int)
    splits = inner_folds(labels, groups, views, seed)
    model = _logistic_cv(x, np.tile(labels, views), splits, cs, seed)
    weights, bias = as_logits(model, outputs)
    return Fitted(weights, bias, _how("C", [f"{model.C_[0]:g}"], [len(splits)]), (model,))


def prior_logit(column: np.ndarray) -> float:
    """A label's logit from its count alone: Jeffreys' (k + 1/2) / (n + 1)."""
    p = (column.sum() + 0.5) / (len(column) + 1.0)
    return float(np.log(p / (1.0 - p)))


def one_vs_rest(
    x, targets, groups, views: int, seed: int, cs: np.ndarray, outputs: int, summary=None
) -> Fitted:
    """Rows of 0/1 over the labels: a logistic regression per label, its sigmoid predict_proba."""
    labels = (np.asarray(targets, np.float64).reshape(len(groups), -1) > 0.5).astype(int)
    weights, bias = np.zeros((x.shape[1], outputs)), np.zeros(outputs)
    models, values, folds = [], [], []
    for k in range(outputs):
        column = labels[:, k]
        if column.min() == column.max():  # nothing to tell apart: the prior
            bias[k], model, value, splits = prior_logit(column), None, "prior", []
        else:
            splits = inner_folds(column, groups, views, seed)
            model = _logistic_cv(x, np.tile(column, views), splits, cs, seed)
            weights[:, k], bias[k], value = model.coef_[0], model.intercept_[0], f"{model.C_[0]:g}"
        models.append(model)
        values.append(value)
        folds.append(len(splits))
    return Fitted(weights, bias, _how("C", values, folds), tuple(models))


def ridge(x, targets, groups, views: int, seed: int, cs: np.ndarray, outputs: int, summary=None) -> Fitted:
    """Rows of numbers: ridge regression of each column standardised by `summary` (the training
    rows' mean and std, as the network's output un-standardises), alpha = 1 / (2 C)."""
    y = np.asarray(targets, np.float64).reshape(len(groups), -1)
    mean = np.broadcast_to(np.asarray(summary.mean, np.float64), y.shape[1])
    std = np.broadcast_to(np.asarray(summary.std, np.float64), y.shape[1])
    z = np.tile((y - mean) / std, (views, 1))
    splits = inner_folds(np.zeros(len(groups), int), groups, views, seed)  # one stratum: grouped K-fold
    alphas = 1.0 / (2.0 * np.asarray(cs if splits else [NO_SPLIT_C], np.float64))
    weights, bias = np.zeros((x.shape[1], outputs)), np.zeros(outputs)
    models = []
    with _quiet():
        for k in range(outputs):
            if splits:  # by squared error (with a cv, RidgeCV's default would be each fold's R^2)
                search = RidgeCV(alphas=alphas, cv=splits, scoring="neg_mean_squared_error")
            else:
                search = Ridge(alpha=alphas[0])
            model = search.fit(x, z[:, k])
            weights[:, k], bias[k] = model.coef_, model.intercept_
            models.append(model)
    values = [f"{m.alpha_ if splits else m.alpha:g}" for m in models]
    return Fitted(weights, bias, _how("alpha", values, [len(splits)] * outputs), tuple(models))


def training_logs(net, task, logits: np.ndarray, labels) -> dict[str, float]:
    """The fitted head's loss and accuracy on the rows it was fitted on (the epoch's training
    logs): its logits through the network's own output layer, scored as the task scores val."""
    outputs = np.asarray(net.get_layer("probabilities")(np.asarray(logits, np.float32)))
    return task.scores(outputs, np.asarray(labels))


class HeadFit(NamedTuple):
    fit: Callable[..., Fitted]
    title: str  # how the training log names it


FITS = {
    "logistic": HeadFit(logistic, "logistic regression"),
    "one_vs_rest": HeadFit(one_vs_rest, "a logistic regression per label"),
    "ridge": HeadFit(ridge, "ridge regression"),
}
