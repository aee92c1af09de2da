import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from pipeline.data import records, synthetic
from pipeline.data.layout import fingerprint, verify_layout
from pipeline.formats.records import records_of
from tests.conftest import TINY_SCALE, TINY_SIZE


def test_class_traits_are_deterministic_distinct_and_related():
    traits = synthetic.class_traits(104, seed=0)
    assert traits == synthetic.class_traits(104, seed=0)
    assert traits != synthetic.class_traits(104, seed=1)
    assert len(set(traits)) == 104
    # Fine-grained: many classes share petal count and shape with another class.
    looks = [(t.petals, t.shape, t.layers) for t in traits]
    assert sum(looks.count(look) > 1 for look in looks) >= 52


@pytest.mark.parametrize("size", [32, 192, 331])
def test_render_is_deterministic_at_any_size(size):
    traits = synthetic.class_traits(104, seed=0)
    a = synthetic.render_image(traits[5], np.random.default_rng(1), size)
    b = synthetic.render_image(traits[5], np.random.default_rng(1), size)
    c = synthetic.render_image(traits[5], np.random.default_rng(2), size)
    assert a.shape == (size, size, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.std() > 10  # a picture, not a flat colour


def test_split_plans_have_unique_ids_and_cover_every_class():
    plans = [
        synthetic.plan_split(s, i, 104, seed=0, scale=1.0) for i, s in enumerate(["train", "val", "test"])
    ]
    ids = [i for p in plans for i in p.ids]
    assert len(ids) == len(set(ids))
    assert all(len(i) == 9 for i in ids)
    for plan in plans:
        assert set(plan.labels) == set(range(104))
    train_counts = np.bincount(plans[0].labels)
    assert train_counts.max() >= 3 * train_counts.min()  # long-tailed, like the real data


@pytest.mark.slow  # draws a dataset
def test_dataset_has_kaggles_layout(tiny_dataset, spec):
    counts = verify_layout(str(tiny_dataset), spec)
    assert set(counts) == {TINY_SIZE}
    for split in spec.splits:
        shards = records.list_shards(str(tiny_dataset), spec, TINY_SIZE, split)
        assert len(shards) == records_of(spec).shards_per_split
        assert counts[TINY_SIZE][split]["images"] == sum(records.count_from_name(p) for p in shards)
    sample = pd.read_csv(tiny_dataset / spec.sample_submission, dtype=str)
    test_ids = [
        i.numpy().decode()
        for path in records.list_shards(str(tiny_dataset), spec, TINY_SIZE, "test")
        for _, i in tf.data.TFRecordDataset(path).map(
            lambda r: records.read_record(r, records_of(spec).schema, TINY_SIZE, labeled=False)
        )
    ]
    assert list(sample.columns) == ["id", "label"]
    assert sorted(sample["id"]) == sorted(test_ids)


@pytest.mark.slow  # draws the data twice
def test_output_does_not_depend_on_the_number_of_workers(tiny_dataset, tmp_path, spec, monkeypatch):
    """The session's tiny dataset is drawn in the test's process (too little drawing for a pool);
    drawn again by two worker processes, it is the same bytes."""
    again = tmp_path / "again"
    monkeypatch.setattr(synthetic, "POOL_FROM_SECONDS", 0.0)
    synthetic.write_dataset(again, spec, size=TINY_SIZE, seed=0, scale=TINY_SCALE, workers=2, progress=False)
    sizes = [TINY_SIZE]
    assert fingerprint(str(again), spec, sizes) == fingerprint(str(tiny_dataset), spec, sizes)


@pytest.mark.parametrize(("size", "scale", "message"), [(8, 1.0, "too small"), (32, 0.0, "scale")])
def test_bad_parameters_are_refused(tmp_path, spec, size, scale, message):
    with pytest.raises(ValueError, match=message):
        synthetic.write_dataset(tmp_path / "d", spec, size=size, scale=scale, progress=False)
    assert not (tmp_path / "d").exists()
