"""Does the small image sets' probe gain from another fit on the same features? petals' probe
(`pipeline.modeling.probe.fit`: the tapped trio's features standardised, a logistic regression whose
C an inner CV over whole examples chooses) against three changes a linear probe is often given:

- `signed-sqrt`: each feature x read as sign(x) sqrt(|x|) before the same fit (power normalisation:
  pooled activations are heavy-tailed, and a square root evens them);
- `l2-taps`: each tap of each network (`bench_probe_taps.tap_columns`: 9 blocks of 112-1,280
  columns) scaled to unit length in each image before the same fit;
- `shrinkage-lda`: linear discriminant analysis with each class's covariance shrunk by Ledoit and
  Wolf's rule (scikit-learn's `LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")`) on the
  standardised features: a classifier that reads the features' correlations, where the logistic
  regression's one L2 penalty treats every standardised direction alike.

Each split is bench-realdata's (`bench_probe_splits.splits_of`: stratified, whole groups), each arm
fitted on its dev part's two views (the image and its mirror) and scored on its test part once,
against bench-realdata's baseline (Lite0's pooled features at 192 px, C by 5-fold CV). The features
are computed once, as bench_probe_taps computes them (the registry's tapped trio, each image read
as petals reads the competition bench-realdata writes).

scikit-learn's LDA inverts a 5,176 x 5,176 covariance, 45 s a fit here; `shrinkage_lda` solves the
same problem in the dual (each class's shrunk covariance is a diagonal plus the class's few rows,
so their sum is inverted by Woodbury's identity), 0.5 s a fit, the same coefficients to 1e-12
(tests/test_bench_probe_fits.py holds it to scikit-learn's).

Usage: python benchmarks/bench_probe_fits.py [--sets stamps gnome-icons] [--splits 20]
Prints one line a split and a set, and writes benchmarks/probe_fits.json.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data, realdata, realdata_gaps  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_probe_splits import TRIO, as_petals_reads, command, difference, splits_of  # noqa: E402
from benchmarks.bench_probe_taps import TAPPED, tap_columns, trio_features  # noqa: E402
from benchmarks.bench_probes import pooled_model  # noqa: E402

ARMS = ("baseline", "logistic", "signed-sqrt", "l2-taps", "shrinkage-lda")


def ledoit_wolf_shrinkage(x: np.ndarray) -> float:
    """sklearn.covariance.ledoit_wolf_shrinkage of centred rows x [n, p], from their n x n Gram
    matrix instead of the p x p covariance."""
    n, p = x.shape
    squares = x**2
    trace = squares.sum(axis=0) / n
    mu = trace.sum() / p
    beta_ = float((squares.sum(axis=1) ** 2).sum())
    delta_ = float(((x @ x.T) ** 2).sum()) / n**2
    beta = (beta_ / n - delta_) / (p * n)
    delta = (delta_ - 2 * mu * trace.sum() + p * mu**2) / p
    beta = min(beta, delta)
    return 0.0 if beta == 0 else beta / delta


def shrinkage_lda(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What `LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto").fit(x, y)` fits -> (coef_
    [classes, p], intercept_ [classes], classes_). Its covariance is the priors' sum of each class's
    Ledoit-Wolf covariance of its standardised rows, scaled back: a diagonal plus u.T @ u, u one row
    per example, so it is solved by Woodbury's identity on an n x n system."""
    classes = np.unique(y)
    p = x.shape[1]
    priors = np.array([(y == c).mean() for c in classes])
    means = np.stack([x[y == c].mean(axis=0) for c in classes])
    diagonal, rows = np.zeros(p), []
    for prior, c in zip(priors, classes, strict=True):
        own = x[y == c]
        scale = own.std(axis=0)
        scale[scale == 0] = 1.0
        z = (own - own.mean(axis=0)) / scale
        shrink = ledoit_wolf_shrinkage(z)
        diagonal += prior * shrink * (z**2).sum() / (len(z) * p) * scale**2
        rows.append(np.sqrt(prior * (1 - shrink) / len(z)) * z * scale)
    u = np.concatenate(rows)
    solved = means.T / diagonal[:, None]  # diagonal^-1 means.T
    inner = np.eye(len(u)) + (u / diagonal) @ u.T
    coef = (solved - (u.T / diagonal[:, None]) @ np.linalg.solve(inner, u @ solved)).T
    return coef, -0.5 * np.einsum("kd,kd->k", means, coef) + np.log(priors), classes


def fitted_arm(
    arm: str, views: np.ndarray, dev, test, labels, groups, blocks: list[np.ndarray]
) -> np.ndarray:
    """The arm fitted on the dev rows' views [2, dev, d] -> its predicted classes of test's first view."""
    from pipeline.modeling import probe

    x = views
    if arm == "signed-sqrt":
        x = np.sign(views) * np.sqrt(np.abs(views))
    elif arm == "l2-taps":
        x = views.copy()
        for columns in blocks:
            x[..., columns] /= np.linalg.norm(x[..., columns], axis=-1, keepdims=True) + 1e-12
    classes = int(labels.max()) + 1
    if arm != "shrinkage-lda":
        fitted = probe.fit(x[:, dev], labels[dev], groups[dev], 0, "logistic", classes)
        return (x[0, test] @ fitted.weights + fitted.bias).argmax(axis=1)
    rows = x[:, dev].reshape(-1, x.shape[-1])
    mean, scale = rows.mean(axis=0), rows.std(axis=0)  # standardised as the probe standardises
    scale[scale == 0] = 1.0
    coef, intercept, seen = shrinkage_lda((rows - mean) / scale, np.tile(labels[dev], len(x)))
    return seen[(((x[0, test] - mean) / scale) @ coef.T + intercept).argmax(axis=1)]


def run_set(name: str, count: int) -> dict:
    data = realdata.load(name, False)
    images = data.dev.items + data.test.items
    labels = np.concatenate([data.dev.labels, data.test.labels])
    grouped = data.grouped
    groups = (
        np.concatenate([data.dev.groups, data.test.groups]) if grouped else np.arange(len(labels)).astype(str)
    )
    started = time.perf_counter()
    lite0 = cv_data.probe_features(images)
    model = pooled_model(TAPPED, TRIO[1])
    read = [as_petals_reads(image, TRIO[1], None) for image in images]
    views = np.stack([trio_features(model, read, False), trio_features(model, read, True)])
    columns = tap_columns(model)
    blocks = sorted((c[i : i + w] for c in columns.values() for i, w in _runs(c)), key=lambda c: c[0])
    seconds = round(time.perf_counter() - started, 1)
    rows = []
    for seed, dev, test in splits_of(data, count):
        test_groups = groups[test] if grouped else None
        found, _ = cv_data.fit_probe(lite0[dev], labels[dev], lite0[test], groups[dev] if grouped else None)
        predicted = {"baseline": found.argmax(axis=1)}
        for arm in ARMS[1:]:
            predicted[arm] = fitted_arm(arm, views, dev, test, labels, groups, blocks)
        scored = {
            arm: realdata_gaps.test_score(labels[test], classes, len(data.classes), test_groups)[
                "test_macro_f1"
            ]
            for arm, classes in predicted.items()
        }
        rows.append({"seed": seed, "test": len(test), **scored})
        print(f"  {name} seed {seed}: {rows[-1]}", flush=True)
    return {
        "classes": len(data.classes),
        "images": len(labels),
        "splits": rows,
        "mean": {arm: round(float(np.mean([row[arm] for row in rows])), 4) for arm in ARMS},
        "differences": {
            f"{a} - {b}": difference(rows, a, b) for a in ARMS[1:] for b in ("baseline", "logistic") if a != b
        },
        "feature_seconds": seconds,
        "commit": commit(),
    }


def _runs(columns: np.ndarray):
    """(start, width) of each run of consecutive column numbers: a tap's block in each network."""
    breaks = np.flatnonzero(np.diff(columns) != 1) + 1
    starts = np.concatenate([[0], breaks])
    return zip(starts, np.diff(np.concatenate([starts, [len(columns)]])), strict=True)


def main() -> None:
    command(__doc__, ["stamps", "gnome-icons"], "probe_fits.json", run_set)


if __name__ == "__main__":
    main()
