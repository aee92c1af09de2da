"""The linear probe as a run: the head fitted once by scikit-learn (logistic or ridge regression,
as the task's target says), not by SGD.

On a few hundred real photos every way of training the network (the recipe's last block, the head
alone, a bigger backbone) scored what frozen pooled features and a regularised logistic regression
score: the data cannot support more than a linear map on good features, and SGD on a head that
memorises its examples in one epoch has no principled place to stop. A penalised linear fit does:
its L2 penalty is chosen by an inner cross-validation on the training rows alone.

`train.head_solver = "logistic"` (with the feature cache, the backbone frozen, one epoch) takes
each cached view's features at the input of the `logits` layer (every registry network ends
`... -> head_dropout -> logits`), fits on them (standardised; every view of an example, and every
example of a named group, in one inner fold, so the penalty is never chosen on rows whose example
or group trained it) the fit the task's target part names (`Task.probe`, pipeline/modeling/
head_fits.py: logistic regression for one class an example, one per label for several, ridge
regression for numbers), and writes the fitted map into `logits`: scaling folded into the kernel,
classes a fold never saw at a logit far below the rest. What is saved is an ordinary network:
evaluate, predict, TTA, CV, blends and kernels read it like any other.

On texts the same fit is made on a frozen sentence encoder's pooled vectors of the training texts
(`sentence-bert`, pipeline/networks/sentence.py; computed here, not by the feature cache: a CV
group's folds share them in the process);
the `tfidf` networks are fitted as TF-IDF + a linear fit (pipeline/modeling/text_probe.py), and
`tfidf-sentence` as TF-IDF with the encoder's vector beside it, one fit (pipeline/networks/joined.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path

import keras
import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.modeling import head_fits
from pipeline.networks import columns

log = logging.getLogger(__name__)

SOLVER = "logistic"
# The inverse penalties tried, 1e-4 .. 1e2 in half-decades: on real sets of 118 to 3,000 images the
# baseline probes' choices fell between 1e-3 and 1e2 (benchmarks/probes.json, realdata.json).
CS = np.logspace(-4, 2, 13)
BATCH = 256
# A sentence encoder's batch is cut to what attention holds: each layer keeps rows x heads x width^2
# scores. 1,000 texts of 128 word pieces (`make bench-encoder`, a process each): 256 a batch 45 s
# at a 2.75 GiB peak, 128 46 s / 2.33, 64 50 s / 1.90, 32 55 s / 1.68. Short texts, the most,
# still go 256 at a time (as fast at each setting); a batch of the longest holds what 64 of 128 do.
ATTENTION_CELLS = 64 * 128 * 128


def check(config, task) -> None:
    """One line for a config the probe cannot run with (before anything trains): on images frozen
    cached features, on texts a network the probe fits (TF-IDF + a linear fit, or a frozen sentence
    encoder's head on its pooled vectors), and a target whose head a fit is known for."""
    from pipeline import networks

    train = config.train
    if train.head_solver != SOLVER:
        return
    network = networks.get(config.model.backbone)
    texts = network.reads_ids
    needs = (
        (
            (
                f"model.backbone={' or '.join(n for n in networks.TEXT_NETWORKS if networks.get(n).fitted)} "
                "(TF-IDF + a linear fit, or a sentence encoder's head on its frozen vectors)",
                not network.fitted,
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
            # The target part names the fit of its head (pipeline/modeling/head_fits.py).
            (
                "a target whose head a probe fits (Task.probe)",
                getattr(task, "probe", None) not in head_fits.FITS,
            ),
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


def pooled(top: keras.Model, features: np.ndarray, row_columns: np.ndarray | None = None) -> np.ndarray:
    """[views, examples, ...] cached activations -> [views, examples, d] at the input of `logits`
    (`_below_logits`); an image_table's rows' columns [examples, n] join each view's."""
    below = _below_logits(top, row_columns)
    views = []
    for view in features:
        parts = []
        for i in range(0, len(view), BATCH):
            x = below(view[i : i + BATCH].astype(np.float32), slice(i, i + BATCH))
            parts.append(np.asarray(x, dtype=np.float64))
        views.append(np.concatenate(parts))
    return np.stack(views)


def _below_logits(top: keras.Model, row_columns: np.ndarray | None):
    """`top` up to its `logits` layer as a function of (activations, rows): the chain of layers
    below it (pooling and dropout, idle outside training), called layer by layer because the
    layers are shared with the whole network (a layer's own `input` is the whole network's); an
    image_table's top (pipeline/networks/columns.py) is the image part above the cut, and the rows'
    columns standardised as the network standardises them, joined."""
    if not columns.reads_columns(top):
        names = [layer.name for layer in top.layers]
        chain = top.layers[1 : names.index("logits")]

        def below(x, rows):
            for layer in chain:
                x = layer(x)
            return x

        return below
    image_top = next(layer for layer in top.layers if isinstance(layer, keras.Model))
    scale, join = top.get_layer(columns.COLUMNS_SCALE), top.get_layer(columns.JOIN)
    numbers = np.asarray(row_columns, np.float32)
    return lambda x, rows: join([image_top(x), scale(numbers[rows])])


def fit(
    features: np.ndarray, targets, groups: np.ndarray, seed: int, kind: str, outputs: int, summary=None
) -> head_fits.Fitted:
    """Pooled features [views, examples, d] -> the head fitted by `kind` (`Task.probe`) on them
    standardised, the scaling folded into its weights [d, outputs] and bias: on the raw features."""
    views, count, _ = features.shape
    x = features.reshape(views * count, -1)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    fitted = head_fits.FITS[kind].fit((x - mean) / scale, targets, groups, views, seed, CS, outputs, summary)
    kernel = fitted.weights / scale[:, None]
    return dataclasses.replace(fitted, weights=kernel, bias=fitted.bias - (mean / scale) @ fitted.weights)


def train_head(trainer, start: int) -> None:
    """The probe's one epoch: fit on the training texts, or the cached training views, write the
    fitted map into the network, score and save."""
    if start >= trainer.config.train.epochs:
        return
    trainer._begin_epoch(0)
    names = {layer.name for layer in trainer.net.layers}
    if trainer.text_inputs is not None and "tfidf" in names:
        from pipeline.modeling import text_probe

        # A bag beside a sentence encoder (`tfidf-sentence`): its vectors a block of the same fit.
        kept = trainer.run.path.parent  # the runs dir: the encoder's vectors for later processes
        vectors_of = functools.partial(sentence_vectors, runs_dir=kept) if "pool" in names else None
        logs, rows = text_probe.train_head(trainer, vectors_of), trainer.job.train.count
    elif trainer.text_inputs is not None:
        logs, rows = _fit_sentences(trainer)  # a frozen sentence encoder (probe.check let no other in)
    else:
        logs, rows = _fit_views(trainer)
    trainer._finish_epoch(0, logs, images=rows)  # its seconds count from _begin_epoch: the fit included


def _fit_views(trainer) -> tuple[dict[str, float], int]:
    """The head fitted on the cached views: its training logs and the rows it was fitted on."""
    job, config = trainer.job, trainer.config
    split = job.train
    ids = np.asarray(split.ids, dtype=str)
    features = pooled(trainer.cut.top, split.features, split.columns)
    groups = job.groups_of(ids) if job.groups_of is not None else ids
    kind = job.task.probe
    fitted = fit(
        features, split.labels, groups, config.seed, kind, job.spec.num_classes, trainer.target_summary
    )
    trainer.net.get_layer("logits").set_weights(
        [fitted.weights.astype(np.float32), fitted.bias.astype(np.float32)]
    )
    whole = "whole groups" if job.groups_of is not None else "whole examples"
    log.info("train: the head fitted by %s on %d examples x %d views (%s over %s)",
             head_fits.FITS[kind].title, len(ids), len(features), fitted.said, whole)  # fmt: skip
    x = features.reshape(-1, features.shape[-1])
    tiled = np.concatenate([np.asarray(split.labels)] * len(features))
    logs = head_fits.training_logs(trainer.net, job.task, x @ fitted.weights + fitted.bias, tiled)
    return logs, len(x)


# Sentence vectors already computed in this process, by the encoder's digest and the text's key:
# the K folds of a CV group (one process trains them all) share one frozen encoder, so each text
# is encoded once, not K - 1 times. Keyed by everything a vector depends on; bounded. Other
# processes' vectors come from the runs dir's store (`vector_store`), when one is given.
_VECTORS: dict[tuple[str, bytes], np.ndarray] = {}
MEMO_VECTORS = 200_000  # 384 float64s each: ~600 MB at most; past it, forget


def sentence_vectors(net, inputs: dict[str, np.ndarray], runs_dir: Path | None = None) -> np.ndarray:
    """A sentence encoder's inputs [n, length] -> its pooled vectors [n, d] (the input of `logits`),
    the texts taken shortest first and each batch cut to its longest text: what attention reads of
    the padding is masked, so the vectors are those of the whole width (a test holds them to it), at
    a fraction of the cost on short texts. A text this process encoded with the same weights is
    not encoded again, nor, with `runs_dir`, one any process kept there (`vector_store`), where
    the vectors this call computes are kept."""
    from pipeline.modeling import vector_store

    backbone, pool = net.get_layer("backbone"), net.get_layer("pool")
    digest = vector_store.encoder_digest(backbone)
    keys = [(digest, key) for key in vector_store.row_keys(inputs)]
    store = None if runs_dir is None else vector_store.store(runs_dir, digest, backbone.hidden_dim)
    if store is not None and any(key not in _VECTORS for key in keys):
        _remember({(digest, key): vector for key, vector in store.new_rows().items()})
    vectors = np.zeros((len(keys), backbone.hidden_dim))  # a mean keeps the width
    todo = np.array([row for row, key in enumerate(keys) if key not in _VECTORS], np.int64)
    lengths = np.asarray(inputs["padding_mask"]).sum(axis=1)
    order = todo[np.argsort(lengths[todo], kind="stable")]
    for rows in _encoder_batches(order, lengths[order]):
        width = max(1, int(lengths[rows].max()))
        batch = {name: np.asarray(value)[rows, :width] for name, value in inputs.items()}
        vectors[rows] = np.asarray(pool([backbone(batch)["sequence_output"], batch["padding_mask"]]))
    if store is not None and len(todo):
        new = dict(zip((keys[row][1] for row in todo), vectors[todo], strict=True))  # a text twice: once
        store.add(list(new), np.stack(list(new.values())))
    found = {keys[row]: vectors[row] for row in todo}
    for row, key in enumerate(keys):
        if key in _VECTORS:
            vectors[row] = _VECTORS[key]
    _remember(found)
    return vectors


def _remember(found: dict[tuple[str, bytes], np.ndarray]) -> None:
    if len(_VECTORS) + len(found) > MEMO_VECTORS:
        _VECTORS.clear()
    for key, vector in found.items():
        _VECTORS.setdefault(key, np.array(vector, np.float64))


def _encoder_batches(order: np.ndarray, lengths: np.ndarray):
    """`order`'s rows (sorted by their `lengths`, shortest first) in batches of at most BATCH rows
    whose attention scores fit ATTENTION_CELLS at the batch's longest text."""
    i = 0
    while i < len(order):
        widths = np.maximum(lengths[i : i + BATCH], 1).astype(np.int64)
        # k rows hold k x (the k-th's width)^2, growing with k: take the most that fit, at least one
        take = max(1, int((np.arange(1, len(widths) + 1) * widths**2 <= ATTENTION_CELLS).sum()))
        yield order[i : i + take]
        i += take


def _fit_sentences(trainer) -> tuple[dict[str, float], int]:
    """Fit a frozen sentence encoder's head on its pooled vectors of the training texts, as the image
    probe fits on pooled features (standardised, the penalty by an inner CV over whole examples and
    groups); write it into `logits`; its training logs and the rows it was fitted on."""
    job, config, net = trainer.job, trainer.config, trainer.net
    examples = job.train.training_examples
    ids = np.asarray(examples.ids, dtype=str)
    labels = np.asarray(examples.labels)
    vectors = sentence_vectors(net, job.train.encode(examples.inputs), trainer.run.path.parent)
    groups = job.groups_of(ids) if job.groups_of is not None else ids
    kind = job.task.probe
    outputs, summary = job.spec.num_classes, trainer.target_summary
    fitted = fit(vectors[None], labels, groups, config.seed, kind, outputs, summary)
    net.get_layer("logits").set_weights([fitted.weights.astype(np.float32), fitted.bias.astype(np.float32)])
    whole = "whole groups" if job.groups_of is not None else "whole examples"
    log.info("train: %s fitted on %d texts' sentence vectors (%d wide; %s over %s)",
             head_fits.FITS[kind].title, len(ids), vectors.shape[1], fitted.said, whole)  # fmt: skip
    return head_fits.training_logs(net, job.task, vectors @ fitted.weights + fitted.bias, labels), len(ids)
