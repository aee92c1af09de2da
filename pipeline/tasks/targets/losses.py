"""The training loss: cross-entropy with label smoothing, optionally logit-adjusted for long tails.

Written with `keras.ops`, so the same loss trains on TensorFlow and on JAX.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from pipeline.core.config import TrainConfig


class LogitAdjustedCrossentropy(keras.losses.Loss):
    """Cross-entropy of the logits plus tau x log(class prior) (Menon et al., 2021, "Long-tail
    learning via logit adjustment"): a frequent class must win by its prior's margin, so the
    network learns scores that do not lean towards the frequent classes.

    It takes the classifier's softmax probabilities, whose logs are the logits up to a
    per-example constant that the softmax cancels.
    """

    def __init__(self, prior: np.ndarray, tau: float, label_smoothing: float, reduction: str):
        super().__init__(reduction=reduction, name="logit_adjusted_crossentropy")
        self.shift = (tau * np.log(prior)).astype("float32")
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        epsilon = keras.config.epsilon()  # where Keras clips probabilities for its cross-entropy
        probabilities = ops.clip(ops.cast(y_pred, "float32"), epsilon, 1.0)
        logits = ops.log(probabilities) + ops.convert_to_tensor(self.shift)
        return keras.losses.categorical_crossentropy(
            y_true, logits, from_logits=True, label_smoothing=self.label_smoothing
        )


def loss_function(
    train: TrainConfig, class_counts: np.ndarray | None = None, reduction: str = "sum_over_batch_size"
) -> keras.losses.Loss:
    """The training loss: cross-entropy with label smoothing, logit-adjusted by the class counts
    when `train.logit_adjustment` > 0 (a class without images counts as one)."""
    if not train.logit_adjustment:
        return keras.losses.CategoricalCrossentropy(
            label_smoothing=train.label_smoothing, reduction=reduction
        )
    if class_counts is None:
        raise ValueError("train.logit_adjustment needs the training shards' class counts")
    counts = np.maximum(class_counts, 1)
    return LogitAdjustedCrossentropy(
        counts / counts.sum(), train.logit_adjustment, train.label_smoothing, reduction
    )
