"""The network a config names, for the competition's inputs: images or texts.

Images go to the backbone registry (`registry.build_classifier`); texts to the text networks
(`text.NETWORKS`), which read token ids from a vocabulary adapted on the training texts and
kept in the run dir, so a run predicts with the ids it trained on. Training and inference build
through here, so a new kind of network changes this file and its own module.
"""

from __future__ import annotations

import keras

from pipeline.core.errors import PetalsError
from pipeline.modeling import registry, text


def check(config, spec, backend: str) -> None:
    """The config's network reads the competition's inputs and builds on `backend`; else one line."""
    name = config.model.backbone
    if spec.modality == "image":
        if name in text.NETWORKS:
            raise PetalsError(
                f"model.backbone={name} reads texts; competition {spec.name} has images "
                f"(python -m pipeline train --list-backbones)"
            )
        registry.check_backbone(name, backend)
        return
    if name not in text.NETWORKS:
        raise PetalsError(
            f"model.backbone={name}: competition {spec.name} has texts; its networks are "
            f"{', '.join(text.NETWORKS)}"
        )
    columns = len(spec.tables.splits["train"].layout.text_columns)
    if columns > 1:
        raise PetalsError(
            f"model.backbone={name} reads one text; competition {spec.name} has {columns} per example "
            "(sentence pairs need a network that reads pairs)"
        )
    if config.train.frozen_epochs:
        raise PetalsError(
            f"train.frozen_epochs={config.train.frozen_epochs}: {name} has no pretrained part to freeze"
        )


def input_shape(config, spec, batch_size: int | None = None) -> tuple:
    """One batch of model inputs: pixels [batch, size, size, 3] or token ids [batch, length]."""
    if spec.modality == "image":
        size = config.data.input_size or config.data.image_size
        return (batch_size, size, size, 3)
    return (batch_size, config.data.sequence_length)


def build(
    config,
    spec,
    *,
    weights: str = "none",
    input_dtype: str = "float32",
    batch_size: int | None = None,
    vocabulary_size: int | None = None,
) -> keras.Model:
    """Inputs -> class probabilities (float32). `batch_size` fixes the batch dimension (a TPU's
    static shapes); None leaves it free, as inference anywhere needs."""
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
    return text.NETWORKS[config.model.backbone](
        vocabulary_size,
        config.data.sequence_length,
        spec.num_classes,
        batch_size=batch_size,
        dropout=config.model.dropout,
    )


def encoder(config, vocabulary: list[str]) -> text.Vectorizer:
    """Texts -> token ids of `data.sequence_length`, in tf.data (any backend)."""
    return text.Vectorizer(vocabulary, config.data.sequence_length)


def adapted_vocabulary(config, texts) -> list[str]:
    """The `data.vocabulary_size` - 2 most frequent words of the training texts."""
    return text.Vectorizer.adapt(texts, config.data.vocabulary_size, config.data.sequence_length).vocabulary
