"""Image classification: one photo in, one class out (flowers, pets, leaves)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import register
from pipeline.tasks.single_label import SingleLabel


@register
class ImageClassification(SingleLabel):
    name = "image_classification"
    modality = "image"
    unit = "img"

    def size(self, config) -> int:
        return config.data.input_size or config.data.image_size

    def check_network(self, config, spec, backend: str) -> None:
        from pipeline import networks
        from pipeline.networks import keras_hub_vision, registry

        # A text network's entry (text_networks.py, keras_hub_text.py) reads another modality.
        entry = networks.NETWORKS.get(config.model.backbone)
        if entry is not None and entry.modality != self.modality:
            raise PetalsError(
                f"model.backbone={config.model.backbone} reads texts; competition {spec.name} has images "
                f"(python -m pipeline train --list-backbones)"
            )
        hub = keras_hub_vision.BACKBONES.get(config.model.backbone)  # keras-hub's families
        if hub is not None and backend not in hub.backends:
            raise PetalsError(
                f"backbone {hub.name} builds on {', '.join(hub.backends)} only, not on {backend}"
            )
        if hub is None:
            registry.check_backbone(config.model.backbone, backend)

    def test_view(self, config, spec):
        """Pass 0 the images, 1 mirrored, then random views of the recipe's geometric and colour
        augmentation (nothing that hides or mixes)."""
        import dataclasses

        from pipeline.data import datasets

        aug = dataclasses.replace(config.augment, erasing=0.0, gridmask=0.0, cutmix=0.0, mixup=0.0)
        return partial(view, aug=aug, num_classes=spec.num_classes, shift_scale=datasets.shift_scale(config))

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        return {"image_size": image_size, "sequence_length": None}

    def show_batch(self, train, spec, config, out: Path, size: int, where: str) -> Path:
        """One augmented training batch as a grid, each image titled with its class."""
        from pipeline.core.files import save_figure

        with train.naming_bad(labeled=True):
            images, labels = _one_augmented_batch(train, config, size)
        path = out / "batch.png"
        save_figure(_grid(images, labels, partial(self.label_text, spec=spec), config, where), path, dpi=80)
        return path


def view(images, index: int, aug, num_classes: int, shift_scale: float):
    """Pass `index` of test-time augmentation: 0 the images, 1 mirrored, then random augmentations."""
    import tensorflow as tf

    from pipeline.data import augment

    images = tf.cast(images, tf.float32)
    if index == 0:
        return images
    if index == 1:
        return tf.image.flip_left_right(images)
    labels = tf.zeros(tf.shape(images)[:1], tf.int32)
    return augment.augment_batch(images, labels, aug, num_classes, shift_scale=shift_scale)[0]


def _one_augmented_batch(train, config, images: int):
    """One training batch augmented as the model would see it, wherever the recipe runs augmentation."""
    import dataclasses

    on_host = dataclasses.replace(config, augment=dataclasses.replace(config.augment, where="host"))
    batch = next(iter(train.train_dataset(on_host, images)))
    return batch[0].numpy(), batch[1].numpy()


def _grid(images: np.ndarray, labels: np.ndarray, title, config, where: str):
    """The batch as a grid of images, each titled with its target (`title(label)`)."""
    from pipeline.core.files import pyplot

    plt = pyplot()
    n = len(images)
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 2.6, rows * 2.9), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, label in zip(axes.flat, images, labels, strict=False):
        ax.imshow(np.clip(image / 255.0, 0.0, 1.0))
        ax.set_title(title(label), fontsize=8)
    fig.suptitle(
        f"one training batch, recipe {config.recipe}, {images.shape[1]} px, augmentation on the {where}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig
