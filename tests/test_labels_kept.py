"""Examples keep their labels through every shuffle, cache and batch the input pipeline does.

Each example's pixels (or text) encode its own label, and the label is the example's index:
a pipeline that moved labels and inputs apart (the bug of b74c707, where cached image-folder
batches carried a permuted list of labels) fails here, whatever the order it draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from competition import load_spec
from pipeline.data import datasets, file_examples, readers, records, synthetic
from pipeline.formats.records import records_of
from pipeline.tasks.recipe_config import load_config

EXAMPLES = 40
STEP = 6  # grey level per index: 0, 6, ..., 234; JPEG keeps a flat grey within 1-2 levels


def _grey(index: int, size: int) -> np.ndarray:
    return np.full((size, size, 3), STEP * index, np.uint8)


def _decoded_index(images: np.ndarray) -> np.ndarray:
    """Each image's index, read back from its mean grey level."""
    return np.rint(images.reshape(len(images), -1).mean(axis=1) / STEP).astype(int)


@pytest.fixture(scope="module")
def photo_examples(tmp_path_factory) -> file_examples.Examples:
    """An image folder's split whose label is each photo's index, its grey level saying which."""
    folder = tmp_path_factory.mktemp("photos")
    paths = []
    for index in range(EXAMPLES):
        path = folder / f"{index}.jpg"
        path.write_bytes(synthetic.encode_jpeg(_grey(index, 24 + index % 5)))  # sizes vary, as photos do
        paths.append(str(path))
    return file_examples.Examples(
        ids=np.array([str(i) for i in range(EXAMPLES)]),
        inputs=(np.array(paths),),
        labels=np.arange(EXAMPLES, dtype=np.int64),
    )


@pytest.mark.parametrize("cache", [False, True])
def test_shuffled_photo_batches_keep_each_photo_with_its_own_label(photo_examples, cache):
    batches = file_examples.file_dataset(
        photo_examples, 8, training=True, image_size=16, cache=cache, shuffle_buffer=16, seed=3
    )
    seen = []
    for images, labels in batches.take(12):  # more than two passes over the examples
        assert _decoded_index(images.numpy()).tolist() == labels.numpy().tolist()
        seen += labels.numpy().tolist()
    assert seen[:EXAMPLES] != sorted(seen[:EXAMPLES])  # shuffled, so the check above meant something


@pytest.mark.parametrize("cache", [False, True])
def test_eval_photo_batches_keep_labels_and_ids_in_order(photo_examples, cache):
    batches = file_examples.file_dataset(
        photo_examples, 16, training=False, image_size=16, cache=cache, pad_to_batch=True, with_ids=True
    )
    images, labels, ids = (np.concatenate([b[k].numpy() for b in batches]) for k in range(3))
    real = labels != datasets.PAD_LABEL
    assert _decoded_index(images[real]).tolist() == labels[real].tolist() == list(range(EXAMPLES))
    assert [i.decode() for i in ids[real]] == photo_examples.ids.tolist()


def test_a_competitions_augmented_training_batches_keep_labels(photo_examples):
    """Through `FileSplit` as train reads it: the cnn recipe caches decoded photos, flips on the host."""
    config = load_config(
        "cnn", ["competition=dogs-vs-cats", "data.image_size=16", "augment.brightness=0",
                "augment.contrast=0", "augment.saturation=0", "augment.rotation=0", "augment.zoom=0",
                "augment.shift=0", "data.shuffle_buffer=8"],
    )  # fmt: skip
    spec = load_spec("dogs-vs-cats")
    assert config.data.cache  # the recipe caches: the path the bug was on
    split = readers.FileSplit(photo_examples, spec)
    for images, labels in split.train_dataset(config, 8).take(10):
        assert _decoded_index(images.numpy()).tolist() == labels.numpy().tolist()


@pytest.mark.parametrize("cache", [False, True])
def test_shuffled_texts_keep_their_labels_after_encoding(cache):
    texts = np.array([f"review {i}" for i in range(EXAMPLES)])
    examples = file_examples.Examples(
        ids=np.array([f"id{i}" for i in range(EXAMPLES)]), inputs=(texts,), labels=np.arange(EXAMPLES)
    )

    def encode(columns):  # a tokenizer whose first id is the text's number
        return np.array([[int(text.split()[1]), 7] for text in columns[0]], np.int32)

    batches = file_examples.file_dataset(examples, 8, training=True, encode=encode, cache=cache, seed=1)
    for tokens, labels in batches.take(10):
        assert tokens.numpy()[:, 0].tolist() == labels.numpy().tolist()


@pytest.mark.parametrize("cache", [False, True])
def test_shuffled_record_batches_keep_each_image_with_its_own_label(tmp_path, cache):
    spec = load_spec("flowers")
    shards = []
    for shard in range(4):  # labels 0..39 over four shards, as interleaved reads mix them
        rows = range(shard, EXAMPLES, 4)
        path = tmp_path / f"{shard:02d}-16x16-{len(rows)}.tfrec"
        records.write_shard(
            str(path),
            [
                records.serialize_example(
                    records_of(spec).schema, synthetic.encode_jpeg(_grey(i, 16)), f"{i:09x}", i
                )
                for i in rows
            ],
        )
        shards.append(str(path))
    config = load_config(
        overrides=["data.image_size=16", "augment.where=device", f"data.cache={str(cache).lower()}",
                   "data.shuffle_buffer=16"],
    )  # fmt: skip
    seen = set()
    for images, labels in datasets.train_dataset(shards, spec, config, 8).take(10):
        assert _decoded_index(images.numpy()).tolist() == labels.numpy().tolist()
        seen |= set(labels.numpy().tolist())
    assert len(seen) > 30
    images, labels = (
        np.concatenate([b[k].numpy() for b in datasets.eval_dataset(shards, spec, config, 8, labeled=True)])
        for k in range(2)
    )
    assert _decoded_index(images).tolist() == labels.tolist()


def test_the_jpeg_round_trip_reads_every_index_back():
    """The grey levels survive JPEG exactly enough for the checks above to mean what they say."""
    decoded = np.stack(
        [tf.io.decode_jpeg(synthetic.encode_jpeg(_grey(i, 16))).numpy() for i in range(EXAMPLES)]
    )
    assert _decoded_index(decoded).tolist() == list(range(EXAMPLES))
