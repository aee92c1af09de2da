"""The examples of an image-folder or table competition, and their tf.data readers.

A fetched data dir (pipeline/data/competition_files.py) holds each split unpacked. `examples`
lists a split in a fixed order: ids, inputs (image paths, texts, or text pairs) and labels.
Kaggle gives these competitions no val split, so `hold_out` takes one from train: a stratified,
seeded share of each class, the same on every machine. `image_dataset` decodes and resizes
photos of any size to the recipe's square; `text_dataset` yields the raw strings (vectorising
them belongs to the model's preprocessor). Both keep batches static in size, as TPUs need.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.errors import PetalsError
from pipeline.data.tables import read_table

AUTOTUNE = tf.data.AUTOTUNE


@dataclass(frozen=True)
class Examples:
    """One split, in a fixed order. `inputs` holds image paths, or texts, or text pairs
    (`inputs[k]` is the k-th text column); `labels` is None for an unlabelled split."""

    ids: np.ndarray  # str
    inputs: tuple[np.ndarray, ...]
    labels: np.ndarray | None  # int64 class ids

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> Examples:
        return replace(
            self,
            ids=self.ids[rows],
            inputs=tuple(column[rows] for column in self.inputs),
            labels=None if self.labels is None else self.labels[rows],
        )


def examples(root: Path, spec: CompetitionSpec, split: str) -> Examples:
    """A split of a fetched data dir, sorted by id (images) or in file order (tables)."""
    if spec.kind == "image_folder":
        return _image_examples(root, spec, split)
    table = spec.tables.splits[split]
    rows = read_table(root / table.file, table.layout, spec.num_classes if spec.is_labeled(split) else None)
    label = table.layout.label_column
    return Examples(
        ids=rows[table.layout.id_column].to_numpy(str),
        inputs=tuple(rows[column].to_numpy(str) for column in table.layout.text_columns),
        labels=rows[label].to_numpy(np.int64) if label else None,
    )


def _image_examples(root: Path, spec: CompetitionSpec, split: str) -> Examples:
    folder = spec.image_folder.splits[split]
    top = root / folder.folder
    found = []
    for path in top.rglob("*"):
        fields = folder.parse(path.relative_to(root).as_posix()) if path.is_file() else None
        if fields is not None:
            found.append((fields.get("id", path.stem), str(path), fields.get("label")))
    if not found:
        raise PetalsError(f"{top}: no {split} images ({folder.members}); fetch again")
    # Numeric ids sort as numbers (Kaggle's test/1.jpg ... test/12500.jpg).
    found.sort(key=lambda item: (len(item[0]), item[0]) if item[0].isdigit() else (0, item[0]))
    ids, paths, labels = zip(*found, strict=True)
    return Examples(
        ids=np.array(ids),
        inputs=(np.array(paths),),
        labels=np.array([spec.classes.index(label) for label in labels]) if spec.is_labeled(split) else None,
    )


def hold_out(train: Examples, fraction: float, seed: int) -> tuple[Examples, Examples]:
    """(train, val): `fraction` of each class, drawn with `seed`, kept in their original order."""
    if not 0 < fraction < 1 or train.labels is None:
        raise ValueError(f"hold_out needs labelled examples and a fraction in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    held = np.zeros(len(train), bool)
    for label in np.unique(train.labels):
        rows = np.flatnonzero(train.labels == label)
        held[rng.choice(rows, max(1, round(len(rows) * fraction)), replace=False)] = True
    return train.take(np.flatnonzero(~held)), train.take(np.flatnonzero(held))


def read_image(path: tf.Tensor, size: int) -> tf.Tensor:
    """A JPEG of any size as a `size` x `size` uint8 RGB image (squashed, as public solutions do)."""
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    resized = tf.image.resize(image, [size, size], antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)


def image_dataset(
    split: Examples, size: int, batch_size: int, training: bool, seed: int = 0
) -> tf.data.Dataset:
    """(image, label) batches, or (image, id) for an unlabelled split. Training: shuffled,
    repeated, full batches only; otherwise in order, the last batch kept as it is."""
    tags = split.labels if split.labels is not None else split.ids
    dataset = tf.data.Dataset.from_tensor_slices((split.inputs[0], tags))
    if training:
        dataset = dataset.shuffle(len(split), seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.map(lambda path, tag: (read_image(path, size), tag), num_parallel_calls=AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=training).prefetch(AUTOTUNE)


def text_dataset(split: Examples, batch_size: int, training: bool, seed: int = 0) -> tf.data.Dataset:
    """(text, label) batches, or ((premise, hypothesis), label) for pairs; ids in place of
    labels for an unlabelled split. Shuffled, repeated, full batches when training."""
    texts = split.inputs[0] if len(split.inputs) == 1 else split.inputs
    tags = split.labels if split.labels is not None else split.ids
    dataset = tf.data.Dataset.from_tensor_slices((texts, tags))
    if training:
        dataset = dataset.shuffle(len(split), seed=seed, reshuffle_each_iteration=True).repeat()
    return dataset.batch(batch_size, drop_remainder=training).prefetch(AUTOTUNE)
