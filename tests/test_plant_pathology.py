"""Plant Pathology 2021: several labels a leaf. The label CSV read as rows of labels, Kaggle's
mean F1, thresholds chosen on val and judged off the rows that chose them, submission strings
written and checked the Kaggle way, what the task does not serve refused in one line, and a
learning check of the image CPU recipe on the embedded leaves."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from competition.spec import SPEC_DIR
from competition.submission import SubmissionError
from pipeline.core.errors import PetalsError
from pipeline.data import file_examples, splits
from pipeline.runs import leaderboard
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks import get_task
from pipeline.tasks.competitions import check_network, check_submission, load_competition
from pipeline.tasks.recipe_config import load_config, recipe_path
from pipeline.tasks.targets import multi_label_decision
from tests.conftest import kept_score

SPEC = load_spec("plant-pathology-2021")
TASK = get_task(SPEC.task)


@pytest.fixture(scope="module")
def leaves(tmp_path_factory):
    """The embedded leaves at a tenth of their number: 60 train and 3 test photos."""
    data_dir = tmp_path_factory.mktemp("plants") / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.1, progress=False), SPEC)
    return data_dir


def test_a_code_competition_of_several_labels_a_leaf_scored_by_kaggles_mean_f1():
    assert (SPEC.task, SPEC.format, SPEC.metric.name, SPEC.submission_value) == (
        "multi_label_image_classification",
        "image_csv",
        "mean_f1",
        "labels",
    )
    assert SPEC.code_competition and SPEC.classes[2] == "healthy" and SPEC.num_classes == 6
    assert (TASK.activation, TASK.label_rank) == ("sigmoid", 1)
    assert (
        recipe_path("cpu", load_competition(SPEC.name))
        == get_task("image_classification").recipes_dir / "cpu.toml"
    )


def test_mean_f1_is_kaggles_per_row_f1_averaged_over_rows():
    """The example of Kaggle's wiki page on the Mean F-Score: 0.53333333."""
    true, predicted = [[1, 2], [3, 4, 5], [6], [7]], [[1, 2, 3, 9], [3, 4], [6, 12], [1]]
    labels = sorted({x for row in true + predicted for x in row})
    rows = lambda lists: np.array([[int(x in row) for x in labels] for row in lists])  # noqa: E731
    assert SPEC.metric.score_decided(rows(true), rows(predicted)) == pytest.approx(0.53333333)
    # From probabilities, a label is held at 0.5 or more.
    assert SPEC.metric.score(np.array([[1, 0], [0, 1]]), np.array([[0.5, 0.4], [0.9, 0.2]])) == 0.5


def test_the_label_csv_gives_each_leaf_its_row_of_labels_and_the_test_names_are_the_ids(leaves):
    labels = pd.read_csv(leaves / "train.csv", dtype=str)
    train = file_examples.examples(leaves, SPEC, "train")
    assert len(train) == 60 and train.labels.shape == (60, 6)
    by_id = dict(zip(labels["image"], labels["labels"], strict=True))
    for image_id, row in zip(train.ids, train.labels, strict=True):
        assert {SPEC.classes[k] for k in np.flatnonzero(row)} == set(by_id[image_id].split())
    assert (train.labels.sum(axis=1) >= 2).any()  # some leaves show two or three diseases
    test = file_examples.examples(leaves, SPEC, "test")
    assert test.labels is None and sorted(test.ids) == sorted(
        pd.read_csv(leaves / "sample_submission.csv")["image"]
    )


def test_a_label_that_is_not_one_of_the_six_is_named_in_one_line(leaves, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(leaves, copy, ignore=shutil.ignore_patterns("manifest.json"))
    labels = pd.read_csv(copy / "train.csv", dtype=str)
    labels.loc[4, "labels"] = "scab black_rot"
    labels.to_csv(copy / "train.csv", index=False)
    with pytest.raises(PetalsError, match=r"train\.csv \('.*'\): label 'black_rot' is not a class") as err:
        fetch(FetchOptions(source="dir", data_from=copy, data_dir=tmp_path / "data", progress=False), SPEC)
    assert "\n" not in str(err.value)


def test_the_val_split_is_stratified_by_combination_and_never_trained_on(leaves):
    train = file_examples.examples(leaves, SPEC, "train")
    kept, held = (train.take(rows) for rows in splits.held_out(train.labels, 5, 0))
    assert not set(kept.ids) & set(held.ids) and len(kept) + len(held) == len(train)
    assert held.labels.sum(axis=0).min() >= 1  # every label in val, however rare


@pytest.mark.parametrize(
    ("edit", "refused"),
    [
        (
            ('"multi_label_image_classification"', '"image_classification"'),
            "task image_classification reads one class an example; the data's labels give several",
        ),
        (
            ('metric = "mean_f1"', 'metric = "macro_f1"'),
            "metric macro_f1 scores one class an example; task multi_label_image_classification does not",
        ),
    ],
)
def test_a_task_or_metric_of_one_class_an_example_is_refused_for_rows_of_labels_in_one_line(
    tmp_path, edit, refused
):
    folder = tmp_path / "pp"
    shutil.copytree(SPEC_DIR / SPEC.name, folder)
    toml = folder / "competition.toml"
    toml.write_text(toml.read_text().replace(*edit))
    with pytest.raises(PetalsError, match=refused):
        load_competition(str(toml))


def test_labelled_splits_that_read_labels_two_ways_are_refused():
    from pipeline.formats import get_format

    raw = {
        "train": {"folder": "a", "labels": "a.csv", "labels_are": "names"},
        "val": {"folder": "b", "labels": "b.csv", "labels_are": "name_lists"},
    }
    with pytest.raises(ValueError, match="the labelled splits read labels as name_lists and names"):
        get_format("image_csv").layout(raw, ("train", "val"), ("train", "val"))


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.folds=2 train.pseudo_labels=group", "train.pseudo_labels=group"),
        ("train.logit_adjustment=1.0", "train.logit_adjustment=1.0"),
        ("train.merge_val=true", "train.merge_val=True"),  # no val to choose thresholds on: REFIT=1
    ],
)
def test_what_the_task_does_not_serve_yet_is_refused_before_any_work(override, key):
    config = load_config("cpu", [f"competition={SPEC.name}", *override.split()])
    with pytest.raises(PetalsError, match=f"^{key}: competition plant-pathology-2021 has several labels"):
        check_network(config, SPEC, "tensorflow")


def test_thresholds_are_each_labels_best_f1_and_an_empty_row_takes_its_likeliest_label():
    rng = np.random.default_rng(0)
    truth = np.zeros((200, 3), np.int32)
    truth[np.arange(200), rng.integers(0, 3, 200)] = 1  # one label a row, as every row has one
    # Label 0's positives score 0.3-0.55 (below 0.5 a low bar wins), label 1's 0.6-0.85; label
    # 2's scores say nothing, and its best F1 is to answer it everywhere.
    scores = rng.uniform(0.0, 0.25, truth.shape)
    scores[:, 0] += truth[:, 0] * 0.3
    scores[:, 1] += truth[:, 1] * 0.6
    decision = multi_label_decision.choose(truth, scores)
    assert 0.25 < decision["thresholds"][0] <= 0.3 and 0.25 < decision["thresholds"][1] <= 0.6
    assert decision["thresholds"][2] == 0.05 and decision["fill_empty"]
    decided = multi_label_decision.decide(scores, {**decision, "fill_empty": False})
    assert (decided[:, :2] == truth[:, :2]).all()
    # A row under every threshold takes its likeliest label, unless val had rows with none.
    quiet = np.array([[0.2, 0.1, 0.01]])
    assert multi_label_decision.decide(quiet, decision).tolist() == [[1, 0, 0]]
    assert multi_label_decision.decide(quiet, {**decision, "fill_empty": False}).tolist() == [[0, 0, 0]]


def test_the_thresholded_score_is_judged_on_rows_that_did_not_choose_the_thresholds():
    """Pure noise: thresholds chosen on the rows they score find patterns that are not there; the
    cross-fitted score must not."""
    rng = np.random.default_rng(1)
    truth = (rng.random((400, 6)) < 0.2).astype(np.int32)
    noise = rng.random((400, 6))
    in_sample = SPEC.metric.score_decided(
        truth, multi_label_decision.decide(noise, multi_label_decision.choose(truth, noise))
    )
    honest = SPEC.metric.score_decided(truth, multi_label_decision.cross_fitted(truth, noise))
    assert honest < in_sample


def _submission(tmp_path, cells):
    ids = [f"{k:016x}.jpg" for k in range(len(cells))]
    path = tmp_path / "submission.csv"
    pd.DataFrame({"image": ids, "labels": cells}).to_csv(path, index=False)
    return path, ids


def test_a_submission_lists_label_names_separated_by_spaces(tmp_path):
    rows = np.array([[0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 1], [0, 0, 1, 0, 0, 0]])
    cells = TASK.submission_column(rows, SPEC)
    assert cells == ["scab", "complex frog_eye_leaf_spot scab", "healthy"]
    path, ids = _submission(tmp_path, cells)
    summary = check_submission(path, SPEC, ids)
    assert (summary.rows, summary.classes_used) == (3, 4)


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("scab  rust", "'' is not a label"),
        ("scab black_rot", "'black_rot' is not a label"),
        ("rust rust", "a label is listed twice"),
        ("2", "'2' is not a label"),
    ],
)
def test_a_cell_kaggle_would_not_read_is_named_in_one_line(tmp_path, cell, why):
    path, ids = _submission(tmp_path, ["healthy", cell])
    with pytest.raises(SubmissionError, match=f"labels '{cell}' for id '{ids[1]}' \\(line 3\\): {why}"):
        check_submission(path, SPEC, ids)


@pytest.mark.slow
def test_the_image_cpu_recipe_learns_several_labels_a_leaf(cpu, tmp_path):
    """The CPU recipe at 64 px on 30% of the embedded leaves, 2 epochs, beats always answering the
    commonest label string (scab) by a clear margin in mean F1 on val; its submission lists
    labels the Kaggle way."""
    from pipeline import api

    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.3, progress=False), SPEC)
    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": "cpu"}
    overrides = (f"competition={SPEC.name}", "data.image_size=64", "train.epochs=2")
    api.train(api.TrainOptions(data_dir=data_dir, overrides=overrides, **where))
    evaluation = api.evaluate(
        api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    )
    [run] = list((tmp_path / "runs").iterdir())
    val = np.load(run / "val_predictions.npz")
    scab = np.zeros_like(val["labels"])
    scab[:, SPEC.classes.index("scab")] = 1
    baseline = SPEC.metric.score_decided(val["labels"], scab)
    assert evaluation["val_mean_f1"] > baseline + 0.2, (evaluation, baseline)
    # the kept weights' score is their submission's decision, thresholds cross-fitted; the run's
    # score on val and the board is that of its epoch choice (cross-fitted where it chose one)
    assert kept_score(evaluation, "val_mean_f1") == evaluation["val_mean_f1_thresholded"]
    assert evaluation["val_mean_f1_at_half"] == pytest.approx(
        SPEC.metric.score(val["labels"], val["probabilities"])
    )
    [row] = leaderboard.read(leaderboard.board_file(tmp_path / "s", SPEC.name)).to_dict("records")
    assert row["val_mean_f1"] == round(evaluation["val_mean_f1"], 5)
    shown = evaluation["mistakes"]  # rows decided wrong on some label, shown as a grid of leaves
    assert shown["of"] == len(val["labels"]) and (shown["file"] is None) == (shown["wrong"] == 0)
    assert shown["file"] is None or (run / "mistakes.png").is_file()
    path = api.predict(
        api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    )
    written = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert all(set(cell.split()) <= set(SPEC.classes) and cell for cell in written["labels"])


@pytest.mark.slow
@pytest.mark.thorough  # CV on the multi-label kind: folds are test_folds', the kind's learning check above
def test_folds_deal_by_label_string_and_the_submission_thresholds_are_chosen_out_of_fold(
    cpu, leaves, tmp_path
):
    """Two folds of a tiny network: every labelled leaf is out of fold once with its row of labels,
    the CV score is the metric over those rows, and the fold mean's submission is decided with
    thresholds chosen on them."""
    from pipeline import api
    from pipeline.modeling.inference import Predictions
    from pipeline.tasks.targets import multi_label_decision

    tiny = (f"competition={SPEC.name}", "model.backbone=cnn", "data.image_size=32", "data.batch_size=8",
            "train.epochs=1", "train.steps_per_epoch=2")  # fmt: skip
    options = api.CVOptions(
        data_dir=leaves, overrides=tiny, runs_dir=tmp_path / "runs", strategy="cpu", recipe="default",
        folds=2, submissions_dir=tmp_path / "subs",
    )  # fmt: skip
    metrics = api.cv_train(options)
    [group] = [p for p in (tmp_path / "runs").iterdir() if (p / "oof_predictions.npz").is_file()]
    oof = Predictions.load(group / "oof_predictions.npz")
    train = file_examples.examples(leaves, SPEC, "train")
    by_id = dict(zip(train.ids, train.labels.tolist(), strict=True))
    assert sorted(oof.ids) == sorted(train.ids) and [by_id[i] for i in oof.ids] == oof.labels.tolist()
    # the CV score is the decision the submission uses, judged out of fold: thresholds cross-fitted
    # over the OOF rows (each fold's own score stays the metric at 0.5)
    truth = (oof.labels > 0.5).astype(np.int32)
    judged = multi_label_decision.cross_fitted(truth, oof.probabilities)
    assert metrics["oof_evaluation"][f"{SPEC.score_key}_thresholded"] == pytest.approx(
        SPEC.metric.score_decided(truth, judged)
    )
    assert metrics["cv_score"] == metrics["oof_evaluation"][f"{SPEC.score_key}_thresholded"]
    board = leaderboard.read(leaderboard.board_file(tmp_path / "subs", SPEC.name))
    [row] = board[board["entry"] == group.name].to_dict("records")
    assert row["cv_score"] == round(metrics["cv_score"], 5)
    path = api.cv_predict(options)
    test = Predictions.load(group / "test_predictions.npz")
    decided = multi_label_decision.decide(
        test.probabilities, multi_label_decision.choose(oof.labels, oof.probabilities)
    )
    written = pd.read_csv(path, dtype=str, keep_default_na=False).set_index("image")["labels"]
    assert [written[i] for i in test.ids] == TASK.submission_column(decided, SPEC)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "loop"),
    [
        # The fit loop: the learning check above; the custom one: test_bert's fit against custom.
        pytest.param("tensorflow", "custom", marks=pytest.mark.thorough),
        pytest.param("jax", "fit", marks=pytest.mark.heavy),
        pytest.param("jax", "custom", marks=pytest.mark.heavy),
    ],
)
def test_rows_of_labels_train_in_every_loop_on_both_backends(leaves, tmp_path, backend, loop):
    """Rows of labels through the custom loops and Keras on JAX (fit on TensorFlow trains in the
    tests above), MixUp's soft rows on the device where TensorFlow augments there."""
    from tests.conftest import run_python

    where = "device" if backend == "tensorflow" else "host"
    overrides = [f"competition={SPEC.name}", "model.backbone=cnn", "data.image_size=32", "data.batch_size=8",
                 "train.epochs=2", "train.steps_per_epoch=3", f"train.loop={loop}", f"augment.where={where}",
                 "augment.mixup=0.2"]  # fmt: skip
    done = run_python(
        f"""
        from pathlib import Path
        from pipeline import api
        options = api.TrainOptions(data_dir=Path({str(leaves)!r}), overrides={overrides!r},
                                   runs_dir=Path({str(tmp_path)!r}), strategy="cpu", recipe="default",
                                   backend={backend!r})
        metrics = api.train(options)
        print(metrics["val_mean_f1"], metrics["val_accuracy"])
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    score, accuracy = map(float, done.stdout.split()[-2:])
    assert 0.0 <= score <= 1.0 and 0.0 < accuracy <= 1.0
    [run] = list(tmp_path.iterdir())
    history = pd.read_csv(run / "history.csv")
    assert history["epoch"].tolist() == [1, 2] and np.isfinite(history["loss"]).all()
