"""Keras `fit`'s side of the per-epoch work the custom loop does inline (pipeline.modeling.trainer):
each epoch's start and end, and a stop asked for between steps (SIGTERM, the time limit)."""

from __future__ import annotations

import keras

# Keras `fit`'s distributed input iterators on TensorFlow, kept until the process ends (cli.leave
# skips the teardown). Destroying a multi-replica iterator waits for its prefetch threads: on 8
# logical CPU replicas beside one busy process that took 20-41 s each time `fit` returned, 0 s
# with the iterator kept (the 8-replica test took 117-232 s in the suite, 33 s alone).
_FIT_ITERATORS: list = []


class EpochHooks(keras.callbacks.Callback):
    """Keras `fit`'s side of the per-epoch work the custom loop does inline."""

    def __init__(self, trainer):
        super().__init__()
        self.trainer = trainer

    def on_train_begin(self, logs=None):
        if keras.backend.backend() != "tensorflow" or self.trainer.job.platform.replicas == 1:
            return  # JAX's `fit` takes no tf.distribute iterator; one replica's iterator goes at once
        train = self.model.train_function  # made by `fit` just before this call

        def keeping_the_iterator(iterator):
            if not _FIT_ITERATORS or _FIT_ITERATORS[-1] is not iterator:
                _FIT_ITERATORS.append(iterator)
            return train(iterator)

        self.model.train_function = keeping_the_iterator

    def on_epoch_begin(self, epoch, logs=None):
        self.trainer._begin_epoch(epoch)
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps = batch + 1  # `batch` is the last step of the call (steps_per_execution)
        self.trainer.bar.reach(self.steps)
        if self.trainer.stop():
            self.model.stop_training = True  # `fit` ends the epoch here; on_epoch_end saves the step

    def on_epoch_end(self, epoch, logs=None):
        self.trainer._end_steps(epoch, self.steps, logs or {})  # Keras's logs: the steps' means
        if self.trainer.stop.reason is not None:  # the epoch's judge (a sweep's pruner) said stop:
            self.model.stop_training = True  # end here (read, not asked: a question counts across hosts)
