"""The network a config names, for the competition's inputs: images or texts.

Images go to the backbone registry (`registry.build_classifier`); texts to the LSTM or the bag
of n-grams (`text.NETWORKS`), which read token ids of a vocabulary adapted on the training texts,
or to BERT (`bert`), which reads its tokenizer's ids. A text run keeps its tokenization in its run
dir (`text_inputs`), so it predicts with the ids it trained on. Training and inference build
through here, so a new kind of network changes this file and its own module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import keras

from pipeline.core.errors import PetalsError
from pipeline.modeling import bert, registry, text
from pipeline.tasks.text_classification import text_networks

TEXT_NETWORKS = text_networks()


def check(config, spec, backend: str) -> None:
    """The config's network reads the competition's inputs and builds on `backend`; else one line.
    What fits is the competition's task's to say."""
    spec.task.check_network(config, spec, backend)


def packages(config) -> dict[str, list[str]]:
    """{import name: pip install arguments} of the packages the config's network needs beyond Keras
    (Kaggle's images may lack them: a kernel installs them, or stops in one line)."""
    name = config.model.backbone
    if name in bert.NAMES:
        return {"keras_hub": list(bert.PIP_INSTALL)}
    if name in text.NETWORKS:
        return {}
    return registry.get_backbone(name).packages(config.model.weights)


def input_shape(config, spec, batch_size: int | None = None):
    """One batch of model inputs: pixels [batch, size, size, 3], token ids [batch, length], or
    BERT's three [batch, length] inputs by name."""
    if spec.modality == "image":
        size = config.data.input_size or config.data.image_size
        return (batch_size, size, size, 3)
    shape = (batch_size, config.data.sequence_length)
    return {name: shape for name in bert.INPUTS} if config.model.backbone in bert.NAMES else shape


def build(
    config,
    spec,
    *,
    weights: str = "none",
    input_dtype: str = "float32",
    batch_size: int | None = None,
    vocabulary_size: int | None = None,
    run_dir: Path | None = None,
) -> keras.Model:
    """Inputs -> class probabilities (float32). `batch_size` fixes the batch dimension (a TPU's
    static shapes); None leaves it free, as inference anywhere needs. A text network needs its
    tokenization's vocabulary size (`TextInputs.vocabulary_size`); given a trained run's dir,
    BERT takes its architecture from there (`keep_architecture`), not from the preset."""
    if spec.modality == "image":
        return registry.build_classifier(
            config.model.backbone,
            input_shape(config, spec)[1],
            spec.num_classes,
            weights=weights,
            dropout=config.model.dropout,
            input_dtype=input_dtype,
            batch_size=batch_size,
        )
    if vocabulary_size is None:
        raise ValueError("a text network needs the vocabulary's size")  # a caller's bug
    if config.model.backbone in bert.NAMES:
        from pipeline.core.rundir import RunDir

        backbone = (
            bert.backbone_from_config(run_dir / RunDir.BACKBONE)
            if run_dir is not None
            else bert.new_backbone(config, vocabulary_size)
        )
        return bert.classifier(
            backbone,
            spec.num_classes,
            config.data.sequence_length,
            config.model.dropout,
            batch_size=batch_size,
        )
    return text.NETWORKS[config.model.backbone].build(
        vocabulary_size,
        config.data.sequence_length,
        spec.num_classes,
        batch_size=batch_size,
        dropout=config.model.dropout,
    )


def keep_architecture(config, net: keras.Model, run_dir: Path) -> None:
    """What a run dir needs to rebuild its network besides the config: BERT's backbone architecture."""
    if config.model.backbone in bert.NAMES:
        from pipeline.core.rundir import RunDir

        bert.save_backbone_config(net.get_layer("backbone"), run_dir / RunDir.BACKBONE)


def has_backbone(net: keras.Model) -> bool:
    """Whether the network has a pretrained part to freeze (every image network, BERT)."""
    return any(layer.name == "backbone" for layer in net.layers)


@dataclass
class TextInputs:
    """A text run's tokenization: the encoder its splits use, the vocabulary size its network
    embeds, and how it is kept in the run dir (the words of the LSTM and the bag of n-grams, BERT's
    tokenizer)."""

    encode: Callable
    vocabulary_size: int
    save: Callable[[Path], None]  # into the run dir


def text_inputs(config, run_dir: Path, train_columns=None, fresh: bool = False) -> TextInputs:
    """The tokenization a run keeps in `run_dir`; with `train_columns` (the training texts), a new
    one made from them when nothing is kept yet or `fresh` (a run trained again)."""
    from pipeline.core.rundir import RunDir

    if config.model.backbone in bert.NAMES:
        folder = run_dir / RunDir.TOKENIZER
        if train_columns is None or ((folder / "tokenizer.json").is_file() and not fresh):
            tokenizer = bert.load_tokenizer(folder)
        else:
            tokenizer = bert.new_tokenizer(config, train_columns)
        return TextInputs(
            encode=bert.Encoder(tokenizer, config.data.sequence_length),
            vocabulary_size=tokenizer.vocabulary_size(),
            save=lambda run: bert.save_tokenizer(tokenizer, run / RunDir.TOKENIZER),
        )
    path = run_dir / RunDir.VOCABULARY
    if train_columns is None or (path.is_file() and not fresh):
        if not path.is_file():
            raise PetalsError(f"{path}: missing; a text run keeps its vocabulary there, train it again")
        vocabulary = text.read_vocabulary(path)
    else:
        vocabulary = text.Vectorizer.adapt(
            train_columns[0], config.data.vocabulary_size, config.data.sequence_length
        ).vocabulary
    return TextInputs(
        encode=text.NETWORKS[config.model.backbone].vectorizer(vocabulary, config.data.sequence_length),
        vocabulary_size=len(vocabulary) + 2,  # padding and unknown words
        save=lambda run: text.write_vocabulary(run / RunDir.VOCABULARY, vocabulary),
    )
