"""The classifier as it trains: the network, one-hot (or soft) labels, and augmentation in the step.

The inputs are pixels (made float32 here) or a text network's token ids (left as they are).

`Classifier` wraps the network from the registry for Keras's `fit` on either backend: labels
arrive as class indices and become one-hot rows (CutMix/MixUp's soft rows pass through), and
with augmentation placed on the device (TensorFlow only) the batch is augmented at the start of
the train step, on the accelerator. On JAX augmentation stays in tf.data on the host.
"""

from __future__ import annotations

from collections.abc import Iterator

import keras
from keras import ops

from pipeline.data.image_inputs import image_of, with_image


class Classifier(keras.Model):
    """The network for training: one-hot labels, and the batch augmented in the step when asked."""

    def __init__(
        self,
        net: keras.Model,
        num_classes: int,
        aug,
        augment_here: bool,
        shift_scale: float,
        images: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.net = net
        self.num_classes = num_classes
        self.aug = aug
        self.augment_here = augment_here  # TensorFlow ops in the step: TensorFlow only
        self.shift_scale = shift_scale
        self.images = images  # pixels (made float32 here) or token ids (kept as they are)

    def _inputs(self, inputs):
        """Pixels as float32 (an image_table's columns, float32 already, as they are)."""
        return with_image(inputs, ops.cast(image_of(inputs), "float32")) if self.images else inputs

    def call(self, inputs, training=False):
        return self.net(self._inputs(inputs), training=training)

    def one_hot(self, labels):
        """Class indices -> one-hot rows; rows of labels as floats; soft rows (CutMix/MixUp) pass
        through."""
        if labels is not None and len(labels.shape) == 1:
            return ops.one_hot(ops.cast(labels, "int32"), self.num_classes)
        return labels if labels is None else ops.cast(labels, "float32")

    def prepare(self, images, labels, training: bool):
        if training and self.augment_here:
            from pipeline.data import augment

            images, labels = augment.augment_inputs(
                images,
                labels,
                self.aug,
                self.num_classes,
                xla=bool(self.jit_compile),
                shift_scale=self.shift_scale,
            )
        return self._inputs(images), self.one_hot(labels)

    # Keras calls these with (batch,) on TensorFlow and (state, batch) on JAX.
    def train_step(self, *args):
        *state, batch = args
        return super().train_step(*state, self.prepare(*batch, training=True))

    def test_step(self, *args):
        *state, batch = args
        return super().test_step(*state, self.prepare(*batch, training=False))

    # Keras also calls these on the raw batch when it builds under a distribution strategy.
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return super().compute_loss(x, self.one_hot(y), y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, self.one_hot(y), y_pred, sample_weight)


def _layers_within(layer: keras.layers.Layer) -> Iterator[keras.layers.Layer]:
    for inner in getattr(layer, "layers", []):
        yield inner
        yield from _layers_within(inner)


def set_backbone_trainable(
    net: keras.Model, trainable: bool, freeze_batchnorm: bool, unfrozen_layers: int = 0
) -> None:
    """Freeze or unfreeze the backbone: when it trains, its last `unfrozen_layers` layers do (all
    of them at 0), with BatchNorm keeping its statistics if asked (inference mode in Keras 3)."""
    backbone = net.get_layer("backbone")
    backbone.trainable = trainable  # every layer inside follows
    if not trainable:
        return
    if unfrozen_layers:
        body = [layer for layer in backbone.layers if not isinstance(layer, keras.layers.InputLayer)]
        for layer in body[:-unfrozen_layers]:
            layer.trainable = False
    if freeze_batchnorm:
        for layer in _layers_within(backbone):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
