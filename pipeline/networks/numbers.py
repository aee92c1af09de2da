"""A regression's output: the head's raw output (a standardised number) back in the target's units.

The network learns the standardised target, (y - mean) / std of the training rows: Pawpularity's
scores run 1-100 around a mean of 38, and a head whose bias starts at zero would spend its first
epochs climbing to 38 with gradients of tens (a learning rate tuned for logits of a few units
overshoots); CommonLit's run -3.7 to 1.7. Standardised, a zero-initialised head starts at the
mean, and the loss starts near 1 whatever the units. The mean and std are this layer's weights
(not trained), set once from the training rows (`set_scale`) and saved in every weights file and
checkpoint of the run, so every later stage (evaluate, predict, a fold's OOF rows) un-standardises
the same way from the weights it loads, and the network's output is the number itself. Several
numbers a row (a column each) are standardised each by its own column's mean and std.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

ACTIVATION = "standardised"  # `Task.activation` of a regression: `networks.with_output` builds this layer


class Unstandardise(keras.layers.Layer):
    """z -> z * std + mean, in float32; mean and std saved with the weights, never trained. One pair
    per output column: a scalar for one number (the shape every weights file before several numbers
    holds, so they still load), a vector of the columns' for several (Feedback Prize ELL's six)."""

    def build(self, input_shape) -> None:
        columns = input_shape[-1]
        shape = () if columns in (1, None) else (columns,)
        self.mean = self.add_weight(shape=shape, initializer="zeros", trainable=False, name="target_mean")
        self.std = self.add_weight(shape=shape, initializer="ones", trainable=False, name="target_std")

    def call(self, inputs):
        return ops.cast(inputs, "float32") * self.std + self.mean

    def set_scale(self, mean, std) -> None:
        """The training targets' mean and std: floats for one column, one each a column for several."""
        self.mean.assign(np.asarray(mean, "float32").reshape(self.mean.shape))
        self.std.assign(np.asarray(std, "float32").reshape(self.std.shape))
