"""The optimizer's decoupled weight decay: it shrinks the kernels, leaves biases, and is off at 0."""

from __future__ import annotations

import keras
import numpy as np

from pipeline.modeling.optimizer import make_optimizer


def trained(weight_decay: float) -> tuple[np.ndarray, np.ndarray]:
    """A kernel and a bias after three Adam steps on the same gradients."""
    kernel = keras.Variable(np.full((3, 2), 2.0, "float32"), name="kernel")
    bias = keras.Variable(np.full((2,), 2.0, "float32"), name="bias")
    optimizer = make_optimizer(0.1, 0.0, "float32", [kernel, bias], lambda: [kernel, bias], weight_decay)
    grads = [np.full((3, 2), 0.5, "float32"), np.full((2,), 0.5, "float32")]
    for _ in range(3):
        optimizer.apply(grads, [kernel, bias])
    return kernel.numpy(), bias.numpy()


def test_weight_decay_shrinks_kernels_and_not_biases():
    plain_kernel, plain_bias = trained(0.0)
    kernel, bias = trained(1.0)
    np.testing.assert_allclose(plain_kernel, 2.0 - 3 * 0.1, rtol=1e-4)  # Adam's steps of lr alone
    assert np.all(kernel < plain_kernel - 0.1)  # about 2 x 0.1 x 1.0 a step on top
    np.testing.assert_array_equal(bias, plain_bias)  # ndim <= 1: no decay, as AdamW's groups


def test_zero_weight_decay_builds_the_plain_adam():
    kernel = keras.Variable(np.ones((2, 2), "float32"))
    optimizer = make_optimizer(1e-3, 0.0, "float32", [kernel], lambda: [kernel])
    assert optimizer.weight_decay is None
