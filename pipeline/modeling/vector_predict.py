"""Predictions of sentence-encoder runs through their vectors: each text is encoded once a process.

A `sentence-bert` or `tfidf-sentence` run reads a text's word pieces through the encoder and its
mean vector (`pool`), and only what is above `pool` differs between the folds of a CV group: the
encoder is frozen (its head fitted, `train.head_solver = "logistic"`; an encoder that trained has
weights of its own, and the memo is keyed by them). Predicted by the whole
network, every fold model ran the encoder over the test set again, at the full 128 pieces of every
text: evaluate and predict took 31-262 s on the real text sets of `make bench-realdata`, against
6 s for `tfidf` (docs/BENCHMARKS.md). Here the vectors come from `probe.sentence_vectors`: shortest
texts first, each batch cut to its longest text, and a text this process already encoded with the
same weights (another fold's test set, training's texts) is not encoded again, nor one a frozen
encoder's run kept beside the runs (`vector_store`: training scores val this way too, so evaluate
reads its vectors); the rest of the network (`above`: the bag beside the vector, the `logits`,
the task's output) reads them.
The vectors are the whole network's up to rounding (the padding is masked), and a test holds the
two to the same probabilities.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from pipeline.core.progress import Progress
from pipeline.modeling import probe
from pipeline.networks import sentence

ROWS = 4096  # texts encoded at a time, sorted by length within: their ids, ~40 MB at 2,048 a text


def above(net: keras.Model) -> tuple[keras.Model, list[str]] | None:
    """`net` above its sentence encoder's vector (`pool`): a network of its other inputs (the bag's
    `tokens`, if any, by the names returned) and the vector, last; None where `net` has no mean
    vector of an encoder's tokens (`sentence.MeanPool`; image networks' `pool`, a text family's
    first token: predicted whole)."""
    if not any(layer.name == "pool" and isinstance(layer, sentence.MeanPool) for layer in net.layers):
        return None
    pieces = set(net.get_layer("backbone").input)  # the word pieces' inputs, by name
    others = [name for name in net.input if name not in pieces]
    # A list, not names: the vector is a tensor inside the graph, with no input name of its own.
    inputs = [net.input[name] for name in others] + [net.get_layer("pool").output]
    return keras.Model(inputs, net.output, name=f"{net.name}-above-pool"), others


def kept(config, runs_dir: Path) -> Path | None:
    """Where a run's sentence vectors are kept: beside the runs for a frozen encoder (a probe's, the
    same in every run), nowhere for one that trained (its weights its own)."""
    return runs_dir if config.train.head_solver == probe.SOLVER else None


def predict(
    net: keras.Model,
    head: tuple[keras.Model, list[str]],
    batches,
    bar: Progress,
    runs_dir: Path | None = None,
) -> np.ndarray:
    """`net`'s outputs for every batch of `batches` (numpy dicts by input name), in order: the
    encoder's vectors from `probe.sentence_vectors` (those kept in `runs_dir`, if given, read back),
    then `head` (`above(net)`) over them."""
    top, others = head
    pieces = list(net.get_layer("backbone").input)
    outputs, chunk = [], []
    for batch in batches:
        chunk.append(batch)
        if sum(len(b[pieces[0]]) for b in chunk) >= ROWS:
            outputs.append(_through(net, top, others, pieces, chunk, bar, runs_dir))
            chunk = []
    if chunk:
        outputs.append(_through(net, top, others, pieces, chunk, bar, runs_dir))
    return np.concatenate(outputs)


def _through(net, top, others, pieces, chunk, bar, runs_dir) -> np.ndarray:
    inputs = {name: np.concatenate([b[name] for b in chunk]) for name in (*others, *pieces)}
    vectors = probe.sentence_vectors(net, {name: inputs[name] for name in pieces}, runs_dir)
    vectors = vectors.astype(np.float32)
    out = []
    for i in range(0, len(vectors), probe.BATCH):
        rows = slice(i, i + probe.BATCH)
        # Called, not `predict_on_batch`: a chunk's last batch is shorter, and each shape would be
        # traced again; the layers above the vector are a few small ops.
        out.append(np.asarray(top([*(inputs[name][rows] for name in others), vectors[rows]], training=False)))
        bar.advance(len(out[-1]))
    return np.concatenate(out)
