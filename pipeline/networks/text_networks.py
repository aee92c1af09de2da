"""The text networks by name (`model.backbone` for a table competition): one entry each.

Each entry is a `Network` (base.py), the shape of every entry: how its texts become ids
(`preprocess`), its inputs' shape, the classifier built on it, the run's tokenization
(`TextInputs`) and what the run dir keeps of its architecture. A text entry also says whether it
reads text pairs and whether it has a pretrained part a frozen warm-up freezes, and checks a
config's weights. Two kinds: the word models (`text`, `tfidf`, `tfidf-chars`: ids of a vocabulary
adapted on the training texts) and BERT (`bert`: its tokenizer's ids). `pipeline.networks` looks
these entries and the image backbones up by one name; it hands in the run dir's file names
(`RunFiles`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras

from pipeline.core.errors import PetalsError
from pipeline.networks import bert, text, tfidf
from pipeline.networks.base import PRESET_WEIGHTS, Network, RunFiles, TextInputs


class TextNetwork(Network):
    """One text network: it reads token ids, as many texts an example as it says."""

    modality: ClassVar[str] = "text"
    reads_ids: ClassVar[bool] = True
    backends: ClassVar[tuple[str, ...]] = ("tensorflow", "jax")
    reads_pairs: ClassVar[bool] = False  # two texts an example (premise, hypothesis)
    has_backbone: ClassVar[bool] = False  # a pretrained part, one layer a frozen warm-up freezes
    fitted: ClassVar[bool] = False  # TF-IDF + a linear fit: `train.head_solver=logistic` fits it
    preprocess: str  # how texts become ids: words | subwords (words and their n-grams) | wordpiece

    def input_shape(self, config, batch_size: int | None = None):
        """One batch of its inputs: token ids [batch, length]."""
        return (batch_size, config.data.sequence_length)

    def build_classifier(
        self,
        config,
        num_classes: int,
        *,
        weights: str = "none",
        input_dtype: str = "float32",
        batch_size: int | None = None,
        vocabulary_size: int | None = None,
        run_dir: Path | None = None,
        files: RunFiles | None = None,
    ) -> keras.Model:
        if vocabulary_size is None or files is None:
            raise ValueError("a text network needs the vocabulary's size and the run's file names")  # a bug
        return self._classifier(config, num_classes, vocabulary_size, batch_size, run_dir, files)

    @abstractmethod
    def _classifier(self, config, num_classes, vocabulary_size, batch_size, run_dir, files) -> keras.Model:
        """Token ids -> logits over the classes."""

    @abstractmethod
    def text_inputs(
        self, config, run_dir: Path, files: RunFiles, train_columns=None, fresh: bool = False
    ) -> TextInputs: ...

    def vocabulary_size(self, config, run_dir: Path, files: RunFiles) -> int | None:
        return self.text_inputs(config, run_dir, files).vocabulary_size

    def encoded(self, split, config, run_dir: Path, files: RunFiles):
        return split.with_encoder(self.text_inputs(config, run_dir, files).encode)

    def describe(self) -> str:
        pairs = ", reads pairs" if self.reads_pairs else ""
        needs = "".join(f"  (needs {pip[-1]})" for pip in self.packages("none").values())
        return (
            f"{self.name:<26} pretrained: {', '.join(self.weights) or '-'}  "
            f"text: {self.preprocess}{pairs}{needs}"
        )


@dataclass(frozen=True)
class WordNetwork(TextNetwork):
    """A word model of `text`: ids of the words of a vocabulary adapted on the training texts."""

    name: str
    preprocess: str
    # (vocabulary_size, sequence_length, num_classes, batch_size, dropout) -> token ids to probabilities
    classifier: Callable[..., keras.Model]
    # (vocabulary, sequence_length) -> texts to int32 ids [n, sequence_length]
    vectorizer: Callable[..., Callable]
    weights: tuple[str, ...] = ()
    fitted: bool = False  # TF-IDF + a linear fit (pipeline/modeling/text_probe.py)

    def _classifier(self, config, num_classes, vocabulary_size, batch_size, run_dir, files) -> keras.Model:
        return self.classifier(
            vocabulary_size,
            config.data.sequence_length,
            num_classes,
            batch_size=batch_size,
            dropout=config.model.dropout,
        )

    def text_inputs(self, config, run_dir, files, train_columns=None, fresh=False) -> TextInputs:
        path = run_dir / files.vocabulary
        if train_columns is None or (path.is_file() and not fresh):
            if not path.is_file():
                raise PetalsError(f"{path}: missing; a text run keeps its vocabulary there, train it again")
            vocabulary = text.read_vocabulary(path)
        else:
            vocabulary = text.Vectorizer.adapt(
                train_columns[0], config.data.vocabulary_size, config.data.sequence_length
            ).vocabulary
        return TextInputs(
            encode=self.vectorizer(vocabulary, config.data.sequence_length),
            vocabulary_size=len(vocabulary) + 2,  # padding and unknown words
            save=lambda run: text.write_vocabulary(run / files.vocabulary, vocabulary),
        )


@dataclass(frozen=True)
class BertNetwork(TextNetwork):
    """BERT from keras-hub (`bert`): a preset's, or a random one of a named size."""

    preprocess: ClassVar[str] = "wordpiece"
    reads_pairs: ClassVar[bool] = True
    has_backbone: ClassVar[bool] = True
    name: str
    weights: tuple[str, ...] = ()

    def packages(self, weights: str) -> dict[str, list[str]]:
        return {"keras_hub": list(bert.PIP_INSTALL)}

    def check(self, config) -> None:
        bert.check(config)

    def input_shape(self, config, batch_size: int | None = None):
        """Its three inputs by name (token ids, segment ids, padding mask), each [batch, length]."""
        return {name: (batch_size, config.data.sequence_length) for name in bert.INPUTS}

    def _classifier(self, config, num_classes, vocabulary_size, batch_size, run_dir, files) -> keras.Model:
        """Given a trained run's dir, the architecture it kept, not the preset's."""
        backbone = (
            bert.backbone_from_config(run_dir / files.backbone)
            if run_dir is not None
            else bert.new_backbone(config, vocabulary_size)
        )
        return bert.classifier(
            backbone, num_classes, config.data.sequence_length, config.model.dropout, batch_size=batch_size
        )

    def text_inputs(self, config, run_dir, files, train_columns=None, fresh=False) -> TextInputs:
        folder = run_dir / files.tokenizer
        if train_columns is None or ((folder / "tokenizer.json").is_file() and not fresh):
            tokenizer = bert.load_tokenizer(folder)
        else:
            tokenizer = bert.new_tokenizer(config, train_columns)
        return TextInputs(
            encode=bert.Encoder(tokenizer, config.data.sequence_length),
            vocabulary_size=tokenizer.vocabulary_size(),
            save=lambda run: bert.save_tokenizer(tokenizer, run / files.tokenizer),
        )

    def keep_architecture(self, net: keras.Model, run_dir: Path, files: RunFiles) -> None:
        """The backbone's architecture: inference rebuilds it without the preset."""
        bert.save_backbone_config(net.get_layer("backbone"), run_dir / files.backbone)


NETWORKS: dict[str, TextNetwork] = {
    entry.name: entry
    for entry in (
        WordNetwork("bilstm", "words", text.lstm_classifier, text.Vectorizer),
        WordNetwork("ngrams", "subwords", text.ngram_classifier, text.SubwordVectorizer),
        WordNetwork("tfidf", "words", tfidf.tfidf_classifier, text.Vectorizer, fitted=True),
        WordNetwork("tfidf-chars", "subwords", tfidf.chars_classifier, text.SubwordVectorizer, fitted=True),
        *(BertNetwork(name, (PRESET_WEIGHTS,) if name == bert.PRESET else ()) for name in bert.NAMES),
    )
}
