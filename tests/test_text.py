"""Text models: reviews vectorised before tf.data, an LSTM trained at a static batch size (a TPU's
shapes) and served at any batch size on the CPU with the same weights, on both backends."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_python

STATIC_BATCH = 16
LENGTH = 40


def test_words_of_every_script_survive_standardizing():
    import tensorflow as tf

    from pipeline.modeling.text import standardize

    texts = ["Café naïve!", "Привет, мир", "你好 world", "It's <br />GREAT"]
    cleaned = [t.decode() for t in standardize(tf.constant(texts)).numpy()]
    assert [c.split() for c in cleaned] == [
        ["café", "naïve"],
        ["привет", "мир"],
        ["你好", "world"],
        ["it's", "great"],
    ]


def test_texts_become_fixed_length_ids_that_open_with_the_start_id():

    from pipeline.modeling.text import START, Vectorizer

    texts = ["A great film.<br /><br />Great acting!", "an awful film", "??? !!!"]
    vectorizer = Vectorizer.adapt(texts, vocabulary_size=20, sequence_length=8)
    assert "br" not in vectorizer.vocabulary and "great" in vectorizer.vocabulary
    ids = vectorizer((np.array(texts),))
    assert ids.shape == (3, 8) and ids.dtype == np.int32 and (ids[:, 0] == START).all()
    assert ids[2].tolist() == [START] + [0] * 7  # no word at all: the start id alone, then padding
    assert ids[0][2] == ids[0][4] and ids[0][2] > 1  # "a great film great acting": "great" is known
    again = Vectorizer(vectorizer.vocabulary, 8)  # rebuilt from the saved vocabulary
    np.testing.assert_array_equal(again((np.array(texts),)), ids)


def _static_then_variable() -> dict:
    """On this process's Keras backend: train the static-batch LSTM a few steps on the embedded
    reviews, then predict the same texts with its variable-batch copy, in batches of 1, 7 and
    64; the largest difference from the static model's probabilities per batch size."""
    import keras
    import tensorflow as tf

    from pipeline.data import synthetic_reviews
    from pipeline.modeling.text import Vectorizer, lstm_classifier, predict_padded, serving_copy

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    ratings = np.where(rng.random(200) < 0.5, rng.integers(1, 5, 200), rng.integers(7, 11, 200))
    texts = [synthetic_reviews.review(int(r), rng) for r in ratings]
    labels = (ratings >= 7).astype("int64")
    vectorizer = Vectorizer.adapt(texts, vocabulary_size=500, sequence_length=LENGTH)
    tokens = vectorizer((np.array(texts),))
    model = lstm_classifier(vectorizer.vocabulary_size, LENGTH, 2, batch_size=STATIC_BATCH, units=16)
    assert model.inputs[0].shape[0] == STATIC_BATCH
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    data = tf.data.Dataset.from_tensor_slices((tokens, labels)).batch(STATIC_BATCH, drop_remainder=True)
    model.fit(data.repeat(), steps_per_epoch=10, epochs=1, verbose=0)
    serving = serving_copy(model)
    assert serving.inputs[0].shape[0] is None
    rows = tokens[:64]
    expected = predict_padded(model, rows)
    differences = {}
    for batch in (1, 7, 64):
        got = np.concatenate(
            [np.asarray(serving.predict(rows[i : i + batch], verbose=0)) for i in range(0, len(rows), batch)]
        )
        differences[batch] = float(np.abs(got - expected).max())
    return {"differences": differences, "spread": float(expected[:, 1].std())}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_static_batch_lstms_weights_predict_the_same_at_any_batch_size(backend):
    if backend == "tensorflow":  # this process's backend
        result = _static_then_variable()
    else:
        done = run_python(
            "import json; from tests.test_text import _static_then_variable; "
            "print(json.dumps(_static_then_variable()))",
            env={"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["spread"] > 0.01, result  # it trained: its predictions differ between reviews
    for batch, difference in result["differences"].items():
        assert difference < 1e-5, (batch, result)
