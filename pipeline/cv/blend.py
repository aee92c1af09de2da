"""Blends of a CV group's members judged out of fold: equal weights, searched weights, stacking.

Every member is a CV group's out-of-fold (OOF) probabilities [n, classes], rows in id order, and
`folds[i]` is the fold row i was held out in. Whatever a blend fits (weights, a meta-model) is
fitted without the rows it is then scored on: fold f's blended rows come from a choice made on
the other folds, so the reported score is as honest as each member's OOF score. The weights and
the meta-model applied to the test set are fitted once more on every row. Where the competition
names groups, a stack's inner CV (which chooses its penalty) deals whole groups too: a group on
both sides of it would reward the penalty that lets the meta-model memorise the group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold, StratifiedKFold
from threadpoolctl import threadpool_limits

from competition.metric import METRICS, Metric
from pipeline.core.errors import PetalsError

log = logging.getLogger(__name__)

GRID = np.round(np.arange(0.0, 1.0001, 0.05), 2)  # the values each weight is tried at
CLIP = 1e-7  # log-probabilities of the meta-model's features are clipped here: log(0) is -inf
STACK_CS = (0.01, 0.1, 1.0, 10.0)  # the meta-model's regularisation, chosen by an inner CV
INNER_FOLDS = 3
STACK_ALPHAS = (0.1, 1.0, 10.0, 100.0)  # a numbers stack's ridge penalties: leave-one-out, or groups out


@dataclass(frozen=True)
class BlendResult:
    """One blend of a CV group: its OOF probabilities, their score and what was fitted."""

    kind: str  # "equal" | "search" | "stack"
    oof: np.ndarray  # [n, classes]: row i blended by a choice made without fold folds[i]
    score: float  # the metric of `oof` against the labels: out of fold
    fold_scores: list[float]  # the metric on each fold's rows
    test: np.ndarray | None = None  # [m, classes]: the final choice applied to the test members
    weights: np.ndarray | None = None  # the final weights, searched on every row
    fold_weights: list[np.ndarray] | None = None  # the weights fold f's rows were blended with
    c: float | None = None  # the final meta-model's regularisation
    fold_c: list[float] | None = None  # the meta-model regularisation used for each fold


def blend(probabilities: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """The weighted mean of the members' probabilities (weights normalised to sum to 1)."""
    weights = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    return np.tensordot(weights, np.stack(probabilities).astype(np.float64), axes=1).astype(np.float32)


def search_weights(
    probabilities: list[np.ndarray],
    labels: np.ndarray,
    start: np.ndarray,
    metric: Metric = METRICS["macro_f1"],
    rounds: int = 3,
) -> np.ndarray:
    """Coordinate ascent on the metric: each weight in turn tried over GRID, the others fixed.

    It starts from the best of `start` and each member alone: from one member's corner a single
    coordinate cannot reach another's, so starting anywhere else could end below the best member.
    The blend it returns is scored on the very rows it was chosen on: judge it on others.
    """

    def score(weights: np.ndarray) -> float:  # greater is better
        value = metric.score(labels, blend(probabilities, weights))
        return value if metric.greater_is_better else -value

    candidates = [np.asarray(start, dtype=np.float64) / np.sum(start), *np.eye(len(probabilities))]
    scores = [score(c) for c in candidates]
    best = max(scores)
    weights = candidates[scores.index(best)]
    for _ in range(rounds):
        improved = False
        for i in range(len(weights)):
            for value in GRID:
                trial = weights.copy()
                trial[i] = value
                if trial.sum() <= 0:
                    continue
                trial /= trial.sum()
                trial_score = score(trial)
                if trial_score > best + 1e-9:
                    best, weights, improved = trial_score, trial, True
        if not improved:
            break
    return weights


def check_inputs(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    tests: list[np.ndarray] | None = None,
) -> int:
    """The number of folds, after refusing inputs that cannot be blended out of fold."""
    if len(members) < 2:
        raise PetalsError(f"blend: {len(members)} member(s); a blend needs at least 2")
    shape = np.shape(members[0])
    if len(shape) != 2 or any(np.shape(m) != shape for m in members):
        shapes = [np.shape(m) for m in members]
        raise PetalsError(f"blend: the members' OOF probabilities differ in shape {shapes}")
    n, classes = shape
    if np.ndim(labels) == 2 and not _numbers(labels):  # rows of labels: the stacker is a softmax
        raise PetalsError(
            "blend: rows of labels (several labels an example): CV groups of one class an example only"
        )
    cells = n * classes if _numbers(labels) else n  # numbers: a label a column, as the members'
    if np.shape(labels)[:1] != (n,) or np.size(labels) != cells or np.shape(folds) != (n,):
        raise PetalsError(f"blend: {np.size(labels)} labels and {np.size(folds)} fold ids for {n} OOF rows")
    if not _numbers(labels) and (labels.min() < 0 or labels.max() >= classes):
        raise PetalsError(f"blend: labels outside 0..{classes - 1} ({labels.min()}..{labels.max()})")
    if not np.issubdtype(folds.dtype, np.integer) or folds.min() < 0:
        raise PetalsError(f"blend: fold ids must be integers 0..K-1, got {np.unique(folds)[:5]}")
    counts = np.bincount(folds)
    if len(counts) < 2:
        raise PetalsError("blend: every row is in fold 0; judging out of fold needs at least 2 folds")
    if not counts.all():
        empty = np.flatnonzero(counts == 0).tolist()
        raise PetalsError(f"blend: fold(s) {empty} of 0..{len(counts) - 1} have no rows")
    if tests is not None:
        test_shapes = [np.shape(t) for t in tests]
        if len(tests) != len(members) or len({*test_shapes}) != 1 or test_shapes[0][1:] != (classes,):
            raise PetalsError(f"blend: test probabilities {test_shapes} for {len(members)} members {shape}")
    return len(counts)


def fold_scores(oof: np.ndarray, labels: np.ndarray, folds: np.ndarray, metric: Metric) -> list[float]:
    """The metric on each fold's rows: their spread is what the CV score's precision looks like."""
    return [float(metric.score(labels[folds == f], oof[folds == f])) for f in range(folds.max() + 1)]


def _numbers(labels: np.ndarray) -> bool:
    """A regression's OOF rows: numbers [n, columns], blended as numbers (a weighted mean, a ridge stack)."""
    return np.asarray(labels).dtype.kind == "f"


def _arrays(members, labels, folds, tests) -> tuple[list, np.ndarray, np.ndarray, list | None]:
    members = [np.asarray(m, dtype=np.float64) for m in members]
    tests = None if tests is None else [np.asarray(t, dtype=np.float64) for t in tests]
    return members, np.asarray(labels), np.asarray(folds), tests


def equal_weights(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    metric: Metric,
    tests: list[np.ndarray] | None = None,
) -> BlendResult:
    """The plain mean: nothing is fitted, so its score on the OOF rows is honest as it is."""
    return given_weights(members, labels, folds, metric, tests, kind="equal")


def given_weights(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    metric: Metric,
    tests: list[np.ndarray] | None = None,
    weights=None,
    kind: str = "weights",
) -> BlendResult:
    """The members blended with `weights` as given (equal where none are), scaled to sum to 1:
    nothing is fitted, so their score on the OOF rows is honest as it is."""
    members, labels, folds, tests = _arrays(members, labels, folds, tests)
    check_inputs(members, labels, folds, tests)
    weights = np.ones(len(members)) if weights is None else np.asarray(weights, float)
    weights = weights / weights.sum()
    oof = blend(members, weights)
    return BlendResult(
        kind=kind,
        oof=oof,
        score=float(metric.score(labels, oof)),
        fold_scores=fold_scores(oof, labels, folds, metric),
        test=None if tests is None else blend(tests, weights),
        weights=weights,
    )


def weight_search_oof(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    metric: Metric,
    tests: list[np.ndarray] | None = None,
    start: np.ndarray | None = None,
) -> BlendResult:
    """Searched weights judged out of fold: fold f's rows are blended with weights searched on
    the other folds; the test set with weights searched on every row (each search from `start`,
    equal weights by default, and each member alone)."""
    members, labels, folds, tests = _arrays(members, labels, folds, tests)
    k = check_inputs(members, labels, folds, tests)
    start = np.ones(len(members)) if start is None else np.asarray(start, float)
    oof = np.zeros(members[0].shape, dtype=np.float32)
    chosen = []
    for f in range(k):
        held = folds == f
        weights = search_weights([m[~held] for m in members], labels[~held], start, metric)
        oof[held] = blend([m[held] for m in members], weights)
        chosen.append(weights)
    weights = search_weights(members, labels, start, metric)
    return BlendResult(
        kind="search",
        oof=oof,
        score=float(metric.score(labels, oof)),
        fold_scores=fold_scores(oof, labels, folds, metric),
        test=None if tests is None else blend(tests, weights),
        weights=weights,
        fold_weights=chosen,
    )


def stack_features(members: list[np.ndarray]) -> np.ndarray:
    """The meta-model's input: every member's log-probabilities side by side [n, members*classes]."""
    return np.concatenate([np.log(np.clip(m, CLIP, 1.0)) for m in members], axis=1)


def inner_splits(labels: np.ndarray, groups: np.ndarray | None, inner: int) -> list:
    """The (train, test) rows of a stack's inner CV: stratified by class, whole groups with
    `groups` (None: each row its own)."""
    rows = np.zeros((len(labels), 1))
    if groups is None:
        return list(StratifiedKFold(inner, shuffle=True, random_state=0).split(rows, labels))
    return list(StratifiedGroupKFold(inner, shuffle=True, random_state=0).split(rows, labels, groups))


def fit_meta_model(
    features: np.ndarray, labels: np.ndarray, c: float | None, part: str, groups: np.ndarray | None = None
) -> LogisticRegression | LogisticRegressionCV:
    """A multinomial logistic regression on `features`; C from an inner stratified CV on these
    rows only when `c` is None (fewer inner folds when a class has fewer than INNER_FOLDS rows, or
    the rows fewer `groups`), each group on one side of it."""
    classes, counts = np.unique(labels, return_counts=True)
    if len(classes) < 2:
        raise PetalsError(f"stacking: {part} holds only class {classes.tolist()}; a meta-model needs two")
    if c is not None:
        return LogisticRegression(C=c, max_iter=1000).fit(features, labels)
    inner = min(INNER_FOLDS, int(counts.min()), len(set(groups)) if groups is not None else INNER_FOLDS)
    if inner < 2:
        rare = classes[counts < 2].tolist()
        raise PetalsError(
            f"stacking: {part} has a single row of class(es) {rare}; choosing C by inner CV needs 2 per class"
            if rare
            else f"stacking: {part} holds a single group; choosing C by inner CV needs 2"
        )
    return LogisticRegressionCV(
        Cs=list(STACK_CS),
        l1_ratios=(0.0,),
        cv=inner_splits(labels, groups, inner),
        scoring="neg_log_loss",  # the meta-model outputs probabilities: judge them as such
        max_iter=1000,
        use_legacy_attributes=False,
    ).fit(features, labels)


def meta_probabilities(model, features: np.ndarray, classes: int) -> np.ndarray:
    """The model's class probabilities over all `classes`: a class it never saw gets 0."""
    out = np.zeros((len(features), classes))
    out[:, model.classes_] = model.predict_proba(features)
    return (out / out.sum(axis=1, keepdims=True)).astype(np.float32)


def _chosen_c(model) -> float:
    return float(model.C_ if hasattr(model, "C_") else model.C)


def stack_oof(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    metric: Metric,
    c: float | None = None,
    tests: list[np.ndarray] | None = None,
    groups: np.ndarray | None = None,
) -> BlendResult:
    """A logistic-regression meta-model judged out of fold: fold f's rows are predicted by a
    meta-model fitted (C included, by an inner CV of whole `groups`) on the other folds; the test
    set by one fitted on every row.

    The outer loop is written out rather than `cross_val_predict` so that each outer training
    part picks its inner folds from its own rows only: nothing about fold f, not even its class
    counts, reaches the model that predicts it.
    """
    members, labels, folds, tests = _arrays(members, labels, folds, tests)
    k = check_inputs(members, labels, folds, tests)
    groups = None if groups is None else np.asarray(groups).astype(str)
    if _numbers(labels):
        return stack_numbers(members, labels, folds, metric, k, tests, groups)
    classes = members[0].shape[1]
    features = stack_features(members)
    oof = np.zeros(members[0].shape, dtype=np.float32)
    fold_c = []
    with threadpool_limits(1):  # fits this small run several times slower on contended BLAS threads
        for f in range(k):
            held = folds == f
            kept = None if groups is None else groups[~held]
            model = fit_meta_model(features[~held], labels[~held], c, f"the rows outside fold {f}", kept)
            oof[held] = meta_probabilities(model, features[held], classes)
            fold_c.append(_chosen_c(model))
        model = fit_meta_model(features, labels, c, "all rows", groups)
    return BlendResult(
        kind="stack",
        oof=oof,
        score=float(metric.score(labels, oof)),
        fold_scores=fold_scores(oof, labels, folds, metric),
        test=None if tests is None else meta_probabilities(model, stack_features(tests), classes),
        c=_chosen_c(model),
        fold_c=fold_c,
    )


def compare(
    members: list[np.ndarray],
    labels: np.ndarray,
    folds: np.ndarray,
    metric: Metric,
    tests: list[np.ndarray] | None = None,
    needed: str | None = None,
    groups: np.ndarray | None = None,
) -> dict[str, BlendResult]:
    """Equal weights, searched weights and stacking, each scored out of fold, by kind (the stack's
    inner CV over whole `groups`: the folds keep them whole already). With `needed`, only that kind
    must fit: another these rows cannot fit (a stack on classes of one row outside a fold) is left
    out, said in one line, rather than stopping the one asked for."""
    methods = {
        "equal": lambda: equal_weights(members, labels, folds, metric, tests),
        "search": lambda: weight_search_oof(members, labels, folds, metric, tests),
        "stack": lambda: stack_oof(members, labels, folds, metric, tests=tests, groups=groups),
    }
    results = {}
    for kind, method in methods.items():
        try:
            results[kind] = method()
        except PetalsError as err:
            if needed in (None, kind):
                raise
            log.info("blend: %s left out (%s)", kind, err)
    return results


def stack_numbers(members, labels, folds, metric: Metric, k: int, tests=None, groups=None) -> BlendResult:
    """Numbers stacked by a ridge regression on the members' numbers side by side, judged out of
    fold as the classes' meta-model is: fold f's rows by a ridge (its alpha among STACK_ALPHAS by
    scikit-learn's leave-one-out choice, or with `groups` an inner CV of whole groups) fitted on
    the other folds; the test set by one fitted on every row. Several numbers a row: a ridge a
    column, on the members' numbers of that column (each member's own estimate of it), its weights
    reported as their mean over the columns."""
    columns = np.asarray(labels).reshape(len(labels), -1)  # as they came: [n] or [n, columns]
    oof = np.zeros(members[0].shape, dtype=np.float32)
    test = None if tests is None else np.zeros((len(tests[0]), columns.shape[1]), np.float32)
    weights = []
    for column in range(columns.shape[1]):
        fitted = _ridge_column(members, columns[:, column], folds, k, column, oof, tests, test, groups)
        weights.append(np.asarray(fitted.coef_, np.float64))
    return BlendResult(
        kind="stack",
        oof=oof,
        score=float(metric.score(labels, oof)),
        fold_scores=fold_scores(oof, labels, folds, metric),
        test=test,
        weights=np.mean(weights, axis=0),
    )


def _ridge_column(members, target, folds, k: int, column: int, oof, tests, test, groups=None):
    """One column's ridge stack: its OOF rows into `oof`, the test rows into `test`; the model
    fitted on every row."""
    features = np.stack([m[:, column] for m in members], axis=1)
    for f in range(k):
        held = folds == f
        model = _ridge(features[~held], target[~held], None if groups is None else groups[~held])
        oof[held, column] = model.predict(features[held])
    model = _ridge(features, target, groups)
    if tests is not None:
        test[:, column] = model.predict(np.stack([t[:, column] for t in tests], axis=1))
    return model


def _ridge(features: np.ndarray, target: np.ndarray, groups: np.ndarray | None):
    """A ridge whose alpha leave-one-out chooses, or with `groups` an inner CV of whole groups
    (leave-one-out would hold out one row of a group and train on its others)."""
    from sklearn.linear_model import RidgeCV

    if groups is None:
        return RidgeCV(alphas=STACK_ALPHAS).fit(features, target)
    inner = min(INNER_FOLDS, len(set(groups)))
    if inner < 2:
        raise PetalsError("stacking: the rows outside a fold hold a single group; choosing alpha needs 2")
    splits = list(GroupKFold(inner).split(features, target, groups))
    return RidgeCV(alphas=STACK_ALPHAS, cv=splits, scoring="neg_mean_squared_error").fit(features, target)
