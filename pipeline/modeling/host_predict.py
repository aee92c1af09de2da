"""Predicting across several processes (JAX on a multi-host mesh, TensorFlow's multi-worker
strategy): each example once, every process ending with all the outputs in the dataset's order.

A mesh-wide `predict` fails across processes: its outputs live partly on other hosts, where this
process cannot read them (under TensorFlow's multi-worker strategy, Keras' `predict` returns this
worker's rows only). So each process takes every n-th batch (process i: batches i, i+n, ...),
predicts it with a copy of the weights outside the distribution, on its own first device, and the
engine's all-gather (JAX's `process_allgather`, the strategy's `gather`) hands every process the
others' outputs, which are put back in order. Every process then scores, and takes decisions (the
best epoch), on the same numbers.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial

import numpy as np

from pipeline.core.hosts import Hosts

# A model's copy outside the distribution, built once; it goes with the model (an id could be reused).
_HERE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def predict_shared(model, batches, platform, bar=None) -> np.ndarray:
    """`model`'s outputs for every batch of `batches` (all of one size but the last), each batch
    predicted by one process only; `bar` (pipeline/core/progress.py) counts this process's
    batches as the whole's share."""
    hosts = platform.hosts
    gather = partial(allgather, platform)
    count = (lambda n: bar.advance(n * hosts.count)) if bar is not None else None
    outputs = predict_here(model, batches.shard(hosts.count, hosts.index), count)
    # The batch size: process 0's first batch is the dataset's first (the largest of the first ones).
    rows = int(np.max(gather(np.asarray([len(outputs[0]) if outputs else 0]))))
    # float32 on every process (an empty share is; mixed precision's outputs are not): one dtype to gather
    mine = (
        np.concatenate(outputs).astype(np.float32)
        if outputs
        else np.zeros((0, *model.output.shape[1:]), np.float32)
    )
    return in_order(mine, hosts, rows, gather)


def allgather(platform, value: np.ndarray) -> np.ndarray:
    """Every process's `value` (one shape on all), stacked in process order."""
    if platform.backend == "jax":
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(value))
    import tensorflow as tf

    strategy = platform.strategy
    values = strategy.experimental_distribute_values_from_function(lambda _: tf.constant(value[None]))
    every = strategy.gather(values, axis=0).numpy()  # one copy per replica, worker after worker
    return every[:: strategy.num_replicas_in_sync // platform.hosts.count]


def in_order(mine: np.ndarray, hosts: Hosts, rows: int, gather: Callable) -> np.ndarray:
    """Every process's outputs, gathered, in the order of the batches they were dealt from: local
    row r of process i belongs to batch (r // rows) * n + i."""
    counts = np.asarray(gather(np.asarray([len(mine)]))).ravel()
    padded = np.zeros((counts.max(), *mine.shape[1:]), mine.dtype)  # the all-gather wants one shape
    padded[: len(mine)] = mine
    every = np.asarray(gather(padded))
    out = np.empty((counts.sum(), *mine.shape[1:]), mine.dtype)
    for process, count in enumerate(counts):
        local = np.arange(count)
        out[((local // rows) * hosts.count + process) * rows + local % rows] = every[process, :count]
    return out


def predict_here(model, batches, count: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """`model`'s outputs for each batch, from a copy of it outside the multi-host distribution, on
    this process's first device (every variable of a data-parallel mesh has a replica here to
    copy). The copy is made once per model and takes its weights anew at each call: each epoch's
    scoring compiles nothing again."""
    import keras

    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        if model not in _HERE:
            _HERE[model] = keras.models.clone_model(model)
        copy = _HERE[model]
        copy.set_weights(model.get_weights())
        outputs = []
        for x in batches.as_numpy_iterator():
            outputs.append(np.asarray(copy.predict_on_batch(x)))
            if count is not None:
                count(len(outputs[-1]))
        return outputs
    finally:
        keras.distribution.set_distribution(distribution)
