"""The examples of an image-folder or table competition, and their tf.data readers.

A fetched data dir (pipeline/data/competition_files.py) holds each split unpacked. `examples`
lists a split in a fixed order: ids, inputs (image paths, texts, or text pairs; image paths and
their rows' feature columns) and labels.
`file_dataset` decodes and resizes photos of any size to the
recipe's square, or yields texts (encoded up front by the model's tokenizer), in batches of a
static size, as TPUs need.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.data import image_inputs, targets
from pipeline.data.datasets import PAD_ID
from pipeline.data.image_inputs import on_image, with_image
from pipeline.formats.base import MAX_IMAGE_SIDE, Examples, format_of

AUTOTUNE = tf.data.AUTOTUNE


def examples(root: Path, spec: CompetitionSpec, split: str) -> Examples:
    """A split of a fetched data dir, in its format's fixed order (images by id, rows as written)."""
    return format_of(spec).examples(root, spec, split)


def joined(*parts: Examples) -> Examples:
    """Examples of several splits as one, in the order given (unlabelled if a part is)."""
    labelled = all(e.labels is not None for e in parts)
    return Examples(
        ids=np.concatenate([e.ids.astype(str) for e in parts]),
        inputs=tuple(np.concatenate(column) for column in zip(*(e.inputs for e in parts), strict=True)),
        labels=np.concatenate([e.labels for e in parts]) if labelled else None,
    )


def read_image(path: tf.Tensor, size: int) -> tf.Tensor:
    """A JPEG of any size as a `size` x `size` uint8 RGB image (squashed, as public solutions do).

    Fetch read every header against MAX_IMAGE_SIDE; a file put in the data dir since is checked
    here too, from its header, before the decoder allocates what it claims."""
    data = tf.io.read_file(path)
    claimed = tf.io.extract_jpeg_shape(data)[:2]
    within = tf.debugging.assert_less_equal(
        claimed,
        tf.constant(MAX_IMAGE_SIDE, claimed.dtype),
        message=f"an image over {MAX_IMAGE_SIDE} px a side",
    )
    with tf.control_dependencies([within]):
        image = tf.io.decode_jpeg(data, channels=3)
    resized = tf.image.resize(image, [size, size], antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)


def file_dataset(
    split: Examples,
    batch_size: int,
    *,
    training: bool,
    image_size: int | None = None,
    encode=None,
    pad_to_batch: bool = False,
    with_ids: bool = False,
    skip_bad: bool = False,
    cache: bool = False,
    shuffle_buffer: int = 2048,
    seed: int = 0,
) -> tf.data.Dataset:
    """Batches of one split, structured as the TFRecord datasets' are: training (input, label),
    shuffled, repeated, full batches only; otherwise in order, (input, label), (input, label, id)
    `with_ids`, or (input, id) for an unlabelled split.

    Inputs are images decoded to `image_size` squares (uint8), or texts (pairs as a tuple),
    turned into model inputs by `encode` when given, all at once before tf.data (the word
    vectorisers or BERT's tokenizer, neither of which runs inside tf.data on every backend).
    `pad_to_batch` appends padding examples (label -1, id "") so every batch is full.
    """
    texts = image_size is None
    if training and cache:  # the cache fixes the order: draw it once here (train lists all cats first)
        # Inputs, labels and ids are all taken from the permuted split below: one order for all.
        split = split.take(np.random.default_rng(seed).permutation(len(split)))
    if not texts and len(split.inputs) == 2:  # an image and its row's numbers (image_inputs.py)
        inputs = image_inputs.paired(*split.inputs)
    else:
        inputs = split.inputs[0] if len(split.inputs) == 1 else tuple(split.inputs)
    if encode is not None:  # tokenized once, up front
        inputs = encode(split.inputs)
    tags: tuple = () if split.labels is None else (targets.stored(split.labels),)
    if split.labels is None or with_ids:
        tags += (split.ids.astype(str),)
    if training:
        tags = tags[:1]
    dataset = tf.data.Dataset.from_tensor_slices((inputs, *tags))
    if training and not cache:  # every example's path or text in one buffer: a full shuffle
        dataset = dataset.shuffle(len(split), seed=seed, reshuffle_each_iteration=True).repeat()
    if not texts:
        dataset = dataset.map(
            on_image(partial(read_image, size=image_size)),
            num_parallel_calls=AUTOTUNE,
            deterministic=not training,
        )
        if skip_bad:
            dataset = dataset.ignore_errors()  # a photo that does not decode
    if cache:  # decoded once, in memory; then shuffled within `shuffle_buffer` examples
        dataset = dataset.cache()
        if training:
            dataset = dataset.shuffle(min(shuffle_buffer, len(split)), seed=seed).repeat()
    if pad_to_batch:
        # A text's padding is a copy of the first text: an all-padding row of token ids is what
        # cuDNN's masked LSTM refuses. Its label -1 and empty id mark it as padding all the same.
        blank = tf.nest.map_structure(lambda column: column[0], inputs)
        if not texts:
            blank = with_image(blank, tf.zeros([image_size, image_size, 3], tf.uint8))
        padding = tuple(
            targets.padding(tag, 1)[0] if tag.dtype.kind in "if" else tf.constant(PAD_ID) for tag in tags
        )
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors((blank, *padding)).repeat(batch_size - 1))
    dataset = dataset.batch(batch_size, drop_remainder=training or pad_to_batch)
    return dataset.prefetch(AUTOTUNE)


def first_unreadable_image(paths) -> tuple[str, str] | None:
    """The first photo of `paths` that does not decode, and why; None when all do. A header
    claiming more than MAX_IMAGE_SIDE a side is named without decoding the image."""
    for path in paths:
        try:
            data = tf.io.read_file(str(path))
            width, height = (int(v) for v in tf.io.extract_jpeg_shape(data)[1::-1])
            if max(width, height) > MAX_IMAGE_SIDE:
                return str(path), f"claims {width} x {height} px, more than {MAX_IMAGE_SIDE} px a side"
            tf.io.decode_jpeg(data, channels=3)
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as err:
            return str(path), err.message.splitlines()[0]
    return None
