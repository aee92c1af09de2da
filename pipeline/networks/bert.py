"""BERT classifiers for texts and sentence pairs, from keras-hub.

Two ways in: `bert` loads a keras-hub preset directory named by `model.weights` (on Kaggle, an
attached model such as BERT multilingual; in the tests, a tiny random one they write), its
tokenizer included; `bert-tiny` and `bert-small` start from random weights with a vocabulary of
the training texts' words. Either way the classifier is the backbone's pooled [CLS] output,
dropout and a dense layer's logits over the classes, the backbone one layer named `backbone` (a
frozen warm-up freezes it, as for images).

Texts are tokenized here, up front and eagerly, by keras-hub's own BERT preprocessor (the
tokenizer the preset was trained with, [CLS] a [SEP] b [SEP], segment ids, padding): keras-hub
tokenizes inside tf.data only with tensorflow-text, which would bring a second, full TensorFlow.
A run keeps its tokenizer in `tokenizer/` of its run dir, so it predicts with the ids it
trained on.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
from keras import layers

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_json

PRESET = "bert"  # model.backbone for a keras-hub preset directory in model.weights
SIZES = {  # from random weights: (layers, heads, hidden, intermediate), BERT-Tiny and -Small's shapes
    "bert-tiny": {"num_layers": 2, "num_heads": 2, "hidden_dim": 128, "intermediate_dim": 512},
    "bert-small": {"num_layers": 4, "num_heads": 4, "hidden_dim": 256, "intermediate_dim": 1024},
}
NAMES = (PRESET, *SIZES)
# keras-hub without its pins (kagglesdk==0.1.28 against the kaggle client; tensorflow-text, a whole
# TensorFlow): the Makefile's NO_DEPS, and how a kernel installs it where the image lacks it.
PIP_INSTALL = ("--no-deps", "keras-hub==0.32.0")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCTUATION = list(".,;:!?'\"()-")
INPUTS = ("token_ids", "segment_ids", "padding_mask")
ENCODE_BATCH = 1024  # texts tokenized per call


def check(config) -> None:
    """`bert` needs a preset directory in model.weights; the others train from scratch."""
    name, weights = config.model.backbone, config.model.weights
    if name == PRESET:
        if not (Path(weights) / "config.json").is_file():
            raise PetalsError(
                f"model.weights={weights!r}: model.backbone=bert loads a keras-hub preset directory "
                "(config.json, model.weights.h5, tokenizer.json, assets/); on Kaggle attach the model and "
                "pass its folder under /kaggle/input"
            )
    elif weights != "none":
        raise PetalsError(
            f"model.weights={weights!r}: {name} starts from random weights (model.weights=none); "
            "for pretrained weights use model.backbone=bert with a preset directory"
        )


def _keras_hub():
    try:
        import keras_hub
    except ImportError:
        raise PetalsError("keras-hub is not installed: `make install` installs it (BERT needs it)") from None
    return keras_hub


# ----------------------------------------------------------------------------- the tokenizer


def new_tokenizer(config, columns):
    """The preset's tokenizer, or one over the training texts' `data.vocabulary_size` words."""
    keras_hub = _keras_hub()
    if config.model.backbone == PRESET:
        return keras_hub.models.BertTokenizer.from_preset(config.model.weights)
    from pipeline.networks import text

    words = text.Vectorizer.adapt(
        np.concatenate(columns), config.data.vocabulary_size, config.data.sequence_length
    ).vocabulary
    words = [w for w in words if w not in SPECIAL_TOKENS and w not in PUNCTUATION]
    return keras_hub.models.BertTokenizer(vocabulary=[*SPECIAL_TOKENS, *PUNCTUATION, *words], lowercase=True)


def save_tokenizer(tokenizer, folder: Path) -> None:
    """The tokenizer as a keras-hub preset folder (tokenizer.json, its vocabulary), atomically."""
    import shutil

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tokenizer.save_to_preset(str(partial))
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def load_tokenizer(folder: Path):
    """A tokenizer `save_tokenizer` wrote: its config, then its vocabulary (keras-hub's own way of
    loading a preset's tokenizer; `from_preset` wants a whole model's preset)."""

    if not (folder / "tokenizer.json").is_file():
        raise PetalsError(f"{folder}: missing; a BERT run keeps its tokenizer there, train it again")
    _keras_hub()  # registers keras-hub's classes for deserialization
    kept = load_json(folder, "tokenizer.json", "run file")  # a run may come from a kernel's output
    tokenizer = keras.saving.deserialize_keras_object(kept)
    tokenizer.load_assets(str(folder / "assets" / "tokenizer"))
    return tokenizer


# Texts already tokenized in this process, per tokenizer: with a preset's tokenizer (its fixed
# vocabulary), the K folds of a CV group (one process trains them all) tokenize each text once,
# not K times. The key is everything the ids depend on (the tokenizer's config and vocabulary, the
# length), so a fold whose vocabulary was fitted on its own training texts (`bert-tiny`,
# `bert-small`) never meets another fold's ids: such folds share nothing, by design.
_ENCODED: dict[str, dict[tuple[str, ...], tuple[np.ndarray, ...]]] = {}
MEMO_BYTES = 2 << 30  # what remembered ids may hold (6 KB a text at 512 tokens); past it, forget


def _tokenizer_key(tokenizer, sequence_length: int) -> str:
    import hashlib
    import json

    # Not its layer name: Keras numbers each new instance (bert_tokenizer_1), and each fold builds one.
    config = {k: v for k, v in tokenizer.get_config().items() if k != "name"}
    described = json.dumps([config, tokenizer.get_vocabulary(), sequence_length], default=str)
    return f"{hashlib.sha256(described.encode()).hexdigest()}:{sequence_length}"


def _row_bytes(row: tuple[str, ...], sequence_length: int) -> int:
    """What one remembered text costs: its ids and the text kept as the key (and Python's overheads)."""
    return len(INPUTS) * (4 * sequence_length + 112) + sum(len(text) + 50 for text in row)


def _held_bytes() -> int:
    return sum(_row_bytes(row, int(key.rsplit(":", 1)[1])) for key, memo in _ENCODED.items() for row in memo)


class Encoder:
    """Texts or pairs -> BERT's inputs (int32 [n, sequence_length] each), eagerly, in numpy; or another
    keras-hub family's (`family`'s TextClassifierPreprocessor, its `inputs`)."""

    def __init__(
        self, tokenizer, sequence_length: int, family: str = "Bert", inputs: tuple[str, ...] = INPUTS
    ):
        keras_hub = _keras_hub()
        self.tokenizer = tokenizer
        # The family's own keras-hub preprocessor: its special tokens and how a pair is joined.
        preprocessor = getattr(keras_hub.models, f"{family}TextClassifierPreprocessor")
        self.preprocessor = preprocessor(tokenizer, sequence_length)
        self.inputs = inputs
        self.key = f"{family}/{_tokenizer_key(tokenizer, sequence_length)}"  # ids differ per family
        self.sequence_length = sequence_length
        self.tokenized = 0  # texts this encoder sent through the tokenizer (the rest came from memory)

    def __call__(self, columns: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        rows = [tuple(str(c[i]) for c in columns) for i in range(len(columns[0]))]
        if _held_bytes() + sum(_row_bytes(row, self.sequence_length) for row in rows) > MEMO_BYTES:
            _ENCODED.clear()
        memo = _ENCODED.setdefault(self.key, {})
        todo = list(dict.fromkeys(row for row in rows if row not in memo))
        for start in range(0, len(todo), ENCODE_BATCH):
            chunk = todo[start : start + ENCODE_BATCH]
            # Lists of str: keras-hub's Python tokenizers (byte-pair's above all) refuse numpy's strings.
            batch = tuple([row[k] for row in chunk] for k in range(len(columns)))
            encoded = self.preprocessor(x=batch if len(batch) > 1 else batch[0])
            arrays = [keras.ops.convert_to_numpy(encoded[name]).astype(np.int32) for name in self.inputs]
            memo.update((row, tuple(a[i] for a in arrays)) for i, row in enumerate(chunk))
        self.tokenized += len(todo)
        if not rows:
            return {name: np.zeros((0, self.sequence_length), np.int32) for name in self.inputs}
        return {name: np.stack([memo[row][k] for row in rows]) for k, name in enumerate(self.inputs)}


# ----------------------------------------------------------------------------- the network


def new_backbone(config, vocabulary_size: int):
    """The preset's backbone with its weights, or a random one of the named size."""
    keras_hub = _keras_hub()
    if config.model.backbone == PRESET:
        return keras_hub.models.BertBackbone.from_preset(config.model.weights)
    return keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        max_sequence_length=config.data.sequence_length,
        dropout=0.1,
        **SIZES[config.model.backbone],
    )


def save_backbone_config(backbone, path: Path) -> None:
    """The backbone's architecture as JSON: inference rebuilds it from the run alone, without the
    preset (or its pretrained weights, which the run's own weights replace anyway)."""
    import json

    from pipeline.core.files import write_atomically

    config = keras.saving.serialize_keras_object(backbone)
    write_atomically(path, lambda tmp: tmp.write_text(json.dumps(config, indent=1)))


def backbone_from_config(path: Path):
    """A backbone `save_backbone_config` described, with random weights."""

    if not path.is_file():
        raise PetalsError(
            f"{path}: missing; a BERT run keeps its backbone's architecture there, train it again"
        )
    _keras_hub()  # registers keras-hub's classes for deserialization
    return keras.saving.deserialize_keras_object(load_json(path.parent, path.name, "run file"))


def classifier(backbone, num_classes: int, sequence_length: int, dropout: float, batch_size=None):
    """BERT's inputs -> logits over the classes: pooled [CLS] output, dropout, a dense layer."""
    inputs = {
        name: keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name=name)
        for name in INPUTS
    }
    backbone.name = "backbone"  # one nested layer: freezing it is one switch
    pooled = backbone(inputs)["pooled_output"]
    features = layers.Dropout(dropout, name="head_dropout")(pooled)
    logits = layers.Dense(num_classes, name="logits")(features)
    return keras.Model(inputs, logits, name="bert-classifier")


def write_tiny_preset(folder: Path, vocabulary: list[str], sequence_length: int = 64, seed: int = 0) -> Path:
    """A tiny random BERT written as a keras-hub preset (backbone and tokenizer): what the tests
    load offline in place of a pretrained one."""
    keras_hub = _keras_hub()
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary), max_sequence_length=sequence_length, **SIZES["bert-tiny"]
    )
    folder.mkdir(parents=True, exist_ok=True)
    backbone.save_to_preset(str(folder))
    keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True).save_to_preset(str(folder))
    return folder
