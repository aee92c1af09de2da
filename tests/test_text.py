"""Text models: reviews vectorised before tf.data, an LSTM and a bag of n-grams trained at a
static batch size (a TPU's shapes) and served at any batch size on the CPU with the same weights,
on both backends."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_python

STATIC_BATCH = 16
LENGTH = 40


def test_words_of_every_script_survive_standardizing():
    import tensorflow as tf

    from pipeline.networks.text import standardize

    texts = ["Café naïve!", "Привет, мир", "你好 world", "It's <br />GREAT"]
    cleaned = [t.decode() for t in standardize(tf.constant(texts)).numpy()]
    assert [c.split() for c in cleaned] == [
        ["café", "naïve"],
        ["привет", "мир"],
        ["你好", "world"],
        ["it's", "great"],
    ]


def test_texts_become_fixed_length_ids_that_open_with_the_start_id():

    from pipeline.networks.text import START, Vectorizer

    texts = ["A great film.<br /><br />Great acting!", "an awful film", "??? !!!"]
    vectorizer = Vectorizer.adapt(texts, vocabulary_size=20, sequence_length=8)
    assert "br" not in vectorizer.vocabulary and "great" in vectorizer.vocabulary
    ids = vectorizer((np.array(texts),))
    assert ids.shape == (3, 8) and ids.dtype == np.int32 and (ids[:, 0] == START).all()
    assert ids[2].tolist() == [START] + [0] * 7  # no word at all: the start id alone, then padding
    assert ids[0][2] == ids[0][4] and ids[0][2] > 1  # "a great film great acting": "great" is known
    again = Vectorizer(vectorizer.vocabulary, 8)  # rebuilt from the saved vocabulary
    np.testing.assert_array_equal(again((np.array(texts),)), ids)


def test_a_words_character_ngrams_are_hashed_alike_everywhere_and_reach_unknown_words():
    import zlib

    from pipeline.networks.text import START, SUBWORD_BUCKETS, SubwordVectorizer, Vectorizer, subword_buckets

    grams = ["<fi", "fil", "ilm", "lm>", "<fil", "film", "ilm>", "<film", "film>"]  # 3- to 5-grams of <film>
    assert subword_buckets("film") == [zlib.crc32(g.encode()) % SUBWORD_BUCKETS for g in grams]
    texts = ["A great film.", "an awful film", "Unwatchably dull!"]
    vectorizer = SubwordVectorizer(
        Vectorizer.adapt(texts[:2], vocabulary_size=20, sequence_length=8).vocabulary, 48
    )
    words = vectorizer.vocabulary_size  # ids below it are words; from it on, character n-grams
    ids = vectorizer((np.array(texts),))
    assert ids.shape == (3, 48) and ids.dtype == np.int32 and (ids[:, 0] == START).all()
    assert (ids[0, 1:4] > 1).all() and (ids[0, 1:4] < words).all() and ids[0, 4] >= words
    assert ids[0, 3] == ids[1, 3]  # "film"
    assert ids[2, 1:3].tolist() == [1, 1]  # unknown words, whose character n-grams still count:
    assert {words + b for b in subword_buckets("unwatchably")} <= set(ids[2].tolist())
    assert len(set(ids[0][ids[0] >= words].tolist())) == (ids[0] >= words).sum()  # each n-gram once
    again = SubwordVectorizer(vectorizer.vocabulary, 48)  # rebuilt from the saved vocabulary
    np.testing.assert_array_equal(again((np.array(texts),)), ids)


WORDS, SUBWORDS, BUCKETS = 10, 100, 1000  # NgramIds on hand-made ids: a tiny vocabulary and tables
HAND_MADE = [[1, 5, 7, WORDS + 3, WORDS + 9, 0], [1, 1, 2, 0, 0, 0]]


def _bigram(a: int, b: int) -> int:
    """The documented hash of two consecutive word ids, offset past the words and subwords."""
    from pipeline.networks.text import HASH_MULTIPLIER

    return WORDS + SUBWORDS + (a * HASH_MULTIPLIER + b) % BUCKETS


def _ngram_ids() -> list:
    import keras

    from pipeline.networks.text import NgramIds

    ids = NgramIds(WORDS, SUBWORDS, BUCKETS, order=2)(np.array(HAND_MADE, np.int32))
    return keras.ops.convert_to_numpy(ids).tolist()


def test_word_bigrams_are_hashed_from_consecutive_word_ids_only():
    bigrams = [
        [_bigram(1, 5), _bigram(5, 7), 0, 0, 0],  # a word then a subword, subwords, padding: none
        [_bigram(1, 1), _bigram(1, 2), 0, 0, 0],
    ]
    assert _ngram_ids() == [row + pairs for row, pairs in zip(HAND_MADE, bigrams, strict=True)]


# each network at a tiny size
SMALL = {
    "bilstm": {"units": 16},
    **{name: {"ngram_buckets": 4096} for name in ("ngrams", "tfidf", "tfidf-chars")},
}


def _static_then_variable(network: str = "bilstm") -> dict:
    """On this process's Keras backend: train the static-batch network a few steps on the embedded
    reviews, then predict the same texts with its variable-batch copy, in batches of 1, 7 and
    64; the largest difference from the static model's probabilities per batch size."""
    import keras
    import tensorflow as tf

    from pipeline.data import synthetic_reviews
    from pipeline.networks.text import Vectorizer, predict_padded, serving_copy
    from pipeline.networks.text_networks import NETWORKS

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    ratings = np.where(rng.random(200) < 0.5, rng.integers(1, 5, 200), rng.integers(7, 11, 200))
    texts = [synthetic_reviews.review(int(r), rng) for r in ratings]
    labels = (ratings >= 7).astype("int64")
    vocabulary = Vectorizer.adapt(texts, vocabulary_size=500, sequence_length=LENGTH).vocabulary
    tokens = NETWORKS[network].vectorizer(vocabulary, LENGTH)((np.array(texts),))
    model = NETWORKS[network].classifier(
        len(vocabulary) + 2, LENGTH, 2, batch_size=STATIC_BATCH, **SMALL[network]
    )
    assert model.inputs[0].shape[0] == STATIC_BATCH
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # headless: logits
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
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
    result = {"differences": differences, "spread": float(expected[:, 1].std())}
    return {**result, "ngram_ids": _ngram_ids()} if network == "ngrams" else result


def _on_backend(backend: str, helper: str, *args) -> dict:
    """One of this module's helpers on `backend`: in this process, or in a fresh one."""
    if backend == "tensorflow":  # this process's backend
        return globals()[helper](*args)
    done = run_python(
        f"import json; from tests import test_text; print(json.dumps(test_text.{helper}(*{args!r})))",
        env={"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("network", "backend"),
    [
        ("ngrams", "tensorflow"),
        pytest.param("ngrams", "jax", marks=pytest.mark.heavy),  # a JAX process: the heavy tier
        # The second network: the thorough tier (the n-grams' case above proves the property).
        pytest.param("tfidf", "tensorflow", marks=pytest.mark.thorough),
        pytest.param("tfidf", "jax", marks=pytest.mark.heavy),
        # Its character n-grams' block and the sort that counts its ids, on JAX (TensorFlow: test_text_probe).
        pytest.param("tfidf-chars", "jax", marks=pytest.mark.heavy),
        # The BiLSTM is no competition's recipe any more (imdb's is the bag of n-grams): the heavy tier.
        pytest.param("bilstm", "tensorflow", marks=[pytest.mark.slow, pytest.mark.heavy]),
        # JAX compiles the LSTM's scan at about a quarter of TensorFlow's speed here: the heavy tier.
        pytest.param("bilstm", "jax", marks=[pytest.mark.slow, pytest.mark.heavy]),
    ],
)
@pytest.mark.slow  # trains, in a process per backend
def test_a_static_batch_networks_weights_predict_the_same_at_any_batch_size(network, backend):
    result = _on_backend(backend, "_static_then_variable", network)
    assert result["spread"] > 0.01, result  # it trained: its predictions differ between reviews
    for batch, difference in result["differences"].items():
        assert difference < 1e-5, (batch, result)
    if network == "ngrams":  # the same n-gram ids on either backend
        assert result["ngram_ids"] == _ngram_ids(), result


@pytest.mark.slow  # it trains
def test_the_bag_of_ngrams_learns_what_only_word_order_tells():
    """Two marker words in either order among random fillers: the words and their character
    n-grams are the same for both classes, so only the word bigrams beat chance (rows long
    enough to keep every n-gram: a cut row would leak the order)."""
    import keras
    from sklearn.metrics import roc_auc_score

    from pipeline.networks.text import SubwordVectorizer, Vectorizer, ngram_classifier

    rng = np.random.default_rng(0)
    fillers = ["red", "green", "blue", "cold", "warm", "slow", "fast", "tall", "short", "round"]

    def text(label: int) -> str:
        words = list(rng.choice(fillers, 6))
        at = int(rng.integers(0, 7))
        return " ".join(words[:at] + (["alpha", "beta"] if label else ["beta", "alpha"]) + words[at:])

    length = 128
    labels = rng.integers(0, 2, 480)
    texts = np.array([text(int(label)) for label in labels])
    vocabulary = Vectorizer.adapt(texts, vocabulary_size=50, sequence_length=length).vocabulary
    tokens = SubwordVectorizer(vocabulary, length)((texts,))
    assert (tokens[:, -1] == 0).all()  # nothing cut
    scores = {}
    for order in (1, 2):  # words and subwords alone, then with word bigrams
        keras.utils.set_random_seed(0)
        model = ngram_classifier(
            len(vocabulary) + 2, length, 2, batch_size=STATIC_BATCH, order=order, ngram_buckets=4096
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),  # headless: logits
        )
        model.fit(tokens[:320], labels[:320], batch_size=STATIC_BATCH, epochs=5, verbose=0)
        logits = model.predict(tokens[320:], batch_size=STATIC_BATCH, verbose=0)
        held_out = logits[:, 1] - logits[:, 0]  # ranks as P(positive) does
        scores[order] = roc_auc_score(labels[320:], held_out)
    assert scores[1] < 0.65 and scores[2] > 0.9, scores
