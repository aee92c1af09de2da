"""Where a network is cut for the feature cache (features.py): below the first layer that trains.

Everything below the cut is a fixed function of the image (`bottom`), everything above trains on
its cached outputs (`top`, the same layer objects as the network's). An image_table network
(pipeline/networks/columns.py) is cut in its image part; its columns join above the cut, so
`top` reads `{"image": activations, "columns": numbers}`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import keras

from pipeline.core.config import Config
from pipeline.networks import columns
from pipeline.networks.base import fed


@dataclass
class Cut:
    """The classifier split where its trainable part begins."""

    bottom: keras.Model  # pixels -> the activations that cross the cut (never trains)
    top: keras.Model  # those activations -> class probabilities (shares the classifier's layers)
    layers: int  # how many of the backbone's last layers are in `top`
    at: str  # the first of them, or "head" when `top` is the head alone


def _tensors_in(layer: keras.layers.Layer) -> list:
    return keras.tree.flatten(layer.input)


def crossing_layers(backbone: keras.Model, wanted: int) -> int:
    """The fewest of the backbone's last layers, at least `wanted`, whose inputs from below are a
    single tensor (a block boundary): the place the network can be cut and cached."""
    body = [layer for layer in backbone.layers if not isinstance(layer, keras.layers.InputLayer)]
    for count in range(max(wanted, 1), len(body) + 1):
        upper = body[-count:]
        names = {layer.name for layer in upper}
        crossing = {
            id(tensor)
            for layer in upper
            for tensor in _tensors_in(layer)
            if tensor._keras_history.operation.name not in names
        }
        if len(crossing) == 1:
            return count
    return len(body)


def cut(net: keras.Model, unfrozen_layers: int, train_backbone: bool) -> Cut:
    """Split `net` (registry.build_classifier's shape: ... -> backbone -> head layers) below the
    backbone's last `unfrozen_layers` layers, or below the head when the backbone never trains."""
    if columns.reads_columns(net):  # its image part cut, its columns joined above the cut
        image = cut(columns.image_part(net), unfrozen_layers, train_backbone)
        return replace(image, top=columns.over_image_part(net, image.top))
    backbone = net.get_layer("backbone")
    where = net.layers.index(backbone)
    into_backbone = net.input
    for layer in net.layers[1:where]:  # the input's cast and the backbone's preprocessing: a chain
        into_backbone = layer(into_backbone)
    head = net.layers[where + 1 :]
    if train_backbone:
        count = crossing_layers(backbone, unfrozen_layers)
        body = [layer for layer in backbone.layers if not isinstance(layer, keras.layers.InputLayer)]
        first = body[-count]
        inner = _tensors_in(first)[0]
        lower = keras.Model(backbone.input, inner, name="backbone_below_cut")
        upper = keras.Model(inner, backbone.output, name="backbone_above_cut")
        bottom = keras.Model(net.input, fed(lower, into_backbone), name="bottom")
        at = first.name
    else:
        count, at, upper = 0, "head", None
        bottom = keras.Model(net.input, fed(backbone, into_backbone), name="bottom")
    activations = keras.Input(bottom.output.shape[1:], name="activations")
    x = upper(activations) if upper is not None else activations
    for layer in head:
        x = layer(x)
    return Cut(bottom=bottom, top=keras.Model(activations, x, name="top"), layers=count, at=at)


def cut_for(net: keras.Model, config: Config) -> Cut:
    """Where a run's config cuts its classifier: the trainer's cut, and its predictions' through it."""
    wanted = config.train.unfrozen_layers
    unfrozen = crossing_layers(net.get_layer("backbone"), wanted) if wanted else 0
    return cut(net, unfrozen, config.train.epochs > config.train.frozen_epochs)


def input_shape(cut_: Cut):
    """One batch of what `top` reads: the activations, or by name beside an image_table's columns."""
    return keras.tree.map_structure(lambda tensor: tensor.shape, cut_.top.input)
