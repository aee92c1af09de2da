"""The linear probe as a run: the head fitted by scikit-learn's logistic regression, not by SGD.

On a few hundred real photos every way of training the network (the recipe's last block, the head
alone, a bigger backbone) scored what frozen pooled features and a regularised logistic regression
score: the data cannot support more than a linear map on good features, and SGD on a head that
memorises its examples in one epoch has no principled place to stop. Logistic regression does:
its L2 penalty C is chosen by an inner cross-validation on the training rows alone.

`train.head_solver = "logistic"` (with the feature cache, the backbone frozen, one epoch) takes
each cached view's features at the input of the `logits` layer (every registry network ends
`... -> head_dropout -> logits`), fits `LogisticRegressionCV` on them (standardised; every view of
an example, and every example of a named group, in one inner fold, so C is never chosen on rows
whose example or group trained it), and writes the fitted map into `logits`: scaling folded into
the kernel, classes a fold never saw at a logit far below the rest. What is saved is an ordinary
network: evaluate, predict, TTA, CV, blends and kernels read it like any other.
"""

from __future__ import annotations

import logging
import warnings

import keras
import numpy as np
from sklearn.linear_model import LogisticRegressionCV
from threadpoolctl import threadpool_limits

from pipeline.core.errors import PetalsError
from pipeline.modeling.logistic import as_logits, inner_folds, training_logs

log = logging.getLogger(__name__)

SOLVER = "logistic"
# The inverse penalties tried, 1e-4 .. 1e2 in half-decades: on real sets of 118 to 3,000 images the
# baseline probes' choices fell between 1e-3 and 1e2 (benchmarks/probes.json, realdata.json).
CS = np.logspace(-4, 2, 13)
BATCH = 256


def check(config, task) -> None:
    """One line for a config the probe cannot run with (before anything trains): on images frozen
    cached features, on texts the network whose fitted form is TF-IDF + logistic regression."""
    from pipeline import networks
    from pipeline.modeling import text_probe

    train = config.train
    if train.head_solver != SOLVER:
        return
    backbone = config.model.backbone
    texts = networks.get(backbone).reads_ids
    needs = (
        (
            (
                "model.backbone=tfidf (a network whose fitted form is TF-IDF + LR)",
                backbone != text_probe.NETWORK,
            ),
        )
        if texts
        else (
            ("train.feature_cache=true", not train.feature_cache),
            ("train.frozen_epochs=1 (the backbone frozen)", train.frozen_epochs != train.epochs),
        )
    )
    wrong = [
        what
        for what, bad in (
            *needs,
            ("train.epochs=1", train.epochs != 1),
            ("a task of one class per example", task.activation != "softmax"),
        )
        if bad
    ]
    if wrong:
        fits = (
            "fits the network once on its training texts"
            if texts
            else "fits the head once on frozen features"
        )
        raise PetalsError(f"train.head_solver={SOLVER} {fits}: it needs {', '.join(wrong)}")


def pooled(top: keras.Model, features: np.ndarray) -> np.ndarray:
    """[views, examples, ...] cached activations -> [views, examples, d] at the input of `logits`:
    the layers of `top` below it (a chain: pooling and dropout, idle outside training)."""
    names = [layer.name for layer in top.layers]
    below = top.layers[1 : names.index("logits")]
    views = []
    for view in features:
        parts = []
        for i in range(0, len(view), BATCH):
            x = view[i : i + BATCH].astype(np.float32)
            for layer in below:
                x = layer(x)
            parts.append(np.asarray(x, dtype=np.float64))
        views.append(np.concatenate(parts))
    return np.stack(views)


def fit(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, num_classes: int, seed: int):
    """Pooled features [views, examples, d] -> (kernel [d, classes], bias [classes], C, inner folds)."""
    views, count, _ = features.shape
    x = features.reshape(views * count, -1)
    y = np.tile(labels, views)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    splits = inner_folds(labels, groups, views, seed)
    model = LogisticRegressionCV(
        Cs=CS if splits else [1.0],
        cv=splits or [(np.arange(len(y)), np.arange(len(y)))],  # too few to split: C = 1, said below
        scoring="neg_log_loss",
        max_iter=2000,
        random_state=seed,
    )
    # One BLAS thread: on a busy 2-core machine OpenBLAS's spinning threads made each small fit
    # ~50x slower (benchmarks/cv_data.py). Scikit-learn 1.8 announces 1.10's arguments; Kaggle's is older.
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.fit((x - mean) / scale, y)
    weights, intercept = as_logits(model, num_classes)  # on standardised features: fold the scaling in
    kernel = weights / scale[:, None]
    bias = intercept - (mean / scale) @ weights
    return kernel, bias, float(model.C_[0]), len(splits)


def train_head(trainer, start: int) -> None:
    """The probe's one epoch: fit on the training texts, or the cached training views, write the
    fitted map into the network, score and save."""
    if start >= trainer.config.train.epochs:
        return
    trainer._begin_epoch(0)
    if trainer.text_inputs is not None:
        from pipeline.modeling import text_probe

        logs, rows = text_probe.train_head(trainer), trainer.job.train.count
    else:
        logs, rows = _fit_views(trainer)
    trainer._finish_epoch(0, logs, images=rows)  # its seconds count from _begin_epoch: the fit included


def _fit_views(trainer) -> tuple[dict[str, float], int]:
    """The head fitted on the cached views: its training logs and the rows it was fitted on."""
    job, config = trainer.job, trainer.config
    split = job.train
    ids = np.asarray(split.ids, dtype=str)
    features = pooled(trainer.cut.top, split.features)
    groups = job.groups_of(ids) if job.groups_of is not None else ids
    labels = split.labels.astype(int)
    kernel, bias, c, folds = fit(features, labels, groups, job.spec.num_classes, config.seed)
    logits = trainer.net.get_layer("logits")
    logits.set_weights([kernel.astype(np.float32), bias.astype(np.float32)])
    whole = "whole groups" if job.groups_of is not None else "whole examples"
    said = f"C={c:g} by a {folds}-fold inner CV over {whole}" if folds else "C=1: too few to split"
    log.info("train: the head fitted by logistic regression on %d examples x %d views (%s)",
             len(ids), len(features), said)  # fmt: skip
    x = features.reshape(-1, features.shape[-1])
    return training_logs(x @ kernel + bias, np.tile(labels, len(features))), len(x)
