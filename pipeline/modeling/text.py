"""Text classifiers: a review as token ids, an Embedding and a bidirectional LSTM.

Texts become token ids before tf.data (`Vectorizer`, adapted on the training texts), so the
model takes int ids on either backend: Keras on JAX cannot run string ops inside a compiled
model, nor this layer inside tf.data. A TPU wants one static batch size:
`lstm_classifier(..., batch_size=128)` fixes it in the input's shape for training; inference
builds the same layers with a free batch dimension (`batch_size=None`, as `networks.build` does
for evaluate and predict, or `serving_copy` from a trained model) and loads the trained weights,
to predict any number of texts on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from keras import layers

START = 1  # every sequence opens with this id (the OOV id): no row is all padding


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
    """Embedding (0 masked) -> bidirectional LSTM -> dropout -> softmax. `batch_size` fixes the
    batch dimension (a TPU's static shapes); None leaves it free."""
    tokens = keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name="tokens")
    x = layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name="embedding")(tokens)
    x = layers.Bidirectional(layers.LSTM(units), name="bilstm")(x)
    x = layers.Dropout(dropout, name="dropout")(x)
    probabilities = layers.Dense(num_classes, activation="softmax", dtype="float32", name="classes")(x)
    return keras.Model(tokens, probabilities, name="lstm")


# Text networks by name (`model.backbone` for a table competition): (vocabulary_size,
# sequence_length, num_classes, batch_size, dropout) -> a model from token ids to probabilities.
NETWORKS = {"bilstm": lstm_classifier}


def read_vocabulary(path) -> list[str]:
    """A vocabulary written by `write_vocabulary`: one word a line, the most frequent first."""
    return path.read_text(encoding="utf-8").split("\n")


def write_vocabulary(path, vocabulary: Sequence[str]) -> None:
    from pipeline.core.files import write_atomically

    write_atomically(path, lambda tmp: tmp.write_text("\n".join(vocabulary), encoding="utf-8"))


def serving_copy(model: keras.Model) -> keras.Model:
    """The same classifier with a free batch dimension and `model`'s weights."""
    tokens = model.inputs[0]
    embedding, lstm = model.get_layer("embedding"), model.get_layer("bilstm")
    copy = lstm_classifier(
        vocabulary_size=embedding.input_dim,
        sequence_length=tokens.shape[1],
        num_classes=model.outputs[0].shape[-1],
        embedding_dim=embedding.output_dim,
        units=lstm.forward_layer.units,
        dropout=model.get_layer("dropout").rate,
    )
    copy.set_weights(model.get_weights())
    return copy


def predict_padded(model: keras.Model, tokens: np.ndarray) -> np.ndarray:
    """A static-batch model's probabilities for any number of rows: the last batch is padded
    with copies of the first row, and their predictions dropped."""
    batch = model.inputs[0].shape[0]
    padding = (-len(tokens)) % batch
    padded = np.concatenate([tokens, np.repeat(tokens[:1], padding, axis=0)])
    return np.asarray(model.predict(padded, batch_size=batch, verbose=0))[: len(tokens)]
