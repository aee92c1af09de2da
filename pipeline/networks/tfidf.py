"""TF-IDF + logistic regression as a Keras network (`tfidf`, `tfidf-chars`): what a linear model on
sparse features scores, in the form every run saves, evaluates, predicts and ships in a kernel.

Words and hashed word bigrams (`NgramIds` on `Vectorizer`'s ids, as `ngrams` hashes them; the
start id dropped), each
id's count c in the text made sublinear (1 + ln c) and scaled by the id's IDF, the vector scaled to
unit length, then one linear map to the classes: scikit-learn's
`TfidfVectorizer(sublinear_tf=True)` and a `LogisticRegression` on its output, computed on ids.
A linear map of a sparse vector is a sum over the text's ids of a per-id row of class scores, so
the map is an Embedding of width num_classes (`BagLogits`, the layer `logits`) weighted per
position by the TF-IDF value (`TfidfWeights`): an id at c positions gets (1 + ln c) / c at each,
which sums to the sublinear count. Its weights are set by `train.head_solver = "logistic"`
(pipeline/modeling/text_probe.py), the IDF a fixed table it writes (1 everywhere until then: SGD
trains a sublinear bag of words). Integer ops and sums only: TensorFlow and JAX alike.

`tfidf-chars` reads `SubwordVectorizer`'s ids, which add each word's character 3- to 5-grams
(hashed, each once a text): two blocks, words and bigrams, character n-grams, each of unit length
on its own, as scikit-learn's `make_union` of a word and a character `TfidfVectorizer` makes them.
As small data's CV candidate on real texts it scored +0.075 test macro-F1 over TF-IDF + LR on words
on 1,010 fortunes (5 splits), +0.004 on 900 man-page passages, and was not chosen on amazon's
review sentences (docs/BENCHMARKS.md, "texts: character n-grams").
"""

from __future__ import annotations

import keras
from keras import layers, ops

from pipeline.networks.text import SUBWORD_BUCKETS, NgramIds

NGRAM_BUCKETS = 2**18  # word bigrams hash into this many rows, as `ngrams`' do
ORDER = 2  # words and word bigrams: what the baseline TF-IDF + LR scored on real texts


@keras.saving.register_keras_serializable(package="petals")
class WithoutStart(layers.Layer):
    """Token ids [batch, length] -> the same with the start id (every text's first) as padding: in
    every text, it is no word; as a feature its unit-length share told a text's length, and
    dropping it was worth 0.007 and 0.017 test macro-F1 on two real sets at C=32
    (benchmarks/bench_tfidf_tokens.py at e181a79 and 858884d)."""

    def call(self, tokens):
        tokens = ops.cast(tokens, "int32")
        return ops.concatenate([ops.zeros_like(tokens[:, :1]), tokens[:, 1:]], axis=1)


def counts_in_text(ids):
    """Feature ids [batch, n] -> each position's count of its id in its row [batch, n]: the row
    sorted, each run of one id numbered, the runs' first positions sorted to the front, a run's
    length the next run's first position less its own; put back in place. Sorts only: O(n log n)
    a text and jit-compiled on JAX (a compare of every pair of positions held batch x n x n
    floats, 4 GB for 256 texts of 4,095 ids; JAX's `bincount` cannot be compiled)."""
    length = ids.shape[1]
    order = ops.argsort(ids, axis=-1)
    ordered = ops.take_along_axis(ids, order, axis=-1)
    changed = ops.not_equal(ordered[:, 1:], ordered[:, :-1])
    first = ops.concatenate([ops.ones_like(changed[:, :1]), changed], axis=1)
    run = ops.cumsum(ops.cast(first, "int32"), axis=1) - 1  # each position's run, 0 .. runs - 1
    starts = ops.sort(ops.where(first, ops.arange(length, dtype="int32")[None, :], length), axis=-1)
    starts = ops.concatenate([starts, ops.full_like(starts[:, :1], length)], axis=1)
    lengths = ops.take_along_axis(starts, run + 1, axis=-1) - ops.take_along_axis(starts, run, axis=-1)
    return ops.take_along_axis(lengths, ops.argsort(order, axis=-1), axis=-1)


@keras.saving.register_keras_serializable(package="petals")
class TfidfWeights(layers.Layer):
    """Feature ids [batch, n] (0: padding) -> each position's share of the text's unit TF-IDF
    vector [batch, n]: (1 + ln c) / c x idf / norm, c the id's count in the text, so the positions
    of one id add up to its TF-IDF value. The IDF is a fixed weight (`idf`), 0 for an id the
    training texts never held: it counts in neither the score nor the norm, as a word out of a
    fitted vectorizer's vocabulary counts in neither. With `block` = (low, high), the ids in
    [low, high) and the rest are two vectors, each scaled to unit length on its own."""

    def __init__(self, rows: int, block: tuple[int, int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.rows = rows
        self.block = None if block is None else tuple(int(b) for b in block)
        self.idf = self.add_weight(shape=(rows,), initializer="ones", trainable=False, name="idf")

    def call(self, ids):
        ids = ops.cast(ids, "int32")  # NgramIds' output is typed float32 in the graph, ids in value
        present = ops.cast(ids > 0, "float32")
        counts = ops.cast(ops.maximum(counts_in_text(ids), 1), "float32")
        share = present * (1.0 + ops.log(counts)) / counts * ops.take(self.idf, ids)
        squares = share * share * counts
        if self.block is None:
            return share / _norm(squares)
        low, high = self.block
        inside = ops.cast(ops.logical_and(ids >= low, ids < high), "float32")
        return share * (inside / _norm(squares * inside) + (1.0 - inside) / _norm(squares * (1.0 - inside)))

    def get_config(self):
        return {**super().get_config(), "rows": self.rows, "block": self.block}


def _norm(squares):
    return ops.maximum(ops.sqrt(ops.sum(squares, axis=1, keepdims=True)), 1e-12)


@keras.saving.register_keras_serializable(package="petals")
class BagLogits(layers.Layer):
    """(feature ids [batch, n], their weights [batch, n]) -> logits [batch, classes]: the weighted
    sum of each id's row of class scores (`table`), plus `bias`. With `vector_width`, a dense
    vector [batch, vector_width] beside them (a sentence encoder's), mapped by `dense`: one linear
    map of the sparse and the dense features together (pipeline/networks/joined.py)."""

    def __init__(self, rows: int, num_classes: int, vector_width: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.rows, self.num_classes, self.vector_width = rows, num_classes, vector_width
        self.table = self.add_weight(shape=(rows, num_classes), initializer="zeros", name="table")
        self.bias = self.add_weight(shape=(num_classes,), initializer="zeros", name="bias")
        if vector_width:  # after the bias: a saved `tfidf` run's two weights load as they were
            self.dense = self.add_weight(shape=(vector_width, num_classes), initializer="zeros", name="dense")

    def call(self, ids, weights, vector=None):
        ids = ops.cast(ids, "int32")
        scores = ops.take(self.table, ids, axis=0)  # [batch, n, classes]
        logits = ops.sum(scores * ops.expand_dims(weights, -1), axis=1) + self.bias
        if self.vector_width:
            logits = logits + ops.matmul(ops.cast(vector, "float32"), self.dense)
        return logits

    def compute_output_shape(self, ids_shape, weights_shape, vector_shape=None):
        return (ids_shape[0], self.num_classes)

    def get_config(self):
        config = {**super().get_config(), "rows": self.rows, "num_classes": self.num_classes}
        return {**config, "vector_width": self.vector_width} if self.vector_width else config


def weighted_ids(tokens, vocabulary_size: int, subword_buckets: int = 0, ngram_buckets: int = NGRAM_BUCKETS):
    """`Vectorizer`'s (or `SubwordVectorizer`'s) ids -> (the feature rows, the feature ids, their
    TF-IDF weights): the words (`words`: the start id dropped), words and hashed word bigrams
    (`ngram_ids`; with `subword_buckets` the character n-grams too, a block of their own) and their
    unit-length TF-IDF shares (`tfidf`)."""
    to_ids = NgramIds(vocabulary_size, subword_buckets, ngram_buckets, ORDER, name="ngram_ids")
    ids = to_ids(WithoutStart(name="words")(tokens))
    block = (vocabulary_size, vocabulary_size + subword_buckets) if subword_buckets else None
    return to_ids.rows, ids, TfidfWeights(to_ids.rows, block, dtype="float32", name="tfidf")(ids)


def tfidf_classifier(
    vocabulary_size: int,
    sequence_length: int,
    num_classes: int,
    batch_size: int | None = None,
    dropout: float = 0.0,
    ngram_buckets: int = NGRAM_BUCKETS,
    subword_buckets: int = 0,
) -> keras.Model:
    """`Vectorizer`'s ids -> its words (`words`: the start id dropped) -> words and hashed word
    bigrams (`ngram_ids`) -> TF-IDF weights (`tfidf`) -> class scores (`logits`). With
    `subword_buckets`, `SubwordVectorizer`'s ids: its character n-grams pass through `ngram_ids`
    and are a block of their own. No dropout: its weights are fitted, not trained (`dropout` is
    taken and unused, as every word network's builder takes it)."""
    tokens = keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name="tokens")
    rows, ids, weights = weighted_ids(tokens, vocabulary_size, subword_buckets, ngram_buckets)
    logits = BagLogits(rows, num_classes, dtype="float32", name="logits")(ids, weights)
    return keras.Model(tokens, logits, name="tfidf")


def chars_classifier(*args, **kwargs) -> keras.Model:
    """`tfidf-chars`: `tfidf_classifier` on words, their bigrams and their character n-grams."""
    return tfidf_classifier(*args, subword_buckets=SUBWORD_BUCKETS, **kwargs)
