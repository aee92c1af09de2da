import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from pipeline.data import records, synthetic
from pipeline.formats.records import records_of
from tests.conftest import REPO


def test_count_from_name_reads_kaggles_names():
    assert records.count_from_name("gs://b/tfrecords-jpeg-192x192/train/00-192x192-798.tfrec") == 798
    assert records.count_from_name("/x/15-512x512-783.tfrec") == 783
    assert records.count_from_name("/x/shard-a.tfrec") is None
    assert records.count_from_name("/x/train.tfrec") is None


def _write(path, spec, n, labeled=True, size=32):
    rng = np.random.default_rng(0)
    jpeg = synthetic.encode_jpeg(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))
    recs = [
        records.serialize_example(records_of(spec).schema, jpeg, f"id{i:03d}", i % 7 if labeled else None)
        for i in range(n)
    ]
    records.write_shard(str(path), recs)


def test_count_images_uses_names_and_falls_back_to_reading(tmp_path, spec):
    named, unnamed = tmp_path / "00-32x32-5.tfrec", tmp_path / "unnamed.tfrec"
    _write(named, spec, 5)
    _write(unnamed, spec, 3)
    assert records.count_records(str(unnamed)) == 3
    assert records.count_images([str(named), str(unnamed)]) == 8
    assert not list(tmp_path.glob("*.partial"))  # writes are atomic


def test_shards_read_in_one_pass_give_each_its_own_count_and_ids_in_shard_order(tmp_path, spec):
    paths = [str(tmp_path / f"{name}.tfrec") for name in ("b", "empty", "a")]
    for path, n in zip(paths, (3, 0, 2), strict=True):
        _write(path, spec, n)
    assert records.count_records_each(paths) == [3, 0, 2] and records.count_records_each([]) == []
    ids, labels = records.ids_and_labels(paths, records_of(spec).schema)
    assert ids.tolist() == ["id000", "id001", "id002", "id000", "id001"]
    assert labels.tolist() == [0, 1, 2, 0, 1]
    empty = records.ids_and_labels([], records_of(spec).schema)
    assert empty[0].shape == empty[1].shape == (0,)


@pytest.mark.parametrize("size", [32, 33])
def test_read_record_gives_static_shapes_for_labeled_and_unlabeled(tmp_path, spec, size):
    _write(tmp_path / "l.tfrec", spec, 4, labeled=True, size=size)
    _write(tmp_path / "u.tfrec", spec, 4, labeled=False, size=size)
    labeled = tf.data.TFRecordDataset(str(tmp_path / "l.tfrec")).map(
        lambda r: records.read_record(r, records_of(spec).schema, size, labeled=True)
    )
    unlabeled = tf.data.TFRecordDataset(str(tmp_path / "u.tfrec")).map(
        lambda r: records.read_record(r, records_of(spec).schema, size, labeled=False)
    )
    assert labeled.element_spec[0].shape == (size, size, 3)  # static, as TPUs need
    assert labeled.element_spec[0].dtype == tf.uint8
    assert [int(label) for _, label in labeled] == [0, 1, 2, 3]
    assert [i.numpy().decode() for _, i in unlabeled] == ["id000", "id001", "id002", "id003"]


def test_test_records_have_no_class(tmp_path, spec):
    _write(tmp_path / "u.tfrec", spec, 1, labeled=False)
    serialized = next(iter(tf.data.TFRecordDataset(str(tmp_path / "u.tfrec")))).numpy()
    assert set(tf.train.Example.FromString(serialized).features.feature) == {"image", "id"}


@pytest.mark.slow
@pytest.mark.heavy  # three fresh processes; the fetch fingerprint tests cover one process's bytes
def test_a_record_serializes_to_the_same_bytes_in_every_process(spec):
    """The data fingerprint hashes shard bytes: drawing the embedded dataset again must match."""
    code = (
        "import sys; from competition import load_spec; from pipeline.data import records; "
        "from pipeline.formats.records import records_of; "
        "schema = records_of(load_spec('flowers')).schema; "
        "sys.stdout.write(records.serialize_example(schema, b'jpeg', 'abc', 7).hex())"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", code]
    outputs = {
        subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
        for _ in range(2)  # two fresh processes, and this one
    }
    assert outputs == {records.serialize_example(records_of(spec).schema, b"jpeg", "abc", 7).hex()}
