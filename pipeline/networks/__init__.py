"""Every network a config can name, by one name (`NETWORKS`, `get`), and what is done with it.

An entry is an image backbone (`registry.BACKBONES`, built into a classifier by
`registry.build_classifier`; keras-hub's families, `keras_hub_vision.BACKBONES`) or a text network
(`text_networks.NETWORKS`: the LSTM and the bag of n-grams of `text`, which read token ids of a
vocabulary adapted on the training texts, and BERT, which reads its tokenizer's ids; keras-hub's
encoders, `keras_hub_text.NETWORKS`; a bag of words beside a sentence encoder, `joined.NETWORKS`).
Each answers the same questions: its modality, the backends it builds on, the packages it needs,
its pretrained weights, its preprocessing, a line for `train --list-backbones` (`describe_all`):
one shape, `base.Network`, so the functions here ask the entry and never which kind it is. A text
run keeps its tokenization in its run dir (`text_inputs`), so it predicts with the ids it trained
on; the names of its files are `RunDir`'s, handed to the text entries from here. Training and
inference build through here; a new network is a new entry in its kind's module.

Whether a config's network fits a competition is its task's to say
(`pipeline.tasks.competitions.check_network`): the tasks sit above the networks.
"""

from __future__ import annotations

from pathlib import Path

import keras

from pipeline.networks import (
    columns,
    joined,
    keras_hub_text,
    keras_hub_vision,
    numbers,
    registry,
    text_networks,
)
from pipeline.networks.base import Network, RunFiles, TextInputs

IMAGE_BACKBONES: dict[str, Network] = {**registry.BACKBONES, **keras_hub_vision.BACKBONES}
NETWORKS: dict[str, Network] = {
    **IMAGE_BACKBONES,
    **text_networks.NETWORKS,
    **keras_hub_text.NETWORKS,
    **joined.NETWORKS,
}
TEXT_NETWORKS = tuple(name for name, entry in NETWORKS.items() if entry.modality == "text")


def get(name: str) -> Network:
    """The entry named `name`; else a PetalsError naming close ones."""
    if name not in NETWORKS:
        raise registry.unknown(name, NETWORKS)
    return NETWORKS[name]


def describe_all() -> list[str]:
    """One line an entry, the image backbones first: what `train --list-backbones` prints."""
    return [entry.describe() for entry in NETWORKS.values()]


def packages(config) -> dict[str, list[str]]:
    """{import name: pip install arguments} of the packages the config's network needs beyond Keras
    (Kaggle's images may lack them: a kernel installs them, or stops in one line)."""
    return get(config.model.backbone).packages(config.model.weights)


def _files() -> RunFiles:
    from pipeline.core.rundir import RunDir

    return RunFiles(RunDir.VOCABULARY, RunDir.TOKENIZER, RunDir.BACKBONE)


def input_shape(config, batch_size: int | None = None, spec=None):
    """One batch of model inputs: pixels [batch, size, size, 3], token ids [batch, length], or
    BERT's three [batch, length] inputs by name; with `spec`'s feature columns, pixels and columns
    by name (columns.py)."""
    shape = get(config.model.backbone).input_shape(config, batch_size)
    return columns.input_shape(shape, len(spec.feature_columns)) if spec and spec.feature_columns else shape


def with_output(net: keras.Model, activation: str) -> keras.Model:
    """A headless network with the task's output on top: `activation` over its logits ("softmax":
    one class an example; "sigmoid": each label on its own), in float32 whatever the policy. The
    same layers: weights saved from either load into the other. A regression's ("standardised"):
    its logits back in the target's units (numbers.py)."""
    if activation == numbers.ACTIVATION:
        outputs = numbers.Unstandardise(dtype="float32", name="probabilities")(net.output)
    else:
        outputs = keras.layers.Activation(activation, dtype="float32", name="probabilities")(net.output)
    return keras.Model(net.input, outputs, name=net.name)  # its inputs as it takes them: BERT's by name


def build(
    config,
    spec,
    *,
    activation: str,
    weights: str = "none",
    input_dtype: str = "float32",
    batch_size: int | None = None,
    vocabulary_size: int | None = None,
    run_dir: Path | None = None,
) -> keras.Model:
    """Inputs -> the task's outputs (float32): the named network, headless, with `activation` (the
    competition's task's: `Task.activation`) over its logits. `batch_size` fixes the batch dimension
    (a TPU's static shapes); None leaves it free, as inference anywhere needs. A text network needs
    its tokenization's vocabulary size (`TextInputs.vocabulary_size`); given a trained run's dir,
    BERT takes its architecture from there (`keep_architecture`), not from the preset."""
    net = get(config.model.backbone).build_classifier(
        config,
        spec.num_classes,
        weights=weights,
        input_dtype=input_dtype,
        batch_size=batch_size,
        vocabulary_size=vocabulary_size,
        run_dir=run_dir,
        files=_files(),
    )
    if spec.feature_columns:  # the image's features beside its row's numbers
        net = columns.with_columns(net, len(spec.feature_columns), batch_size)
    return with_output(net, activation)


def vocabulary_size(config, run_dir: Path) -> int | None:
    """The ids the run's network embeds (a text network's tokenization, kept in `run_dir`), or None."""
    return get(config.model.backbone).vocabulary_size(config, run_dir, _files())


def encoded(config, split, run_dir: Path):
    """A split as the run's network reads it: a text network's encoder on, images as they are."""
    return get(config.model.backbone).encoded(split, config, run_dir, _files())


def keep_architecture(config, net: keras.Model, run_dir: Path) -> None:
    """What a run dir needs to rebuild its network besides the config: a keras-hub backbone's
    architecture (BERT's, an image family's with its converter)."""
    get(config.model.backbone).keep_architecture(net, run_dir, _files())


def has_backbone(net: keras.Model) -> bool:
    """Whether the network has a pretrained part to freeze (every image network, BERT)."""
    return any(layer.name == "backbone" for layer in net.layers)


def text_inputs(config, run_dir: Path, train_columns=None, fresh: bool = False) -> TextInputs:
    """The tokenization a run keeps in `run_dir`; with `train_columns` (the training texts), a new
    one made from them when nothing is kept yet or `fresh` (a run trained again)."""
    return get(config.model.backbone).text_inputs(config, run_dir, _files(), train_columns, fresh)
