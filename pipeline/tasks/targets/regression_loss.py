"""A regression's training loss, written with `keras.ops` so it trains on TensorFlow and JAX."""

from __future__ import annotations

import keras
from keras import ops


class StandardisedMSE(keras.losses.Loss):
    """Mean squared error over std^2: the MSE of the standardised target against the head's raw
    output, since the network's output is that output * std + mean (pipeline/networks/numbers.py).
    MSE rather than Huber: Kaggle scores these competitions by RMSE, which MSE optimises directly,
    and the standardised target has no outliers Huber's cut would be argued for."""

    def __init__(self, std: float, reduction: str = "sum_over_batch_size"):
        super().__init__(reduction=reduction, name="standardised_mse")
        self.scale = 1.0 / float(std) ** 2

    def call(self, y_true, y_pred):
        error = ops.cast(y_pred, "float32") - ops.cast(y_true, "float32")
        return ops.mean(ops.square(error), axis=-1) * self.scale


def standardised_mse(std: float) -> keras.losses.Loss:
    return StandardisedMSE(std)
