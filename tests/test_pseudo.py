"""Pseudo-labels from a CV group: a student fold takes only its teacher's same fold's confident test
predictions, a teacher on other folds or without test predictions is refused, and no pseudo or
training example of a fold is one of its held-out examples, while its val part stays exactly the
fold table's. Teacher groups are faked on disk (group.json and each fold run's test predictions)."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.core.options import FetchOptions
from pipeline.core.rundir import RunDir
from pipeline.cv import pseudo
from pipeline.data import datasets, file_examples, splits
from pipeline.data.manifest import locate_data, read_manifest
from pipeline.modeling.inference import Predictions
from pipeline.stages.fetch import fetch
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY

TEACHER = "cv2-teacher"


def fold_config(fold: int = 0, *more: str, competition: str = "flowers"):
    return load_config(
        overrides=[
            *TINY,
            "augment.where=host",
            f"competition={competition}",
            "train.folds=2",
            f"train.fold={fold}",
            f"train.pseudo_labels={TEACHER}",
            *more,
        ]
    )


def teacher_probabilities(fold: int, count: int, classes: int) -> np.ndarray:
    """Fold `fold`'s teacher: every even example sure (0.95) of class (fold + row) % classes, every
    odd one unsure (uniform), so which fold's predictions a student took shows in its labels."""
    probabilities = np.full((count, classes), 1.0 / classes, np.float32)
    sure = np.arange(0, count, 2)
    probabilities[sure] = 0.05 / (classes - 1)
    probabilities[sure, (fold + sure) % classes] = 0.95
    return probabilities


def fake_teacher(runs_dir, table, data_dir, test_ids, classes: int, predicted=(0, 1)) -> dict:
    """A finished CV group on `table`'s folds whose fold runs predicted `test_ids` (those in `predicted`)."""
    group = RunDir(runs_dir / TEACHER)
    group.path.mkdir(parents=True)
    runs = {str(fold): f"teacher-fold{fold}" for fold in range(table.k)}
    described = {"kind": "cv", "folds": table.k, "fold_seed": table.seed, "fold_table": table.digest}
    group.write_json(RunDir.GROUP, {**described, "fold_runs": runs})
    group.write_json(RunDir.METRICS, {"kind": "cv", "cv_score": 0.5})
    source = json.dumps({"weights": "0" * 16, "data": read_manifest(data_dir)["fingerprint"], "tta": 1})
    for fold in range(table.k):
        run = RunDir(runs_dir / runs[str(fold)])
        run.path.mkdir(parents=True)
        run.write_json(RunDir.RUN_INFO, {"fold_table": table.digest})  # what train records of a fold
    for fold in predicted:
        probabilities = teacher_probabilities(fold, len(test_ids), classes)
        run = RunDir(runs_dir / runs[str(fold)])
        Predictions(np.asarray(test_ids), probabilities, source=source).save(run.predictions("test"))
    return runs


def ids_of_test_records(data_dir, spec, config) -> list[str]:
    files = datasets.shard_files(locate_data(data_dir), spec, config.data.image_size, "test")
    read = datasets.read_examples(files, spec, config.data.image_size, labeled=False, ordered=True)
    return [key.decode() for _, key in read.as_numpy_iterator()]


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


@pytest.fixture
def teacher(data_dir, spec, tmp_path):
    """(runs dir, test ids, table, fold runs) of a teacher group on the tiny data's 2 folds."""
    table = splits.fold_table(data_dir, spec, fold_config())
    ids = ids_of_test_records(data_dir, spec, fold_config())
    runs = fake_teacher(tmp_path / "runs", table, data_dir, ids, spec.num_classes)
    return tmp_path / "runs", ids, table, runs


def labels_of(data_dir, config, table, runs_dir) -> pseudo.PseudoLabels:
    return pseudo.for_fold(
        runs_dir, config, table, read_manifest(data_dir), len(table.kept(config.train.fold))
    )


def test_select_keeps_the_confident_the_most_confident_first_within_the_limit():
    probabilities = np.array([[0.95, 0.05], [0.5, 0.5], [0.1, 0.9], [0.02, 0.98], [0.97, 0.03]], np.float32)
    predictions = Predictions(np.array(["e", "d", "c", "b", "a"]), probabilities)
    chosen = pseudo.select(predictions, 0.9, limit=10, teacher="t")
    assert chosen.ids.tolist() == ["a", "b", "c", "e"]  # id order; 0.5 is not at least 0.9
    assert chosen.labels.tolist() == [0, 1, 1, 0]
    assert np.allclose(chosen.confidence, [0.97, 0.98, 0.9, 0.95])
    assert pseudo.select(predictions, 0.9, limit=2, teacher="t").ids.tolist() == ["a", "b"]  # 0.98, 0.97


@pytest.mark.slow  # reads a fold table from the tiny data
def test_a_student_fold_takes_its_teachers_same_fold(data_dir, spec, teacher):
    runs_dir, ids, table, runs = teacher
    for fold in range(2):
        chosen = labels_of(data_dir, fold_config(fold), table, runs_dir)
        row = {key: i for i, key in enumerate(ids)}
        expected = sorted(key for i, key in enumerate(ids) if i % 2 == 0)
        assert chosen.ids.tolist() == expected and chosen.teacher == runs[str(fold)]
        assert [label for label in chosen.labels] == [
            (fold + row[key]) % spec.num_classes for key in chosen.ids
        ]


@pytest.mark.slow  # reads a fold table from the tiny data
def test_a_teacher_on_another_fold_table_is_refused(data_dir, spec, teacher):
    runs_dir, _, _, _ = teacher
    config = fold_config(0, "train.fold_seed=1")
    other = splits.fold_table(data_dir, spec, config)
    with pytest.raises(PetalsError, match=r"fold table .* is not this run's"):
        labels_of(data_dir, config, other, runs_dir)


def test_a_teacher_fold_without_test_predictions_is_refused(data_dir, spec, tmp_path):
    table = splits.fold_table(data_dir, spec, fold_config())
    fake_teacher(tmp_path / "runs", table, data_dir, ["t1", "t2"], spec.num_classes, predicted=(0,))
    assert len(labels_of(data_dir, fold_config(0), table, tmp_path / "runs")) == 1
    with pytest.raises(PetalsError, match=f"run `make predict FOLDS=2` for {TEACHER} first"):
        labels_of(data_dir, fold_config(1), table, tmp_path / "runs")
    with pytest.raises(PetalsError, match="no CV group"):
        labels_of(data_dir, fold_config(1, "train.pseudo_labels=cv2-absent"), table, tmp_path / "runs")


def test_a_pseudo_id_that_is_a_labelled_id_is_refused(data_dir, spec, tmp_path):
    table = splits.fold_table(data_dir, spec, fold_config())
    fake_teacher(tmp_path / "runs", table, data_dir, [table.ids[0], "t2", "t3"], spec.num_classes)
    with pytest.raises(PetalsError, match="is a labelled example's id"):
        labels_of(data_dir, fold_config(0), table, tmp_path / "runs")


def test_pseudo_labels_need_folds_and_sane_knobs():
    with pytest.raises(PetalsError, match=r"needs train\.folds"):
        load_config(overrides=[*TINY, f"train.pseudo_labels={TEACHER}"])
    with pytest.raises(PetalsError, match="pseudo_threshold"):
        fold_config(0, "train.pseudo_threshold=1.5")
    with pytest.raises(PetalsError, match="pseudo_max_share"):
        fold_config(0, "train.pseudo_max_share=0")


def image_key(image: np.ndarray) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()


@pytest.mark.slow  # reads the tiny data through tf.data
def test_the_training_reader_yields_the_pseudo_records_with_their_labels_and_no_held_out_one(
    data_dir, spec, teacher
):
    runs_dir, _, table, _ = teacher
    root = locate_data(data_dir)
    for fold in range(2):
        config = fold_config(fold, "train.pseudo_max_share=0.25")
        plain_train, plain_val = splits.train_and_val(root, spec, config, table)
        chosen = labels_of(data_dir, config, table, runs_dir)
        assert len(chosen) == int(0.25 * len(table.kept(fold)))  # the share caps them
        train = pseudo.attached(plain_train, chosen, root, spec, config)
        held = set(table.ids[table.held_out(fold)])
        assert plain_val.only.tolist() == table.ids[table.held_out(fold)].tolist()  # val untouched
        assert not held & set(chosen.ids) and not held & set(train.only)
        assert train.count == len(table.kept(fold)) + len(chosen)
        assert train.class_counts(config).sum() == train.count
        # Which example each image is: the labelled records and the test ones, by their pixels.
        size = config.data.image_size
        every = datasets.read_examples(
            plain_train.files, spec, size, labeled=True, ordered=True, with_ids=True
        )
        whose = {
            image_key(image): (key.decode(), int(label)) for image, label, key in every.as_numpy_iterator()
        }
        files = datasets.shard_files(root, spec, size, "test")
        tests = datasets.read_examples(files, spec, size, labeled=False, ordered=True)
        whose.update({image_key(image): (key.decode(), None) for image, key in tests.as_numpy_iterator()})
        labelled = datasets.read_examples(
            train.files, spec, size, labeled=True, ordered=False, only=train.only
        )
        stream = train.pseudo.mixed_into(labelled.repeat(), config, len(train.only))
        seen = [
            (whose[image_key(image)], int(label))
            for image, label in stream.take(3 * train.count).as_numpy_iterator()
        ]
        given = dict(zip(chosen.ids, chosen.labels, strict=True))
        pseudo_seen = {key: label for (key, truth), label in seen if truth is None}
        assert set(pseudo_seen) == set(chosen.ids)  # every pseudo example, and no other test one
        assert all(given[key] == label for key, label in pseudo_seen.items())
        assert not held & {key for (key, _), _ in seen}
        on_device = fold_config(fold, "augment.where=device")  # no host augmentation to compile
        images, labels = next(iter(train.train_dataset(on_device, 8)))  # the real training pipeline runs
        assert images.shape[0] == 8 and labels.shape[0] == 8


@pytest.mark.slow  # it trains
def test_the_train_stage_trains_on_them_and_writes_them_down(data_dir, spec, teacher, cpu):
    from pipeline.stages import train as train_stage

    runs_dir, _, table, runs = teacher
    config = fold_config(1, "train.epochs=1", "train.steps_per_epoch=2")
    job = train_stage.prepare(config, cpu, data_dir, runs_dir, None, None)
    assert job.val.only.tolist() == table.ids[table.held_out(1)].tolist()
    assert job.train.count == len(table.kept(1)) + len(job.pseudo)
    train_stage.fit(job, progress=False)
    written = pd.read_csv(job.run.file(RunDir.PSEUDO_LABELS), dtype={"id": str})
    assert written["id"].tolist() == job.pseudo.ids.tolist()
    assert written["label"].tolist() == job.pseudo.labels.tolist()
    assert (written["confidence"] >= 0.9).all() and set(written["teacher"]) == {runs["1"]}


@pytest.fixture(scope="module")
def cats(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("cats") / "data"
    fetch(
        FetchOptions(source="synthetic", data_dir=data_dir, scale=0.2, progress=False),
        load_spec("dogs-vs-cats"),
    )
    return data_dir


@pytest.mark.thorough  # pseudo-labels on a file competition: proven on records by the train stage test above
def test_a_file_competitions_fold_trains_on_its_pseudo_examples_and_keeps_its_val(cats, tmp_path):
    spec = load_spec("dogs-vs-cats")
    config = fold_config(0, competition="dogs-vs-cats")
    table = splits.fold_table(cats, spec, config)
    test = file_examples.examples(cats, spec, "test")
    fake_teacher(tmp_path / "runs", table, cats, test.ids.astype(str), spec.num_classes)
    plain_train, val = splits.train_and_val(locate_data(cats), spec, config, table)
    chosen = labels_of(cats, config, table, tmp_path / "runs")
    train = pseudo.attached(plain_train, chosen, locate_data(cats), spec, config)
    assert val.examples.ids.tolist() == table.ids[table.held_out(0)].tolist()
    read = train.training_examples
    assert read.ids.tolist() == [*plain_train.examples.ids, *chosen.ids]
    assert read.labels[len(plain_train.examples) :].tolist() == chosen.labels.tolist()
    by_id = dict(zip(test.ids.astype(str), test.inputs[0], strict=True))
    assert read.inputs[0][len(plain_train.examples) :].tolist() == [by_id[i] for i in chosen.ids]
    assert not set(read.ids) & set(val.examples.ids)
    assert train.count == len(read) and train.class_counts(config).sum() == len(read)
    assert train.pseudo_part().count == len(chosen) and train.pseudo_part().pseudo is None


@pytest.mark.thorough  # pseudo-labels on a cached fold: a variant of the test above
def test_a_cached_fold_appends_its_pseudo_rows_from_its_own_folder_and_keeps_the_pooled_cache(
    data_dir, spec, teacher, cpu
):
    from pipeline.modeling import features, network_cut
    from pipeline.networks import registry
    from tests.conftest import TINY_SIZE

    runs_dir, _, table, _ = teacher
    cached = ["train.feature_cache=true", "train.unfrozen_layers=4", "train.feature_views=2"]
    config = fold_config(1, *cached)
    root = locate_data(data_dir)
    plain_train, val = splits.train_and_val(root, spec, config, table)
    chosen = labels_of(data_dir, config, table, runs_dir)
    train = pseudo.attached(plain_train, chosen, root, spec, config)
    cut = network_cut.cut(registry.build_classifier("cnn", TINY_SIZE, spec.num_classes), 4, True)
    run_dir = runs_dir / "student-fold1"
    rows, held = features.cache_splits(cut, train, val, config, run_dir, cpu, "d")
    kept = table.kept(1)
    assert rows.ids.tolist() == [*table.ids[kept], *chosen.ids]
    assert rows.labels.tolist() == [*table.labels[kept], *chosen.labels]
    assert rows.features.shape[:2] == (2, len(kept) + len(chosen)) and rows.count == train.count
    assert held.ids.tolist() == table.ids[table.held_out(1)].tolist()  # val: the held-out fold alone
    assert (run_dir / features.FOLDER / "pseudo.npz").is_file()
    assert (
        len(features.remove_shared(runs_dir, table, config)) == 1
    )  # the pooled cache is the table's, unchanged
