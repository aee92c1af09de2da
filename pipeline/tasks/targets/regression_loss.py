"""A regression's training loss and, for several numbers a row, its training metric, written with
`keras.ops` so they train on TensorFlow and JAX."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


class StandardisedMSE(keras.losses.Loss):
    """Mean squared error over std^2: the MSE of the standardised target against the head's raw
    output, since the network's output is that output * std + mean (pipeline/networks/numbers.py).
    MSE rather than Huber: Kaggle scores these competitions by RMSE (MCRMSE: RMSE a column), which
    MSE optimises directly, and the standardised target has no outliers Huber's cut would be argued
    for. Several numbers a row: each column's error over its own std, averaged over the columns, so
    a column in wide units weighs no more than one in narrow (MCRMSE weighs each column alike)."""

    def __init__(self, std, reduction: str = "sum_over_batch_size"):
        super().__init__(reduction=reduction, name="standardised_mse")
        # One column: a Python float, as it always was; several: one a column.
        self.scale = 1.0 / float(std) ** 2 if np.ndim(std) == 0 else (1.0 / np.square(std)).astype("float32")

    def call(self, y_true, y_pred):
        error = ops.cast(y_pred, "float32") - ops.cast(y_true, "float32")
        return ops.mean(ops.square(error) * self.scale, axis=-1)


def standardised_mse(std) -> keras.losses.Loss:
    return StandardisedMSE(std)


class MeanColumnwiseRMSE(keras.metrics.Metric):
    """MCRMSE over the batches seen (Feedback Prize ELL's score): each column's RMSE from its running
    sum of squared errors, averaged over the columns. Not keras' RootMeanSquaredError, which pools
    every cell: a column predicted badly would hide among well predicted ones."""

    def __init__(self, columns: int, name: str = "accuracy"):
        super().__init__(name=name)
        self.columns = columns
        self.squares = self.add_variable(shape=(columns,), initializer="zeros", name="squares")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        error = ops.reshape(ops.cast(y_pred, "float32") - ops.cast(y_true, "float32"), (-1, self.columns))
        weight = (
            ops.ones_like(error[:, :1])
            if sample_weight is None
            else ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
        )
        self.squares.assign_add(ops.sum(ops.square(error) * weight, axis=0))
        self.count.assign_add(ops.sum(weight))

    def result(self):
        return ops.mean(ops.sqrt(self.squares / ops.maximum(self.count, 1.0)))

    def get_config(self) -> dict:
        return {"columns": self.columns, "name": self.name}
