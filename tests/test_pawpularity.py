"""PetFinder.my Pawpularity: one number a photo. The embedded photos in Kaggle's exact layout, the
score read as a number (a bad one named in one line), RMSE, submissions of numbers clipped to
1..100 and checked the Kaggle way, and a learning check: a tiny network on the embedded photos
well under predicting the training mean."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from competition.submission import SubmissionError
from pipeline.core.errors import PetalsError
from pipeline.data import file_examples, splits, targets
from pipeline.data.synthetic_pawpularity import FLAGS
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks import get_task
from pipeline.tasks.competitions import check_submission, load_competition
from pipeline.tasks.recipe_config import recipe_path

SPEC = load_spec("petfinder-pawpularity")
TASK = get_task(SPEC.task)
COLUMNS = ["Id", *FLAGS, "Pawpularity"]  # Kaggle's train.csv, in its order


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """The embedded photos at a tenth of their number: 60 train and 3 test photos."""
    data_dir = tmp_path_factory.mktemp("paw") / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.1, progress=False), SPEC)
    return data_dir


def test_a_code_competition_of_one_number_a_photo_scored_by_rmse():
    assert (SPEC.task, SPEC.format, SPEC.metric.name, SPEC.submission_value) == (
        "image_table_regression", "image_csv", "rmse", "number",
    )  # fmt: skip
    assert SPEC.code_competition and SPEC.default_slug == "petfinder-pawpularity-score"
    assert SPEC.classes == ("Pawpularity",) and SPEC.value_range == (1.0, 100.0)  # no classes.txt
    # The 12 flags are read beside each photo, as drawn.
    assert SPEC.feature_columns == tuple(FLAGS) and len(FLAGS) == 12
    assert (TASK.activation, TASK.numeric_target, TASK.label_rank) == ("standardised", True, 1)
    assert (
        recipe_path("cpu", load_competition(SPEC.name))
        == get_task("image_classification").recipes_dir / "cpu.toml"
    )


def test_the_embedded_data_is_drawn_in_kaggles_exact_layout(tmp_path):
    """As drawn, before fetch keeps what petals reads."""
    from pipeline.data import synthetic_pawpularity

    pets = tmp_path / "drawn"
    assert synthetic_pawpularity.write_dataset(pets, {"train": 8, "test": 3}) == {"train": 8, "test": 3}
    train, test = pd.read_csv(pets / "train.csv"), pd.read_csv(pets / "test.csv")
    assert list(train.columns) == COLUMNS and list(test.columns) == COLUMNS[:-1]
    assert train["Pawpularity"].between(1, 100).all() and train["Id"].str.fullmatch("[0-9a-f]{32}").all()
    assert all((pets / "train" / f"{i}.jpg").is_file() for i in train["Id"])
    assert sorted(p.stem for p in (pets / "test").iterdir()) == sorted(test["Id"])
    sample = pd.read_csv(pets / "sample_submission.csv")
    assert list(sample.columns) == ["Id", "Pawpularity"] and sorted(sample["Id"]) == sorted(test["Id"])


def test_the_score_is_read_as_a_number_and_the_test_ids_drop_the_suffix(pets):
    train = file_examples.examples(pets, SPEC, "train")
    assert train.labels.shape == (60, 1) and train.labels.dtype == np.float32
    by_id = pd.read_csv(pets / "train.csv").set_index("Id")
    assert train.labels[:, 0].tolist() == [float(by_id.loc[i, "Pawpularity"]) for i in train.ids]
    test = file_examples.examples(pets, SPEC, "test")
    ids = pd.read_csv(pets / "sample_submission.csv")["Id"]
    assert test.labels is None and sorted(test.ids) == sorted(ids) and len(ids) == 3
    # Each photo's 12 flags, by id, from train.csv and test.csv: the second input.
    assert train.inputs[1].shape == (60, 12) and train.inputs[1].dtype == np.float32
    assert (train.inputs[1] == by_id.loc[train.ids, list(FLAGS)].to_numpy()).all()
    test_rows = pd.read_csv(pets / "test.csv").set_index("Id")
    assert (test.inputs[1] == test_rows.loc[test.ids, list(FLAGS)].to_numpy()).all()


@pytest.mark.parametrize(("split", "cell"), [("train", "yes"), ("test", ""), ("test", "nan")])
def test_a_flag_that_is_not_a_finite_number_is_named_with_its_file_line_and_column(
    pets, tmp_path, split, cell
):
    copy = tmp_path / "copy"
    shutil.copytree(pets, copy, ignore=shutil.ignore_patterns("manifest.json", "folds"))
    table = pd.read_csv(copy / f"{split}.csv", dtype=str, keep_default_na=False)
    table.loc[1, "Blur"] = cell
    table.to_csv(copy / f"{split}.csv", index=False)
    pattern = (
        rf"{split}\.csv: line 3 \(Id '{table.loc[1, 'Id']}'\) column 'Blur': '{cell}' is not a finite number"
    )
    with pytest.raises(PetalsError, match=pattern) as err:
        fetch(FetchOptions(source="dir", data_from=copy, data_dir=tmp_path / "data", progress=False), SPEC)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cell", ["n/a", "inf", "", "1e999"])
def test_a_score_that_is_not_a_finite_number_is_named_in_one_line(pets, tmp_path, cell):
    copy = tmp_path / "copy"
    shutil.copytree(pets, copy, ignore=shutil.ignore_patterns("manifest.json", "folds"))
    table = pd.read_csv(copy / "train.csv", dtype=str, keep_default_na=False)
    table.loc[4, "Pawpularity"] = cell
    table.to_csv(copy / "train.csv", index=False)
    with pytest.raises(
        PetalsError, match=rf"train\.csv \('{table.loc[4, 'Id']}'\): Pawpularity '.*' is not a finite"
    ) as err:
        fetch(FetchOptions(source="dir", data_from=copy, data_dir=tmp_path / "data", progress=False), SPEC)
    assert "\n" not in str(err.value)


def test_the_val_split_is_stratified_by_quantile_bins_of_the_score(pets):
    train = file_examples.examples(pets, SPEC, "train")
    bins = targets.strata(train.labels)
    assert bins.min() == 0 and bins.max() == int(np.log2(60))  # Sturges: 1 + log2(60) bins
    kept, held = splits.held_out(train.labels, 5, 0)
    assert len(held) == 12 and not set(kept) & set(held)
    assert len(set(bins[held])) >= 5  # the held-out fifth spans the scores, low to high


def _submission(tmp_path, cells):
    ids = [f"{k:032x}" for k in range(len(cells))]
    path = tmp_path / "submission.csv"
    pd.DataFrame({"Id": ids, "Pawpularity": cells}).to_csv(path, index=False)
    return path, ids


def test_a_submission_holds_numbers_clipped_to_one_to_a_hundred(tmp_path):
    values = TASK.submission_values(np.array([[-3.0], [37.25], [140.0]]), SPEC)
    assert values.tolist() == [1.0, 37.25, 100.0]
    cells = TASK.submission_column(values, SPEC)
    assert cells == ["1", "37.25", "100"]
    path, ids = _submission(tmp_path, cells)
    assert check_submission(path, SPEC, ids).rows == 3


@pytest.mark.parametrize("cell", ["nan", "inf", "high"])
def test_a_submission_cell_that_is_not_a_finite_number_is_named_in_one_line(tmp_path, cell):
    path, ids = _submission(tmp_path, ["12.5", cell])
    pattern = rf"Pawpularity '{cell}' for id '{ids[1]}' \(line 3\) is not a finite number"
    with pytest.raises(SubmissionError, match=pattern):
        check_submission(path, SPEC, ids)


@pytest.mark.slow
def test_a_tiny_network_on_the_embedded_photos_is_well_under_the_mean(cpu, tmp_path):
    """A small CNN at 32 px, 3 short epochs on half the embedded photos (about 5 s of training):
    val RMSE at most 0.8 of predicting the training mean there; its submission holds numbers in
    1..100 for every test id."""
    from pipeline import api

    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.5, progress=False), SPEC)
    overrides = (f"competition={SPEC.name}", "model.backbone=cnn", "data.image_size=32", "data.batch_size=16",
                 "train.epochs=3", "train.steps_per_epoch=30", "train.lr_start=3e-3", "train.lr_max=3e-3",
                 "train.lr_ramp_epochs=0", "train.lr_decay=0.8")  # fmt: skip
    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": "default"}
    api.train(api.TrainOptions(data_dir=data_dir, overrides=overrides, **where))
    scored = api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    evaluation = api.evaluate(scored)
    [run] = list((tmp_path / "runs").iterdir())
    val = np.load(run / "val_predictions.npz")
    held = set(val["ids"].astype(str))
    train = file_examples.examples(data_dir, SPEC, "train")
    mean = float(train.labels[[i not in held for i in train.ids]].mean())  # the training rows' mean
    baseline = float(np.sqrt(np.mean((val["labels"].ravel() - mean) ** 2)))
    assert evaluation["val_rmse"] <= 0.8 * baseline, (evaluation, baseline)
    assert (run / "predicted_vs_true.png").is_file() and evaluation["mistakes"]["shown"] > 0
    written = pd.read_csv(api.predict(scored))
    assert written["Pawpularity"].between(1, 100).all()
    assert sorted(written["Id"]) == sorted(pd.read_csv(data_dir / "sample_submission.csv")["Id"])
