"""An image in: the input part of every image task (pipeline/tasks/image_classification.py and its
siblings compose it with a target part). It owns what a photo's modality decides: the size a run id
carries, which networks read images, test-time views, `make inspect`'s grid and the mistakes grid;
nothing here knows what the label is (`label_text` titles a drawn example)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.files import plain_text, pyplot, save_figure
from pipeline.tasks.base import RECIPES_DIR, Task


class ImageInput(Task):
    """One photo an example."""

    modality = "image"
    unit = "img"

    @property
    def recipes_dir(self) -> Path:
        """The image recipes, whatever the target: a backbone and its schedule serve one class,
        several labels or a number alike (a target refuses in `check_recipe` what it cannot use)."""
        return RECIPES_DIR / "image_classification"

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
        with train.naming_bad(labeled=True):
            images, labels = _one_augmented_batch(train, config, size)
        path = out / "batch.png"
        heading = (
            f"one training batch, recipe {config.recipe}, {images.shape[1]} px, augmentation on the {where}"
        )
        titles = [self.label_text(label, spec) for label in labels]
        save_figure(image_grid(images, titles, heading), path, dpi=80)
        return path

    def show_mistakes(self, split, shown, config, folder: Path) -> Path:
        """The images of `shown` as a grid (at most mistakes.MAX_IMAGES, each downscaled to
        mistakes.THUMBNAIL px), each titled with its true and predicted classes and its score."""
        from pipeline.core.rundir import RunDir
        from pipeline.tasks import mistakes

        images = mistakes.images_by_id(split, config, shown["id"].to_numpy())
        heading = f"the {len(shown)} most confident mistakes on val, worst first ({config.recipe} recipe)"
        path = folder / RunDir.MISTAKES_PLOT
        save_figure(image_grid(images, mistakes.captions(shown), heading, cols=6), path, dpi=80)
        return path


def view(inputs, index: int, aug, num_classes: int, shift_scale: float):
    """Pass `index` of test-time augmentation: 0 the images, 1 mirrored, then random augmentations."""
    import tensorflow as tf

    from pipeline.data import augment
    from pipeline.data.image_inputs import image_of, with_image

    images = tf.cast(image_of(inputs), tf.float32)  # the pixels of an image_table's inputs
    if index == 0:
        return with_image(inputs, images)
    if index == 1:
        return with_image(inputs, tf.image.flip_left_right(images))
    labels = tf.zeros(tf.shape(images)[:1], tf.int32)
    return with_image(
        inputs, augment.augment_batch(images, labels, aug, num_classes, shift_scale=shift_scale)[0]
    )


def _one_augmented_batch(train, config, images: int):
    """One training batch augmented as the model would see it, wherever the recipe runs augmentation."""
    import dataclasses

    on_host = dataclasses.replace(config, augment=dataclasses.replace(config.augment, where="host"))
    from pipeline.data.image_inputs import image_of

    batch = next(iter(train.train_dataset(on_host, images)))
    return image_of(batch[0]).numpy(), batch[1].numpy()


# The grid's measures in inches: each image's square, the gap beside it, a title line's height
# (8 points and leading), the heading's band. Laid out by hand, the images pasted into one picture:
# matplotlib's tight_layout measured every title again, and an axes per image cost 36 sets of tick
# artists, each about as long as drawing the images (1.4 CPU-s a grid of 36 against 0.4).
CELL, GAP, TITLE_LINE, HEADING = 2.4, 0.2, 0.16, 0.5
TITLE_PAD = 6 / 72  # inches between an image and its title: matplotlib's axes title pad, 6 points


@plain_text
def image_grid(images: np.ndarray, titles: list[str], heading: str, cols: int = 5):
    """Images (0-255, [n, height, width, 3]) as a grid, each under its title, the whole under
    `heading`: `make inspect`'s batch, evaluate's mistakes. Each image is drawn whole in its square,
    centred, at its own pixels (the picture's resolution is the largest side's). What the titles
    quote from files the caller makes safe (foreign.text)."""
    plt = pyplot()
    n = len(images)
    cols = max(min(n, cols), 1)
    rows = -(-n // cols)
    lines = max((t.count("\n") + 1 for t in titles), default=1)
    band = lines * TITLE_LINE + 0.1  # above each image: its title
    width, height = cols * (CELL + GAP), HEADING + rows * (band + CELL) + GAP / 2
    per_inch = max(images.shape[1:3]) / CELL  # the picture's pixels an inch
    picture = np.full((round(height * per_inch), round(width * per_inch), 3), 255, np.uint8)  # white
    fig = plt.figure(figsize=(width, height))
    for k, (image, title) in enumerate(zip(images, titles, strict=False)):
        row, col = divmod(k, cols)
        left = col * (CELL + GAP) + GAP / 2
        top = HEADING + row * (band + CELL) + band  # from the figure's top
        tall, wide = image.shape[:2]
        y = round(top * per_inch + (CELL * per_inch - tall) / 2)
        x = round(left * per_inch + (CELL * per_inch - wide) / 2)
        picture[y : y + tall, x : x + wide] = np.rint(np.clip(image, 0, 255)).astype(np.uint8)
        fig.text((left + CELL / 2) / width, 1 - (top - TITLE_PAD) / height, title,
                 ha="center", va="bottom", fontsize=8)  # fmt: skip
    axes = fig.add_axes((0, 0, 1, 1))
    axes.axis("off")
    axes.imshow(picture, interpolation="nearest", aspect="auto")
    fig.text(0.5, 1 - 0.15 / height, heading, ha="center", va="top", fontsize=10)
    return fig
