"""Text classifiers on token ids: an Embedding and a bidirectional LSTM, or a bag of n-grams.

Texts become token ids before tf.data (`Vectorizer`, adapted on the training texts), so the
model takes int ids on either backend: Keras on JAX cannot run string ops inside a compiled
model, nor this layer inside tf.data. A TPU wants one static batch size:
`lstm_classifier(..., batch_size=128)` fixes it in the input's shape for training; inference
builds the same layers with a free batch dimension (`batch_size=None`, as `networks.build` does
for evaluate and predict, or `serving_copy` from a trained model) and loads the trained weights,
to predict any number of texts on the CPU.

`ngram_classifier` is fastText's (Joulin et al., 2016; subwords: Bojanowski et al., 2017): the
vectors of a text's words, of its word bigrams and of its words' character n-grams, averaged,
then one linear layer. `SubwordVectorizer` writes the words' ids and their character n-grams'
ids (hashed) into one row; the model hashes the word n-grams from the word ids itself.

Their registry entries, by name (`bilstm`, `ngrams`), are in `text_networks`.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

START = 1  # every sequence opens with this id (the OOV id): no row is all padding
UNKNOWN = 1  # a word out of the vocabulary


def standardize(texts: tf.Tensor) -> tf.Tensor:
    """Lower case, IMDB's `<br />` tags and punctuation to spaces; letters of every script kept
    (`\\w` and the default lower case are ASCII-only: they dropped "café" to "caf")."""
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf.strings.regex_replace(texts, r"<br\s*/?>", " ")
    return tf.strings.regex_replace(texts, r"[^\p{L}\p{N}\s']", " ")


class Vectorizer:
    """Texts -> int32 ids of a fixed length: `START`, then the words (1 for unknown ones), then
    0 padding on the right. Right padding is what cuDNN's masked LSTM needs; the start id keeps
    a review with no known word from being all padding, which cuDNN refuses."""

    def __init__(self, vocabulary: Sequence[str], sequence_length: int):
        self.sequence_length = sequence_length
        self.layer = keras.layers.TextVectorization(
            standardize=standardize,
            vocabulary=list(vocabulary),
            output_sequence_length=sequence_length - 1,
        )

    @classmethod
    def adapt(cls, texts: Sequence[str], vocabulary_size: int, sequence_length: int) -> Vectorizer:
        """The `vocabulary_size` - 2 most frequent words of `texts` (0 and 1 are padding and OOV)."""
        layer = keras.layers.TextVectorization(max_tokens=vocabulary_size, standardize=standardize)
        layer.adapt(tf.constant(list(texts)))
        return cls(layer.get_vocabulary(include_special_tokens=False), sequence_length)

    @property
    def vocabulary(self) -> list[str]:
        return self.layer.get_vocabulary(include_special_tokens=False)

    @property
    def vocabulary_size(self) -> int:
        return self.layer.vocabulary_size()

    CHUNK = 4096  # texts per call

    def __call__(self, columns: tuple[np.ndarray, ...]) -> np.ndarray:
        """The first column's texts as int32 ids [n, sequence_length], eagerly. Keras on JAX
        cannot run this layer inside tf.data ("Cannot convert a symbolic tf.Tensor to a numpy
        array"), so texts are encoded once, up front, on every backend alike."""
        (texts,) = columns
        parts = [
            tf.cast(self.layer(tf.constant(texts[i : i + self.CHUNK])), tf.int32).numpy()
            for i in range(0, len(texts), self.CHUNK)
        ] or [np.zeros((0, self.sequence_length - 1), np.int32)]
        ids = np.concatenate(parts)
        return np.concatenate([np.full((len(ids), 1), START, np.int32), ids], axis=1)


def lstm_classifier(
    vocabulary_size: int,
    sequence_length: int,
    num_classes: int,
    batch_size: int | None = None,
    embedding_dim: int = 64,
    units: int = 64,
    dropout: float = 0.3,
) -> keras.Model:
    """Embedding (0 masked) -> bidirectional LSTM -> dropout -> logits (float32). `batch_size` fixes
    the batch dimension (a TPU's static shapes); None leaves it free."""
    tokens = keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name="tokens")
    x = layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name="embedding")(tokens)
    x = layers.Bidirectional(layers.LSTM(units), name="bilstm")(x)
    x = layers.Dropout(dropout, name="dropout")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="classes")(x)
    return keras.Model(tokens, logits, name="lstm")


# ---------------------------------------------------------------- a bag of n-grams (fastText)

CHAR_NGRAMS = (3, 5)  # fastText's subwords: the character 3- to 5-grams of "<word>"
SUBWORD_BUCKETS = 2**18  # character n-grams hash into this many embedding rows
WORD_SHARE = 4  # the words take at most 1/4 of a row, their character n-grams the rest
HASH_MULTIPLIER = 2039  # a prime; id x multiplier stays below 2**31 (int32 on both backends)


def subword_buckets(word: str, buckets: int = SUBWORD_BUCKETS) -> list[int]:
    """The distinct character n-grams of `<word>` (`CHAR_NGRAMS`), hashed into `buckets`, in order.
    CRC-32: the same buckets in every process and on every machine (Python's `hash` is salted)."""
    marked = f"<{word}>"
    low, high = CHAR_NGRAMS
    grams = (marked[i : i + n] for n in range(low, high + 1) for i in range(len(marked) - n + 1))
    return list(dict.fromkeys(zlib.crc32(gram.encode("utf-8")) % buckets for gram in grams))


class SubwordVectorizer:
    """Texts -> int32 ids of a fixed length, for the bag of n-grams: `START` and the words' ids
    (as `Vectorizer` numbers them; at most 1 / `WORD_SHARE` of the row), then the distinct
    character n-grams of those words, each `vocabulary_size + bucket`, then 0 padding. A word
    out of the vocabulary still brings its character n-grams ("unwatchably" shares "watch")."""

    def __init__(self, vocabulary: Sequence[str], sequence_length: int):
        self.sequence_length = sequence_length
        self._vocabulary = list(vocabulary)
        self._ids = {word: i + 2 for i, word in enumerate(self._vocabulary)}  # 0, 1: padding, unknown
        self._subwords: dict[str, list[int]] = {}  # word -> its character n-grams' ids, cached
        self.max_words = max(1, sequence_length // WORD_SHARE) - 1  # the start id takes one

    @property
    def vocabulary(self) -> list[str]:
        return list(self._vocabulary)

    @property
    def vocabulary_size(self) -> int:
        return len(self._vocabulary) + 2

    def _subword_ids(self, word: str) -> list[int]:
        ids = self._subwords.get(word)
        if ids is None:
            ids = self._subwords[word] = [self.vocabulary_size + b for b in subword_buckets(word)]
        return ids

    def _row(self, text: str) -> list[int]:
        words = text.split()[: self.max_words]  # `standardize` leaves ASCII whitespace only
        subwords = dict.fromkeys(itertools.chain.from_iterable(map(self._subword_ids, words)))
        row = [START, *(self._ids.get(word, UNKNOWN) for word in words), *subwords]
        return row[: self.sequence_length]

    def __call__(self, columns: tuple[np.ndarray, ...]) -> np.ndarray:
        """The first column's texts as int32 ids [n, sequence_length], eagerly."""
        (texts,) = columns
        ids = np.zeros((len(texts), self.sequence_length), np.int32)
        for start in range(0, len(texts), Vectorizer.CHUNK):
            cleaned = standardize(tf.constant(texts[start : start + Vectorizer.CHUNK])).numpy()
            for i, text in enumerate(cleaned, start):
                row = self._row(text.decode("utf-8"))
                ids[i, : len(row)] = row
        return ids


@keras.saving.register_keras_serializable(package="petals")
class NgramIds(layers.Layer):
    """Token ids [batch, length] -> the ids of every feature the bag averages: the tokens as they
    are (words, subwords, 0 padding), then for n = 2..order each run of n consecutive word ids
    (id 1, the start and unknown words, included: "opens with") hashed into `ngram_buckets` rows
    after the vocabulary's and the subwords'. An n-gram that reaches past the words is 0
    (padding). Integer ops only, the same ids on both backends."""

    def __init__(self, vocabulary_size: int, subword_buckets: int, ngram_buckets: int, order: int, **kwargs):
        super().__init__(**kwargs)
        if max(vocabulary_size, ngram_buckets) * HASH_MULTIPLIER + vocabulary_size >= 2**31:
            raise ValueError(
                f"vocabulary_size={vocabulary_size}, ngram_buckets={ngram_buckets}: too many to hash in int32"
            )
        self.vocabulary_size = vocabulary_size
        self.subword_buckets = subword_buckets
        self.ngram_buckets = ngram_buckets
        self.order = order

    @property
    def rows(self) -> int:
        """Embedding rows the ids index: padding, vocabulary, subword buckets, n-gram buckets."""
        return self.vocabulary_size + self.subword_buckets + self.ngram_buckets

    def call(self, tokens):
        tokens = ops.cast(tokens, "int32")
        is_word = ops.logical_and(tokens > 0, tokens < self.vocabulary_size)
        offset = self.vocabulary_size + self.subword_buckets
        ids, hashed, whole = [tokens], tokens, is_word
        for n in range(2, self.order + 1):
            last = tokens[:, n - 1 :]
            hashed = ops.mod(hashed[:, :-1] * HASH_MULTIPLIER + last, self.ngram_buckets)
            whole = ops.logical_and(whole[:, :-1], is_word[:, n - 1 :])
            ids.append(ops.where(whole, hashed + offset, 0))
        return ops.concatenate(ids, axis=1)

    def compute_output_shape(self, input_shape):
        batch, length = input_shape
        return (batch, sum(length - n + 1 for n in range(1, self.order + 1)))

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "subword_buckets": self.subword_buckets,
            "ngram_buckets": self.ngram_buckets,
            "order": self.order,
        }


@keras.saving.register_keras_serializable(package="petals")
class BagMean(layers.Layer):
    """Feature vectors [batch, features, dim] -> the mean of the word and word n-gram vectors plus
    the mean of the character n-gram vectors [batch, dim]; padding (id 0) counts in neither. Two
    means, so a text's few words are not outweighed by their many character n-grams (on the real
    reviews' validation split: ROC AUC +0.005 over one mean of all)."""

    def __init__(self, vocabulary_size: int, subword_buckets: int, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.subword_buckets = subword_buckets

    def call(self, vectors, ids):
        subword = ops.logical_and(
            ids >= self.vocabulary_size, ids < self.vocabulary_size + self.subword_buckets
        )
        word = ops.logical_and(ids > 0, ops.logical_not(subword))
        return _mean(vectors, word) + _mean(vectors, subword)

    def compute_output_shape(self, vectors_shape, ids_shape):
        return (vectors_shape[0], vectors_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "subword_buckets": self.subword_buckets,
        }


def _mean(vectors, keep):
    weights = ops.expand_dims(ops.cast(keep, vectors.dtype), -1)
    return ops.sum(vectors * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)


def ngram_classifier(
    vocabulary_size: int,
    sequence_length: int,
    num_classes: int,
    batch_size: int | None = None,
    dropout: float = 0.5,
    embedding_dim: int = 16,
    order: int = 2,
    ngram_buckets: int = 2**18,
    subword_buckets: int = SUBWORD_BUCKETS,
) -> keras.Model:
    """fastText: `SubwordVectorizer`'s ids -> word n-gram ids (`NgramIds`) -> one Embedding for
    words, subwords and n-grams -> their means (`BagMean`) -> dropout -> logits. About 10 s an
    epoch for 7,600 sentences on 2 CPU cores. The defaults are the ones chosen on real reviews
    (competition/imdb/recipes/cpu.toml). `batch_size` fixes the batch dimension (a TPU's static
    shapes); None leaves it free."""
    tokens = keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name="tokens")
    to_ids = NgramIds(vocabulary_size, subword_buckets, ngram_buckets, order, name="ngram_ids")
    ids = to_ids(tokens)
    vectors = layers.Embedding(to_ids.rows, embedding_dim, name="embedding")(ids)
    x = BagMean(vocabulary_size, subword_buckets, name="bag_mean")(vectors, ids)
    x = layers.Dropout(dropout, name="dropout")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="classes")(x)
    return keras.Model(tokens, logits, name="ngrams")


# ---------------------------------------------------------------- a run's vocabulary, and serving


def read_vocabulary(path) -> list[str]:
    """A vocabulary written by `write_vocabulary`: one word a line, the most frequent first."""
    return path.read_text(encoding="utf-8").split("\n")


def write_vocabulary(path, vocabulary: Sequence[str]) -> None:
    from pipeline.core.files import write_atomically

    write_atomically(path, lambda tmp: tmp.write_text("\n".join(vocabulary), encoding="utf-8"))


def serving_copy(model: keras.Model) -> keras.Model:
    """The same classifier (a word model of `text_networks`) with a free batch dimension and
    `model`'s weights."""
    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] == "InputLayer":
            layer["config"]["batch_shape"] = [None, *layer["config"]["batch_shape"][1:]]
    copy = keras.Model.from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def predict_padded(model: keras.Model, tokens: np.ndarray) -> np.ndarray:
    """A static-batch model's probabilities for any number of rows: the last batch is padded
    with copies of the first row, and their predictions dropped."""
    batch = model.inputs[0].shape[0]
    padding = (-len(tokens)) % batch
    padded = np.concatenate([tokens, np.repeat(tokens[:1], padding, axis=0)])
    return np.asarray(model.predict(padded, batch_size=batch, verbose=0))[: len(tokens)]
