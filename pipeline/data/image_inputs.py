"""An image example's input, alone or beside its row's numeric columns.

An `image_table` competition's examples read the image and the numbers of its row's feature
columns (`[data] feature_columns`): its batches' inputs are `{"image": pixels, "columns":
float32 [batch, columns]}`, the two inputs the network takes by name. Everything done to pixels
(decoding, resizing, augmentation, test-time views, the feature cache's pass) reaches the image
through `image_of` and `with_image`, so the columns pass every stage untouched; a plain image
example's input is its pixels, and these functions leave it as it is.
"""

from __future__ import annotations

IMAGE, COLUMNS = "image", "columns"  # the network's inputs by name (pipeline/networks/columns.py)


def image_of(inputs):
    """The pixels of an example's (or a batch's) input."""
    return inputs[IMAGE] if isinstance(inputs, dict) else inputs


def with_image(inputs, image):
    """The input with its pixels replaced by `image` (its columns kept)."""
    return {**inputs, IMAGE: image} if isinstance(inputs, dict) else image


def columns_of(inputs):
    """The row's numbers of an image_table input; None for a plain image's."""
    return inputs[COLUMNS] if isinstance(inputs, dict) else None


def paired(paths, columns):
    """An image_table split's inputs as tf.data slices them: image paths and their rows' numbers."""
    return {IMAGE: paths, COLUMNS: columns}


def on_image(transform):
    """`(inputs, *tags) -> (inputs, *tags)` with `transform` applied to the pixels alone: a tf.data map."""

    def apply(inputs, *tags):
        return (with_image(inputs, transform(image_of(inputs))), *tags)

    return apply
