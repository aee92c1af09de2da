"""Predicting with two calls in flight on a CPU: the outputs in order, equal to one call at a time,
never more calls at once than asked, and an error in a call reaches the caller."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline.modeling import inference


def test_in_flight_keeps_the_order_and_holds_at_most_calls_inputs():
    running, most, lock = [0], [0], threading.Lock()

    def call(x):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01 * (x % 3))  # later inputs finish first
        with lock:
            running[0] -= 1
        return np.array([x])

    for calls in (1, 2, 3):
        most[0] = 0
        assert np.concatenate(list(inference.in_flight(call, range(10), calls))).tolist() == list(range(10))
        assert most[0] <= calls
    assert list(inference.in_flight(call, [], 2)) == []
    assert np.concatenate(list(inference.in_flight(call, range(5), 2, built=True))).tolist() == list(range(5))


def test_a_failing_call_raises_in_the_caller():
    def call(x):
        if x == 3:
            raise ValueError("batch 3")
        return np.array([x])

    with pytest.raises(ValueError, match="batch 3"):
        list(inference.in_flight(call, range(6), 2))


def test_a_keras_model_predicts_the_same_with_two_calls_in_flight(cpu):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inputs = keras.Input((24, 24, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3)(x)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x))
    pixels = np.random.default_rng(0).uniform(0, 255, (70, 24, 24, 3)).astype(np.float32)
    batches = tf.data.Dataset.from_tensor_slices(pixels).batch(16)  # the last one short
    assert cpu.device == "CPU" and inference.CALLS_IN_FLIGHT == 2
    together = inference.predict_batches(model, batches, cpu)
    alone = np.concatenate([model.predict_on_batch(b) for b in batches.as_numpy_iterator()])
    assert together.shape == (70, 8)
    np.testing.assert_array_equal(together, alone)


def test_closing_early_waits_for_the_calls_in_flight():
    """A pass stopped between pieces closes its calls' generator: none may run on after it."""
    finished = []

    def call(x):
        time.sleep(0.05)
        finished.append(x)
        return np.array([x])

    calls = inference.in_flight(call, range(10), 2, built=True)
    assert next(calls).tolist() == [0]
    calls.close()
    done = len(finished)
    time.sleep(0.2)
    assert len(finished) == done <= 3
