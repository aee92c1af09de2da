"""Competition metrics, each computed by scikit-learn exactly as it is documented there (macro-F1
from its counts by scikit-learn's formula, held equal to scikit-learn's by a test: the blend,
threshold and bootstrap searches call it thousands of times).

A competition file names one (`metric = "macro_f1"`); `get_metric` turns the name into a
`Metric` that scores class probabilities against labels. Metrics on classes take the argmax;
metrics on probabilities take them as they are (a binary task scores P(class 1), the way
Kaggle's binary log loss and ROC AUC read a submission's one probability column); metrics on
numbers (RMSE, MAE, MCRMSE: a regression's) take the outputs as the numbers predicted, lower better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn import metrics as sk


def macro_f1(y_true: Sequence[int] | np.ndarray, y_pred: Sequence[int] | np.ndarray) -> float:
    """Macro F1 over the classes present in either labels or predictions: scikit-learn's
    `f1_score(average="macro", zero_division=0)`, each class's 2 TP / (2 TP + FP + FN) as its
    documentation writes it, from one count of the pairs. The blend and threshold searches call it
    thousands of times, where scikit-learn's checks of its arguments cost 1-4 ms a call and the
    counts microseconds; tests/test_spec.py holds the two equal. Anything but two equally long
    vectors of integer class ids goes to scikit-learn itself, with its checks and its errors."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if not _class_ids(y_true, y_pred):
        return float(sk.f1_score(y_true, y_pred, average="macro", zero_division=0))
    classes, index = np.unique(np.concatenate([y_true, y_pred]), return_inverse=True)
    truth, predicted = index[: len(y_true)], index[len(y_true) :]
    hits = np.bincount(truth[truth == predicted], minlength=len(classes))
    sizes = np.bincount(truth, minlength=len(classes)) + np.bincount(predicted, minlength=len(classes))
    return float(np.mean(2 * hits / sizes))  # every class counted is in one or the other: sizes > 0


def _class_ids(*vectors: np.ndarray) -> bool:
    """Whether these are non-empty 1-D integer vectors of one length."""
    return all(v.ndim == 1 and v.dtype.kind in "iu" and len(v) == len(vectors[0]) > 0 for v in vectors)


def mean_f1(labels: np.ndarray, decided: np.ndarray) -> float:
    """Kaggle's Mean F1-Score of multi-label rows: each row's F1 of its predicted labels against its
    true ones, averaged over the rows (scikit-learn's `average="samples"`)."""
    return float(sk.f1_score(np.asarray(labels), np.asarray(decided), average="samples", zero_division=0))


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error (Pawpularity's, CommonLit's); of rows of several columns, over
    every cell."""
    return float(sk.root_mean_squared_error(np.ravel(y_true), np.ravel(y_pred)))


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute error."""
    return float(sk.mean_absolute_error(np.ravel(y_true), np.ravel(y_pred)))


def mcrmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean column-wise RMSE (Feedback Prize ELL's): each target column's RMSE, averaged over the
    columns (scikit-learn's `multioutput="raw_values"`, then the mean)."""
    y_true, y_pred = np.asarray(y_true, np.float64), np.asarray(y_pred, np.float64)
    columns = sk.root_mean_squared_error(
        y_true.reshape(len(y_true), -1), y_pred.reshape(len(y_pred), -1), multioutput="raw_values"
    )
    return float(np.mean(columns))


def _accuracy(labels: np.ndarray, predicted: np.ndarray) -> float:
    return float(sk.accuracy_score(labels, predicted))


def _positive_or_all(probabilities: np.ndarray) -> np.ndarray:
    """P(class 1) for two classes (what a binary submission holds), all columns otherwise."""
    return probabilities[:, 1] if probabilities.shape[1] == 2 else probabilities


def _log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    classes = np.arange(probabilities.shape[1])
    if len(classes) == 2:  # Kaggle's binary log loss, on the one probability column
        return float(sk.log_loss(labels, probabilities[:, 1], labels=classes))
    return float(sk.log_loss(labels, probabilities, labels=classes))


def _roc_auc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    scores = _positive_or_all(probabilities)
    if scores.ndim == 2:  # one class against the rest, averaged over the classes
        return float(sk.roc_auc_score(labels, scores, multi_class="ovr", labels=np.arange(scores.shape[1])))
    return float(sk.roc_auc_score(labels, scores))


def mean_column_roc_auc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Jigsaw Toxic Comment's score: the ROC AUC of each label's column of probabilities against
    its 0/1 column, averaged over the labels (scikit-learn's `roc_auc_score(average="macro")`).
    A label whose rows are all one value has no ROC AUC and is left out of the mean, as a few
    held-out rows of a rare label may be; ValueError if every label is."""
    truth = np.asarray(labels) > 0.5
    both = truth.any(axis=0) & ~truth.all(axis=0)
    if not both.any():
        raise ValueError("mean_column_roc_auc: no label has both values in these rows")
    return float(sk.roc_auc_score(truth[:, both], np.asarray(probabilities)[:, both], average="macro"))


# Bootstrap draws of a score's interval: 200 put its 2.5th and 97.5th percentiles within about a
# tenth of its width, and cost 0.3 s for macro-F1 of 104 classes over 2,797 rows.
INTERVAL_DRAWS = 200


@dataclass(frozen=True)
class Metric:
    """One competition metric: what it reads (class ids or probabilities) and which way is better."""

    name: str  # the key in competition files
    title: str  # as people write it: "macro-F1"
    # "class": argmax of the probabilities | "probability": the probabilities | "labels": rows of
    # labels, each label held when its probability is at least 0.5 (a task may decide otherwise
    # and score its decisions with `score_decided`) | "label_probabilities": rows of labels'
    # probabilities, as they are | "number": the outputs as they are, numbers [n, columns] against
    # true numbers
    reads: str
    greater_is_better: bool
    _fn: Callable[[np.ndarray, np.ndarray], float]

    @property
    def reads_rows(self) -> bool:
        """Whether it scores rows of labels (several an example), not one class an example."""
        return self.reads in ("labels", "label_probabilities")

    def score(self, labels: Sequence[int] | np.ndarray, probabilities: np.ndarray) -> float:
        """The metric of class probabilities [n, classes] against integer labels [n] (rows of
        labels [n, classes] for a metric that reads rows of labels)."""
        labels, probabilities = np.asarray(labels), np.asarray(probabilities)
        if probabilities.ndim != 2 or len(probabilities) != len(labels):
            raise ValueError(
                f"{self.name}: probabilities of shape {probabilities.shape} for {len(labels)} labels"
            )
        if self.reads == "class":
            return self._fn(labels, probabilities.argmax(axis=1))
        if self.reads == "labels":
            return self.score_decided(labels, (probabilities >= 0.5).astype(np.int32))
        if self.reads == "number":  # one column of numbers [n, 1] against [n] or [n, 1] alike
            return self._fn(labels.reshape(len(labels), -1), probabilities)
        return self._fn(labels, probabilities)

    def score_decided(self, labels: np.ndarray, decided: np.ndarray) -> float:
        """The metric of decided rows of labels [n, classes] against the true rows."""
        if self.reads != "labels":
            raise ValueError(f"{self.name} reads {self.reads}es, not decided rows of labels")
        return self._fn((np.asarray(labels) > 0.5).astype(np.int32), decided)

    def interval(
        self,
        labels: np.ndarray,
        probabilities: np.ndarray,
        groups: np.ndarray | None = None,
        draws: int = INTERVAL_DRAWS,
    ) -> tuple[float, float] | None:
        """A 95% percentile-bootstrap interval of `score` over these rows: what the score would be
        on another draw of as many held-out rows (of whole groups, with `groups`: rows of one group
        move together, as they would between a val split and the test set). None where the metric
        reads decided labels (a task's thresholds decide them) or no draw can be scored."""
        if self.reads == "labels" or len(labels) == 0:
            return None
        labels, probabilities = np.asarray(labels), self._drawable(probabilities)
        drawn = self._draws(labels, groups, draws)
        scores = [self._scored(labels[rows], probabilities[rows]) for rows in drawn]
        scores = [score for score in scores if score is not None]
        if len(scores) < draws // 2:
            return None
        low, high = np.percentile(scores, [2.5, 97.5])
        if self.greater_is_better and low == high == 1.0:
            # Every row (group) right: no draw can hold an error, and the bootstrap says [1, 1]. The
            # rule of three bounds what the rows allow: with no error in n of them, an error rate
            # of 3/n or more is ruled out at 95% only (Hanley & Lippman-Hand 1983).
            keys = len(labels) if groups is None else len(set(np.asarray(groups).tolist()))
            low = max(0.0, 1.0 - 3.0 / keys)
        return float(low), float(high)

    def difference(
        self,
        labels: np.ndarray,
        first: np.ndarray,
        second: np.ndarray,
        groups: np.ndarray | None = None,
        draws: int = INTERVAL_DRAWS,
    ) -> tuple[float, float, float, float] | None:
        """Two predictions of the same rows compared: `second`'s score less `first`'s, its standard
        error and 95% percentile-bootstrap interval, each draw scoring both on the same rows (whole
        groups with `groups`), so what both get right or wrong together cancels. None where
        `interval` would be."""
        if self.reads == "labels" or len(labels) == 0:
            return None
        labels, first, second = np.asarray(labels), self._drawable(first), self._drawable(second)
        found = []
        for rows in self._draws(labels, groups, draws):
            pair = self._scored(labels[rows], first[rows]), self._scored(labels[rows], second[rows])
            if None not in pair:
                found.append(pair[1] - pair[0])
        if len(found) < draws // 2:
            return None
        low, high = np.percentile(found, [2.5, 97.5])
        gap = self.score(labels, second) - self.score(labels, first)
        return float(gap), float(np.std(found)), float(low), float(high)

    def _drawable(self, probabilities: np.ndarray) -> np.ndarray:
        """What the draws score: the argmax once where the metric reads the class (as one-hot rows,
        no C x C matrix at every draw), the probabilities otherwise."""
        probabilities = np.asarray(probabilities)
        if self.reads != "class":
            return probabilities
        decided = np.zeros(probabilities.shape, np.int8)
        decided[np.arange(len(decided)), probabilities.argmax(axis=1)] = 1
        return decided

    def _scored(self, labels: np.ndarray, probabilities: np.ndarray) -> float | None:
        try:
            return self.score(labels, probabilities)
        except ValueError:  # one class alone in the draw: ROC AUC is undefined there
            return None

    @staticmethod
    def _draws(labels: np.ndarray, groups: np.ndarray | None, draws: int):
        """`draws` bootstrap draws of the rows (of whole groups with `groups`), the same for the
        same rows: row indices, a group's rows moving together."""
        rng = np.random.default_rng(0)
        keys = np.arange(len(labels)) if groups is None else np.unique(groups, return_inverse=True)[1]
        members = None
        if groups is not None:  # each group's rows, from one sort
            members = np.split(np.argsort(keys, kind="stable"), np.cumsum(np.bincount(keys))[:-1])
        for _ in range(draws):
            drawn = rng.integers(0, keys.max() + 1, keys.max() + 1)
            yield drawn if members is None else np.concatenate([members[k] for k in drawn])

    def better(self, a: float, b: float) -> bool:
        """Whether score a beats score b."""
        return a > b if self.greater_is_better else a < b


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("macro_f1", "macro-F1", "class", True, macro_f1),
        Metric("accuracy", "accuracy", "class", True, _accuracy),
        Metric("log_loss", "log loss", "probability", False, _log_loss),
        Metric("roc_auc", "ROC AUC", "probability", True, _roc_auc),
        Metric("mean_f1", "mean F1", "labels", True, mean_f1),
        Metric(
            "mean_column_roc_auc", "mean column ROC AUC", "label_probabilities", True, mean_column_roc_auc
        ),
        Metric("rmse", "RMSE", "number", False, rmse),
        Metric("mae", "MAE", "number", False, mae),
        Metric("mcrmse", "MCRMSE", "number", False, mcrmse),
    )
}


def get_metric(name: str) -> Metric:
    """The metric called `name`; an unknown name lists the known ones."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r} (known: {', '.join(METRICS)})") from None
