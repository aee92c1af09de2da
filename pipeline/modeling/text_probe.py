"""The probe for texts: the `tfidf` network fitted as TF-IDF + logistic regression, not trained by SGD.

`train.head_solver = "logistic"` with `model.backbone = "tfidf"` (pipeline/networks/tfidf.py):
the training texts' ids, as the network sees them (its `ngram_ids` layer on the run's word ids),
become sparse TF-IDF rows: sublinear tf (1 + ln count), smooth IDF (ln((1 + n) / (1 + df)) + 1),
each row scaled to unit length: scikit-learn's `TfidfVectorizer(sublinear_tf=True)` on those ids.
How that differs from a `TfidfVectorizer` on the raw texts: the words are the run's vocabulary
(`data.vocabulary_size` most frequent, the rest one unknown id), the bigrams hashed into 2**18
buckets, a text cut at `data.sequence_length` - 1 words.
`LogisticRegressionCV` is fitted on them as the image probe fits it (C by an inner CV over whole
examples and groups, `logistic.inner_folds`), and the IDF, the coefficients and the intercepts are
written into the network: its softmax is the fitted model's `predict_proba`.
"""

from __future__ import annotations

import logging
import warnings

import keras
import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegressionCV
from threadpoolctl import threadpool_limits

from pipeline.modeling import logistic

log = logging.getLogger(__name__)

NETWORK = "tfidf"  # the text network whose fitted form this is
BATCH = 256
# The inverse penalties tried, 1e-2 .. 1e3: unit-length sparse rows want weaker penalties than
# standardised dense features (the baseline TF-IDF + LR chose C=32 on real sentences).
CS = np.logspace(-2, 3, 11)


def feature_ids(net, tokens: np.ndarray) -> np.ndarray:
    """The run's word ids [n, length] -> the feature ids the network weighs: its `ngram_ids` output."""
    to_ids = keras.Model(net.input, net.get_layer("ngram_ids").output)
    parts = [np.asarray(to_ids(tokens[i : i + BATCH])) for i in range(0, len(tokens), BATCH)]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros((0, 0), np.int64)


def counts(ids: np.ndarray, rows: int) -> sparse.csr_matrix:
    """Feature ids [n, length] (0: padding) -> each text's count of each id, [n, rows] CSR."""
    texts = np.repeat(np.arange(len(ids)), ids.shape[1])
    flat = ids.reshape(-1)
    kept = flat > 0
    ones = np.ones(int(kept.sum()))
    found = sparse.coo_matrix((ones, (texts[kept], flat[kept])), shape=(len(ids), rows)).tocsr()
    found.sum_duplicates()
    return found


def idf(found: sparse.csr_matrix) -> np.ndarray:
    """Smooth IDF of each id over the training texts; 0 for an id none held (out of the vocabulary)."""
    df = np.bincount(found.indices, minlength=found.shape[1])
    weights = np.log((1.0 + found.shape[0]) / (1.0 + df)) + 1.0
    return np.where(df > 0, weights, 0.0)


def tfidf(found: sparse.csr_matrix, weights: np.ndarray) -> sparse.csr_matrix:
    """Counts -> sublinear tf x IDF, each row of unit length (an empty row stays empty)."""
    x = found.astype(np.float64)
    x.data = 1.0 + np.log(x.data)
    x = sparse.csr_matrix(x.multiply(weights[None, :]))
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1))).ravel()
    return sparse.csr_matrix(sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ x)


def fit(x: sparse.csr_matrix, labels: np.ndarray, groups: np.ndarray, seed: int):
    """TF-IDF rows [n, rows] -> (the fitted LogisticRegressionCV, the columns it was fitted on,
    inner folds). Only the columns some text holds: the rest would get a weight of 0 anyway."""
    used = np.flatnonzero(np.diff(x.tocsc().indptr))
    splits = logistic.inner_folds(labels, groups, 1, seed)
    everything = np.arange(len(labels))
    model = LogisticRegressionCV(
        Cs=CS if splits else [1.0],
        cv=splits or [(everything, everything)],  # too few to split: C = 1, said by the caller
        scoring="neg_log_loss",
        max_iter=2000,
        random_state=seed,
    )
    with threadpool_limits(1), warnings.catch_warnings():  # one BLAS thread, as probe.fit says why
        warnings.simplefilter("ignore", FutureWarning)
        model.fit(x[:, used], labels)
    return model, used, len(splits)


def written(model, used: np.ndarray, rows: int, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The fitted model as the network's `logits`: (table [rows, classes], bias [classes])."""
    weights, bias = logistic.as_logits(model, num_classes)
    table = np.zeros((rows, num_classes))
    table[used] = weights
    return table, bias


def train_head(trainer) -> dict[str, float]:
    """Fit the network on the training texts, write its `tfidf` and `logits`; the epoch's logs."""
    job, config, net = trainer.job, trainer.config, trainer.net
    examples = job.train.training_examples
    ids = np.asarray(examples.ids, dtype=str)
    labels = np.asarray(examples.labels).astype(int)
    found = counts(feature_ids(net, job.train.encode(examples.inputs)), net.get_layer("logits").rows)
    weights = idf(found)
    x = tfidf(found, weights)
    groups = job.groups_of(ids) if job.groups_of is not None else ids
    model, used, folds = fit(x, labels, groups, config.seed)
    table, bias = written(model, used, x.shape[1], job.spec.num_classes)
    c = float(model.C_[0])
    net.get_layer("tfidf").set_weights([weights.astype(np.float32)])
    net.get_layer("logits").set_weights([table.astype(np.float32), bias.astype(np.float32)])
    said = f"C={c:g} by a {folds}-fold inner CV over whole examples" if folds else "C=1: too few to split"
    log.info("train: TF-IDF + logistic regression fitted on %d texts, %d features (%s)",
             len(ids), int((weights > 0).sum()), said)  # fmt: skip
    return logistic.training_logs(np.asarray(x @ table) + bias, labels)
