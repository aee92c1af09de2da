"""The fold table and the parts of a fold: what guards every path a validation example could take
into training. Folds are disjoint, cover every labelled example once, are the same on every call
and from the stored file, and a fold's training reads (the tf.data records, the examples) hold none
of its held-out ids."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.core.options import FetchOptions
from pipeline.data import datasets, file_examples, folds, splits
from pipeline.data.manifest import locate_data
from pipeline.stages.fetch import fetch
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY


def fold_config(k: int = 2, fold: int = 0, *more: str, competition: str = "flowers"):
    return load_config(
        overrides=[
            *TINY,
            "augment.where=host",
            f"competition={competition}",
            f"train.folds={k}",
            f"train.fold={fold}",
            *more,
        ]
    )


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    """The tiny fetched data, copied: the fold table is written beside it."""
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


@pytest.fixture(scope="module")
def cats(tmp_path_factory):
    """Dogs vs. Cats' embedded photos at a twentieth (50 train): the folds are of ids, and drawing
    costs about 20 ms a photo."""
    data_dir = tmp_path_factory.mktemp("cats") / "data"
    fetch(
        FetchOptions(source="synthetic", data_dir=data_dir, scale=0.05, progress=False),
        load_spec("dogs-vs-cats"),
    )
    return data_dir


def test_folds_pool_train_and_val_are_disjoint_cover_every_example_once_and_are_stratified(data_dir, spec):
    table = splits.fold_table(data_dir, spec, fold_config())
    ids, _, grouped = folds.labelled(locate_data(data_dir), spec, fold_config())
    assert grouped is None  # flowers name no group
    assert len(table) == len(ids) == 232  # train 128 + val 104: the labelled val is pooled
    assert table.ids.tolist() == sorted(ids.tolist())  # id order
    held = [set(table.ids[table.held_out(k)]) for k in range(2)]
    assert not held[0] & held[1] and held[0] | held[1] == set(ids)
    for label in np.unique(table.labels):  # each class split as evenly as it can be
        counts = np.bincount(table.folds[table.labels == label], minlength=2)
        assert counts.max() - counts.min() <= 1


def test_the_fold_table_is_stored_beside_the_data_and_the_same_on_every_call(data_dir, spec):
    first = splits.fold_table(data_dir, spec, fold_config())
    path = folds.table_path(data_dir, fold_config())
    assert path.is_file() and path.parent == data_dir / "folds"
    stored = pd.read_csv(path, dtype={"id": str})
    assert stored["id"].tolist() == first.ids.tolist() and stored["fold"].tolist() == first.folds.tolist()
    again = splits.fold_table(data_dir, spec, fold_config(2, 1))  # another fold reads the same table
    assert again.digest == first.digest
    path.unlink()  # dealt again from the seed: the same folds
    assert splits.fold_table(data_dir, spec, fold_config()).digest == first.digest
    other_seed = splits.fold_table(data_dir, spec, fold_config(2, 0, "train.fold_seed=1"))
    assert other_seed.digest != first.digest


def test_a_fold_table_of_other_data_is_refused_in_one_line(data_dir, spec):
    path = folds.table_path(data_dir, fold_config())
    splits.fold_table(data_dir, spec, fold_config())
    frame = pd.read_csv(path, dtype={"id": str})
    frame.loc[0, "label"] = (frame.loc[0, "label"] + 1) % spec.num_classes  # one label moved
    frame.to_csv(path, index=False)
    with pytest.raises(PetalsError, match=r"k2-seed0\.csv: a fold table of other data \(232 examples"):
        splits.fold_table(data_dir, spec, fold_config())
    frame.drop(index=0).to_csv(path, index=False)  # an example dropped
    with pytest.raises(PetalsError, match="a fold table of other data"):
        splits.fold_table(data_dir, spec, fold_config())
    path.write_text("id,label,fold\na,0,7\n")  # a fold out of range
    with pytest.raises(PetalsError, match=r"its folds are not 0\.\.1"):
        splits.fold_table(data_dir, spec, fold_config())


def test_impossible_fold_counts_are_refused_in_one_line(data_dir, spec):
    with pytest.raises(PetalsError, match=r"train\.folds=1 \(FOLDS=1\): cross-validation needs at least 2"):
        fold_config(1)
    # the tiny data's smallest class has 2 labelled examples: 3 folds cannot each hold one
    with pytest.raises(
        PetalsError, match=r"train\.folds=3 \(FOLDS=3\): class '.*' has 2 labelled examples.*FOLDS=2"
    ):
        splits.fold_table(data_dir, spec, fold_config(3))
    with pytest.raises(PetalsError, match=r"train\.fold=2: folds are 0\.\.1"):
        fold_config(2, 2)


def test_keeping_the_competitions_val_deals_train_only(data_dir, spec):
    config = fold_config(2, 0, "train.folds_keep_val=true")
    ids, _, _ = folds.labelled(locate_data(data_dir), spec, config)
    assert len(ids) == 128  # train alone: the 104 val images stay out of every fold
    assert folds.table_path(data_dir, config).name == "k2-seed0-trainonly.csv"


def records_read(split, config, training: bool) -> list[str]:
    """The ids a record split's tf.data pipeline really reads (the training reader included)."""
    dataset = datasets.read_examples(
        split.files,
        split.spec,
        config.data.image_size,
        labeled=True,
        ordered=not training,
        with_ids=True,
        only=split.only,
    )
    return [i.decode() for _, _, i in dataset.as_numpy_iterator()]


def test_no_held_out_record_reaches_its_folds_training_reader(data_dir, spec):
    for fold in range(2):
        config = fold_config(2, fold)
        table = splits.fold_table(data_dir, spec, config)
        train, val = splits.train_and_val(locate_data(data_dir), spec, config, table)
        read_train, read_val = records_read(train, config, True), records_read(val, config, False)
        assert sorted(read_val) == sorted(table.ids[table.held_out(fold)])
        assert sorted(read_train) == sorted(table.ids[table.kept(fold)])
        assert not set(read_train) & set(read_val)
        assert train.count == len(read_train) and val.count == len(read_val)
        assert train.class_counts(config).sum() == len(read_train)
        batches = train.train_dataset(config, 8)  # the real training pipeline runs on the part
        images, _ = next(iter(batches))
        assert images.shape[0] == 8


@pytest.mark.slow  # draws and fetches a file competition
def test_a_file_competitions_fold_parts_are_its_examples_by_id(cats):
    spec = load_spec("dogs-vs-cats")
    all_examples = file_examples.examples(cats, spec, "train")
    seen = []
    for fold in range(3):
        config = fold_config(3, fold, competition="dogs-vs-cats")
        table = splits.fold_table(cats, spec, config)
        train, val = splits.train_and_val(locate_data(cats), spec, config, table)
        assert not set(train.examples.ids) & set(val.examples.ids)
        assert len(train.examples) + len(val.examples) == len(all_examples)
        assert val.examples.ids.tolist() == table.ids[table.held_out(fold)].tolist()
        by_id = dict(zip(all_examples.ids, all_examples.inputs[0], strict=True))
        assert [by_id[i] for i in val.examples.ids] == val.examples.inputs[0].tolist()  # inputs follow ids
        seen += val.examples.ids.tolist()
    assert sorted(seen) == sorted(all_examples.ids.tolist())


def test_an_id_given_twice_is_refused(tmp_path):
    ids = np.array(["a", "b", "a"])
    with pytest.raises(PetalsError, match="cross-validation needs one id per example"):
        folds.unique_ids(ids, ["train"], str(tmp_path))


def test_ids_pandas_would_read_as_missing_survive_the_stored_table(tmp_path):
    table = folds.deal(np.array(["NA", "null", "nan", "a", "b", "c"]), np.array([0, 0, 0, 1, 1, 1]), 3, 0)
    path = tmp_path / "folds" / "k3-seed0.csv"
    folds._write(path, table)
    ids, _, dealt = folds.read_table(path, 3)
    assert ids.tolist() == table.ids.tolist() and dealt.tolist() == table.folds.tolist()
