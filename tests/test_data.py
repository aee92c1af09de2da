"""The tf.data pipeline on the tiny dataset: static shapes, determinism, ids, bad records."""

from __future__ import annotations

import faulthandler
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeline.core.errors import PetalsError
from pipeline.data import datasets, records
from pipeline.formats.records import records_of
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY_SIZE


@pytest.fixture(autouse=True)
def _never_hang():
    """A read that hangs fails the test (with a traceback) instead of stalling the suite."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _config(*overrides: str):
    """The defaults at the tiny size, augmentation placed on the device (as the trainer resolves it)."""
    return load_config(overrides=[f"data.image_size={TINY_SIZE}", "augment.where=device", *overrides])


def _files(root, spec, split):
    return datasets.shard_files(str(root), spec, TINY_SIZE, split)


def test_global_batch_is_per_replica_times_replicas():
    assert datasets.global_batch_size(16, 8) == 128
    with pytest.raises(PetalsError, match="must be positive"):
        datasets.global_batch_size(0, 8)


def test_missing_resolution_says_what_the_data_has(tiny_dataset, spec):
    expected = r"no tfrecords-jpeg-512x512/train shards \(resolutions present: \[32\]\)"
    with pytest.raises(PetalsError, match=expected):
        datasets.shard_files(str(tiny_dataset), spec, 512, "train")


@pytest.mark.parametrize("where", ["device", "host"])
def test_train_batches_have_static_shapes_and_labels_in_range(tiny_dataset, spec, where):
    batch = datasets.global_batch_size(4, 2)
    dataset = datasets.train_dataset(
        _files(tiny_dataset, spec, "train"), spec, _config(f"augment.where={where}"), batch
    )
    images_spec, labels_spec = dataset.element_spec
    assert images_spec.shape == (batch, TINY_SIZE, TINY_SIZE, 3)  # static, batch dimension included
    assert images_spec.dtype == (tf.uint8 if where == "device" else tf.float32)
    assert labels_spec.shape == (batch,) and labels_spec.dtype == tf.int32
    for images, labels in dataset.take(5):
        assert labels.numpy().min() >= 0 and labels.numpy().max() < spec.num_classes
        assert float(tf.reduce_min(images)) >= 0.0 and float(tf.reduce_max(images)) <= 255.0


def test_host_mixing_gives_soft_labels(tiny_dataset, spec):
    config = _config("augment.where=host", "augment.cutmix=0.5", "augment.mixup=0.5")
    _, labels = next(iter(datasets.train_dataset(_files(tiny_dataset, spec, "train"), spec, config, 8)))
    assert labels.shape == (8, spec.num_classes)
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, atol=1e-5)


def test_training_resolution_can_differ_from_the_records(tiny_dataset, spec):
    config = _config("data.input_size=24", "augment.where=host")
    images, _ = next(iter(datasets.train_dataset(_files(tiny_dataset, spec, "train"), spec, config, 4)))
    assert images.shape == (4, 24, 24, 3)


def test_input_pipelines_read_disjoint_shards_that_cover_the_split(tiny_dataset, spec):
    files = _files(tiny_dataset, spec, "train")
    contexts = [tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=i) for i in range(3)]
    shares = [datasets.files_for_pipeline(files, c) for c in contexts]
    assert sorted(f for share in shares for f in share) == sorted(files)
    assert all(len(share) in (5, 6) for share in shares)
    dataset = datasets.train_dataset(files, spec, _config(), 4, input_context=contexts[1])
    assert dataset.element_spec[0].shape[0] == 4  # a per-replica batch
    with pytest.raises(PetalsError, match="16 shards cannot feed 32 input pipelines"):
        datasets.files_for_pipeline(
            files, tf.distribute.InputContext(num_input_pipelines=32, input_pipeline_id=20)
        )


def _all(dataset):
    batches = list(dataset.as_numpy_iterator())
    return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])


def test_validation_is_deterministic_and_complete(tiny_dataset, spec):
    files = _files(tiny_dataset, spec, "val")
    first = _all(datasets.eval_dataset(files, spec, _config(), 16, labeled=True))
    second = _all(datasets.eval_dataset(files, spec, _config(), 16, labeled=True))
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert len(first[1]) == records.count_images(files)


def test_test_ids_stay_with_their_images_in_a_fixed_order(tiny_dataset, spec):
    files = _files(tiny_dataset, spec, "test")
    images, ids = _all(datasets.eval_dataset(files, spec, _config(), 16, labeled=False))
    _, ids_again = _all(datasets.eval_dataset(files, spec, _config(), 16, labeled=False))
    assert ids.tolist() == ids_again.tolist()
    # The reference: every record decoded on its own, straight from the shards.
    reference = {}
    for serialized in tf.data.TFRecordDataset(files):
        image, image_id = records.read_record(serialized, records_of(spec).schema, TINY_SIZE, labeled=False)
        reference[image_id.numpy()] = image.numpy()
    assert sorted(ids.tolist()) == sorted(reference) and len(set(ids.tolist())) == len(ids)
    for image, image_id in zip(images, ids, strict=True):
        np.testing.assert_array_equal(image, reference[image_id])


@pytest.mark.parametrize("labeled", [True, False])
def test_padding_makes_every_batch_full_and_is_marked(tiny_dataset, spec, labeled):
    files = _files(tiny_dataset, spec, "val" if labeled else "test")
    dataset = datasets.eval_dataset(files, spec, _config(), 32, labeled=labeled, pad_to_batch=True)
    assert dataset.element_spec[0].shape[0] == 32
    tags = np.concatenate([tags for _, tags in dataset.as_numpy_iterator()])
    real = ~datasets.is_padding(tf.constant(tags)).numpy()
    assert len(tags) % 32 == 0 and real.sum() == records.count_images(files)
    assert real[: real.sum()].all()  # padding only at the end


def test_class_counts_are_the_labels_of_every_record(tiny_dataset, spec):
    files = _files(tiny_dataset, spec, "train")
    labels = [int(label) for _, label in datasets.read_examples(files, spec, TINY_SIZE, True, True)]
    counts = datasets.class_counts(files, spec, TINY_SIZE)
    assert counts.shape == (spec.num_classes,) and counts.sum() == records.count_images(files)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=spec.num_classes))


def test_a_label_outside_the_classes_is_named_with_its_shard(tiny_copy, spec):
    files = _files(tiny_copy, spec, "train")
    victim = files[2]
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(victim)]
    example = tf.train.Example.FromString(serialized[0])
    example.features.feature[records_of(spec).schema.label].int64_list.value[0] = spec.num_classes
    records.write_shard(victim, [example.SerializeToString(), *serialized[1:]])
    with pytest.raises(PetalsError, match=f"^{victim}: label 104 is not a class \\(0..103\\)$"):
        datasets.class_counts(files, spec, TINY_SIZE)


def test_counting_classes_names_a_truncated_shard_or_skips_it(tiny_copy, spec):
    files = _files(tiny_copy, spec, "train")
    whole = datasets.class_counts(files, spec, TINY_SIZE)
    content = Path(files[5]).read_bytes()
    Path(files[5]).write_bytes(content[: len(content) * 2 // 3])
    with pytest.raises(PetalsError, match=f"^{files[5]}: .*truncated after .*skip_bad_records"):
        datasets.class_counts(files, spec, TINY_SIZE)
    assert datasets.class_counts(files, spec, TINY_SIZE, skip_bad=True).sum() < whole.sum()


# ----------------------------------------------------------------------------- bad records


def _rewrite_with_corrupt_jpeg(path, spec, index):
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    example = tf.train.Example.FromString(serialized[index])
    jpeg = example.features.feature[records_of(spec).schema.image].bytes_list.value[0]
    example.features.feature[records_of(spec).schema.image].bytes_list.value[0] = jpeg[: len(jpeg) // 3]
    serialized[index] = example.SerializeToString()
    records.write_shard(str(path), serialized)


def _truncate(path):
    content = path.read_bytes()
    path.write_bytes(content[: len(content) * 2 // 3])


def _drain(dataset):
    return sum(int(images.shape[0]) for images, _ in dataset)


@pytest.mark.parametrize("damage", ["jpeg", "truncated"])
def test_a_bad_record_fails_naming_the_shard(tiny_copy, spec, damage):
    files = _files(tiny_copy, spec, "val")
    victim = tiny_copy / files[3].split(str(tiny_copy) + "/")[1]
    _rewrite_with_corrupt_jpeg(victim, spec, 1) if damage == "jpeg" else _truncate(victim)
    dataset = datasets.eval_dataset(files, spec, _config(), 16, labeled=True)
    with (
        pytest.raises(PetalsError) as caught,
        datasets.naming_bad_records(files, spec, TINY_SIZE, labeled=True),
    ):
        _drain(dataset)
    message = str(caught.value)
    assert message.startswith(str(victim)) and "skip_bad_records" in message and "\n" not in message
    assert ("first record 1 (" in message) if damage == "jpeg" else ("truncated after" in message)


@pytest.mark.parametrize("damage", ["jpeg", "truncated"])
@pytest.mark.slow  # rewrites and reads whole shards
def test_skipping_bad_records_reports_them_per_file(tiny_copy, spec, damage):
    files = _files(tiny_copy, spec, "val")
    victim = tiny_copy / files[5].split(str(tiny_copy) + "/")[1]
    _rewrite_with_corrupt_jpeg(victim, spec, 0) if damage == "jpeg" else _truncate(victim)
    config = _config("data.skip_bad_records=true")
    read = _drain(datasets.eval_dataset(files, spec, config, 16, labeled=True))
    reports = datasets.scan_shards(files, spec, TINY_SIZE, labeled=True)
    assert [r.path for r in reports] == [str(victim)]
    assert read == records.count_images(files) - reports[0].skipped
    assert reports[0].skipped == 1 if damage == "jpeg" else reports[0].skipped > 0
    summary = datasets.skipped_summary(reports)
    assert summary[0].startswith(f"skipped {reports[0].skipped} unreadable record(s) in 1 shard(s)")
    # Training keeps going past the bad records, epoch after epoch.
    train = datasets.train_dataset(files, spec, config, 8)
    assert sum(1 for _ in train.take(3 * read // 8)) == 3 * read // 8
