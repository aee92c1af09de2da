"""An image network beside its row's numeric columns: the one place the two meet.

The image network (any image entry of the registry, headless: pixels -> pooled features ->
dropout -> `logits`) is built as for an image alone; `with_columns` takes its pooled features (what
its `logits` layer reads), concatenates the row's columns standardised by the training rows' means
and variances, and puts a new `logits` layer over both, which the task's output goes on as ever.
The means and variances are a `keras.layers.Normalization`'s untrained weights, set once from the
training rows (`fit_scale`) and saved with every weights file and checkpoint, as a regression's
target scale is (numbers.py): every later stage standardises the same way from the weights it
loads. The network then takes `{"image": pixels, "columns": numbers}` by name.
"""

from __future__ import annotations

import keras
import numpy as np

COLUMNS_SCALE = "columns_scale"  # the Normalization layer holding the columns' means and variances
JOIN = "features_and_columns"  # where the image's pooled features meet the standardised columns


def with_columns(net: keras.Model, columns: int, batch_size: int | None = None) -> keras.Model:
    """`net` (pixels -> logits) as `{"image", "columns"} -> logits`: its pooled features and the
    `columns` standardised numbers, concatenated, under a new logits layer of as many outputs."""
    head = net.get_layer("logits")
    numbers = keras.Input(shape=(columns,), batch_size=batch_size, dtype="float32", name="columns")
    scaled = keras.layers.Normalization(axis=-1, dtype="float32", name=COLUMNS_SCALE)(numbers)
    joined = keras.layers.Concatenate(name=JOIN)([head.input, scaled])
    logits = keras.layers.Dense(head.units, name="logits")(joined)
    return keras.Model({"image": net.input, "columns": numbers}, logits, name=net.name)


def fit_scale(net: keras.Model, columns: np.ndarray) -> None:
    """Set the columns' means and variances from the training rows' `columns` [rows, columns]."""
    net.get_layer(COLUMNS_SCALE).adapt(np.asarray(columns, np.float32))


def input_shape(image_shape: tuple, columns: int) -> dict[str, tuple]:
    """One batch of the network's inputs by name, from its image's shape."""
    return {"image": image_shape, "columns": (image_shape[0], columns)}


def reads_columns(net: keras.Model) -> bool:
    """Whether `net` is a `with_columns` network (with its output or without)."""
    return isinstance(net.input, dict) and "columns" in net.input


def image_part(net: keras.Model) -> keras.Model:
    """A `with_columns` network's image part, its own layers: pixels -> pooled features (after
    dropout), the shape of an image network without its logits (the feature cache cuts it)."""
    return keras.Model(net.input["image"], net.get_layer(JOIN).input[0], name=f"{net.name}-image")


def over_image_part(net: keras.Model, image_top: keras.Model) -> keras.Model:
    """`net` above a cut of its image part: `{"image": what `image_top` reads, "columns": numbers}`
    -> `net`'s outputs, through `image_top` (the image part above the cut) and `net`'s own layers
    from the join up, so training it trains `net`."""
    below = keras.Input(shape=image_top.input.shape[1:], dtype=image_top.input.dtype, name="image")
    numbers = keras.Input(shape=net.input["columns"].shape[1:], dtype="float32", name="columns")
    join = net.get_layer(JOIN)
    x = join([image_top(below), net.get_layer(COLUMNS_SCALE)(numbers)])
    for layer in net.layers[net.layers.index(join) + 1 :]:  # the logits, the task's output
        x = layer(x)
    return keras.Model({"image": below, "columns": numbers}, x, name="top")
