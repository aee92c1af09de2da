"""Datasets that petals reads to their end and drops: a prediction, the feature cache's pass,
the cached training batches, val at each scoring."""

from __future__ import annotations

import tensorflow as tf


def untuned(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with tf.data's autotuning off: for a pass read to its end and dropped.

    Autotune's model thread sleeps for up to a minute late in a long pass, and dropping the
    iterator waits for it to wake: `fit` on cached batches returned 35-39 s after a fold's last
    epoch; the flowers' test pass took 42 s against 25 s in 4 of 5 runs, the cache pass over
    9,607 images ran at 116 against 140 examples/s in 1 of 2 (TensorFlow 2.21, 2 cores;
    docs/BENCHMARKS.md, "A pass's end"). Off, parallel calls take the cores' count and a prefetch
    buffer still grows by itself: where the wait does not strike, about 5% slower (the test pass
    in a fresh process 31.5-31.9 s against 29.7-30.7). The elements are the same either way.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
