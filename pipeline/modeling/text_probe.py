"""The probe for texts: the `tfidf` network fitted as TF-IDF + a linear fit, not trained by SGD.

`train.head_solver = "logistic"` with `model.backbone = "tfidf"` (pipeline/networks/tfidf.py):
the training texts' ids, as the network sees them (its `ngram_ids` layer on the run's word ids),
become sparse TF-IDF rows: sublinear tf (1 + ln count), smooth IDF (ln((1 + n) / (1 + df)) + 1),
each row scaled to unit length: scikit-learn's `TfidfVectorizer(sublinear_tf=True)` on those ids.
How that differs from a `TfidfVectorizer` on the raw texts: the words are the run's vocabulary
(`data.vocabulary_size` most frequent, the rest one unknown id), the bigrams hashed into 2**18
buckets, a text cut at `data.sequence_length` - 1 words.
The fit the task's target names is made on them as the image probe makes it (pipeline/modeling/
head_fits.py: logistic regression, one per label, or ridge regression, the penalty by an inner CV
over whole examples and groups), and the IDF, the coefficients and the intercepts are written into
the network: its output is the fitted model's `predict_proba` (or `predict`).
"""

from __future__ import annotations

import logging

import keras
import numpy as np
from scipy import sparse

from pipeline.modeling import head_fits

log = logging.getLogger(__name__)

BATCH = 256
# The inverse penalties tried, 1e-2 .. 1e3: unit-length sparse rows want weaker penalties than
# standardised dense features (the baseline TF-IDF + LR chose C=32 on real sentences).
CS = np.logspace(-2, 3, 11)


def feature_ids(net, tokens: np.ndarray) -> np.ndarray:
    """The run's word ids [n, length] -> the feature ids the network weighs: its `ngram_ids` output
    (from its `words` layer's input: the tokens, whatever else the network reads)."""
    to_ids = keras.Model(net.get_layer("words").input, net.get_layer("ngram_ids").output)
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


def tfidf(
    found: sparse.csr_matrix, weights: np.ndarray, block: tuple[int, int] | None = None
) -> sparse.csr_matrix:
    """Counts -> sublinear tf x IDF, each row of unit length (an empty row stays empty); with
    `block` = (low, high), a row's columns in [low, high) and the rest each of unit length on
    their own (the network's `TfidfWeights`)."""
    x = sparse.csr_matrix(found.astype(np.float64))
    x.data = (1.0 + np.log(x.data)) * weights[x.indices]
    inside = np.zeros(len(x.data), np.int64)
    if block is not None:
        inside = ((x.indices >= block[0]) & (x.indices < block[1])).astype(np.int64)
    part = 2 * np.repeat(np.arange(x.shape[0]), np.diff(x.indptr)) + inside  # each value's row and block
    norms = np.sqrt(np.bincount(part, weights=x.data**2, minlength=2 * x.shape[0]))
    x.data = x.data / np.maximum(norms[part], 1e-12)
    x.eliminate_zeros()  # an id out of the vocabulary (IDF 0)
    return x


def fit(
    x: sparse.csr_matrix, targets, groups: np.ndarray, seed: int, kind: str, outputs: int, summary=None
) -> tuple[head_fits.Fitted, np.ndarray]:
    """TF-IDF rows [n, rows] -> the head fitted by `kind` (`Task.probe`) and the columns it was
    fitted on: only those some text holds (the rest would get a weight of 0 anyway)."""
    used = np.flatnonzero(np.diff(x.tocsc().indptr))
    return head_fits.FITS[kind].fit(x[:, used], targets, groups, 1, seed, CS, outputs, summary), used


def written(fitted: head_fits.Fitted, used: np.ndarray, rows: int) -> np.ndarray:
    """The fitted head's weights as the network's `logits` table [rows, outputs]."""
    table = np.zeros((rows, fitted.weights.shape[1]))
    table[used] = fitted.weights
    return table


def fit_network(
    net, inputs, labels, groups: np.ndarray, seed: int, kind: str, outputs: int, summary=None, vectors_of=None
) -> tuple[head_fits.Fitted, sparse.csr_matrix, np.ndarray]:
    """Fit the network on its inputs for the training texts: write its `tfidf` (the IDF) and `logits`
    (the fitted map); the fit, the features it was fitted on and the map over them. With
    `vectors_of` ((network, the encoder's inputs) -> [n, d] unit-length vectors: a frozen sentence
    encoder's, pipeline/networks/joined.py), `inputs` hold both tokenizations by name and the
    vector is a third block beside the words and the characters: one fit over all three."""
    tokens = inputs["tokens"] if vectors_of is not None else inputs
    rows = net.get_layer("logits").rows
    found = counts(feature_ids(net, tokens), rows)
    weights = idf(found)
    x = tfidf(found, weights, net.get_layer("tfidf").block)
    if vectors_of is not None:
        pieces = {name: value for name, value in inputs.items() if name != "tokens"}
        x = sparse.hstack([x, sparse.csr_matrix(vectors_of(net, pieces))], format="csr")
    fitted, used = fit(x, labels, groups, seed, kind, outputs, summary)
    table = written(fitted, used, x.shape[1]).astype(np.float32)
    net.get_layer("tfidf").set_weights([weights.astype(np.float32)])
    dense = [table[rows:]] if vectors_of is not None else []  # the vector's rows, after the bias
    net.get_layer("logits").set_weights([table[:rows], fitted.bias.astype(np.float32), *dense])
    return fitted, x, table


def train_head(trainer, vectors_of=None) -> dict[str, float]:
    """Fit the network on the training texts (`fit_network`); the epoch's logs."""
    job, config, net = trainer.job, trainer.config, trainer.net
    examples = job.train.training_examples
    ids = np.asarray(examples.ids, dtype=str)
    labels = np.asarray(examples.labels)
    groups = job.groups_of(ids) if job.groups_of is not None else ids
    kind = job.task.probe
    fitted, x, table = fit_network(
        net, job.train.encode(examples.inputs), labels, groups, config.seed, kind, job.spec.num_classes,
        trainer.target_summary, vectors_of,
    )  # fmt: skip
    rows = net.get_layer("logits").rows
    vector = f" and a {x.shape[1] - rows}-wide sentence vector" if x.shape[1] > rows else ""
    features = int((net.get_layer("tfidf").get_weights()[0] > 0).sum())
    whole = "whole groups" if job.groups_of is not None else "whole examples"  # as the image probe says
    log.info("train: TF-IDF%s + %s fitted on %d texts, %d features (%s over %s)",
             vector, head_fits.FITS[kind].title, len(ids), features, fitted.said, whole)  # fmt: skip
    return head_fits.training_logs(net, job.task, np.asarray(x @ table) + fitted.bias, labels)
