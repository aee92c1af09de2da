"""The optimizer's decoupled weight decay: it shrinks the kernels, leaves biases, and is off at 0;
the stateless steps JAX's loop takes, on every variable or on those training, decay the same."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from pipeline.modeling.optimizer import make_optimizer
from tests.conftest import run_python


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


def stateless(weight_decay: float) -> dict[str, list]:
    """The kernel after three stateless steps (what `JaxLoop` and Keras's JAX trainer call), on
    every variable and on the two of three training while the third is frozen; the stateful
    steps' kernel beside them. On this process's Keras backend: JAX (TensorFlow refuses them)."""
    grads = [np.full((3, 2), 0.5, "float32"), np.full((2,), 0.5, "float32")]
    found = {"stateful": trained(weight_decay)[0].tolist()}
    for name in ("every", "training"):
        kernel = keras.Variable(np.full((3, 2), 2.0, "float32"), name="kernel")
        bias = keras.Variable(np.full((2,), 2.0, "float32"), name="bias")
        frozen = keras.Variable(np.full((2, 2), 2.0, "float32"), name="frozen")
        every = [kernel, bias] if name == "every" else [kernel, bias, frozen]
        training = [kernel, bias]
        optimizer = make_optimizer(0.1, 0.0, "float32", every, training.copy, weight_decay)
        values = [kernel.value, bias.value]
        state = [v.value for v in optimizer.variables]
        for _ in range(3):
            values, state = optimizer.stateless_apply(state, grads, values)
        found[name] = np.asarray(values[0]).tolist()
    return found


@pytest.mark.slow
@pytest.mark.heavy  # a JAX process; TensorFlow has no stateless steps (tf.distribute)
def test_jaxs_stateless_steps_decay_as_the_stateful_ones_on_every_variable_and_on_those_training():
    done = run_python(
        "import json\nfrom tests.test_optimizer import stateless\n"
        "print(json.dumps({decay: stateless(decay) for decay in (0.0, 1.0)}))",
        env={"KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = {float(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    for decay, kernels in found.items():
        for name in ("every", "training"):
            np.testing.assert_allclose(
                kernels[name], kernels["stateful"], rtol=1e-6, err_msg=f"{decay} {name}"
            )
    assert np.all(np.array(found[1.0]["stateful"]) < np.array(found[0.0]["stateful"]) - 0.1)
