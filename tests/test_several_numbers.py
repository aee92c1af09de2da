"""A regression target of several numbers a row (pipeline/tasks/targets/regression.py), Feedback
Prize ELL's six scores: a standardised output a column with each column's mean and std kept in the
weights, the loss weighing each column by its own std, MCRMSE as the loops' metric, folds
stratified by the row mean, a clipped submission column a number, evaluate's figures per column
and their mean, blends of several columns, and what `make inspect` shows of numbers."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import keras
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

from competition import load_spec
from competition.metric import METRICS
from competition.submission import SubmissionError, submission_frame
from pipeline.cv import blend as cv_blend
from pipeline.data import targets
from pipeline.networks import numbers
from pipeline.tasks import get_task
from pipeline.tasks.competitions import check_submission
from pipeline.tasks.targets.regression import TargetScale

SPEC = load_spec("feedback-prize-ell")
TASK = get_task(SPEC.task)
SCORES = list(SPEC.label_columns)


def _scores(rng, n: int) -> np.ndarray:
    """Six correlated scores a row, 1.0 to 5.0 in half points."""
    level = rng.normal(3, 0.5, (n, 1)) + rng.normal(0, 0.4, (n, 6))
    return np.clip(np.round(level * 2) / 2, 1, 5).astype(np.float32)


def _split(labels: np.ndarray) -> SimpleNamespace:
    """What the target part reads of a split: its training examples' labels."""
    return SimpleNamespace(training_examples=SimpleNamespace(labels=labels))


def test_each_columns_mean_and_std_are_the_target_scale_and_one_column_stays_floats():
    labels = np.array([[1, 10, 4], [3, 30, 4]], np.float32)
    scale = TASK.target_summary(_split(labels), None)
    assert scale.mean.tolist() == [2, 20, 4] and scale.std.tolist() == [1, 10, 1]  # a std of 0 taken as 1
    one = TASK.target_summary(_split(labels[:, :1]), None)
    assert (one, type(one.mean), one.columns, scale.columns) == ((2.0, 1.0), float, 1, 3)


def test_the_head_keeps_each_columns_mean_and_std_in_the_weights_file(tmp_path):
    def network(columns: int):
        inputs = keras.Input((4,))
        logits = keras.layers.Dense(columns, kernel_initializer="zeros", name="logits")(inputs)
        return keras.Model(inputs, numbers.Unstandardise(dtype="float32", name="probabilities")(logits))

    trained = network(3)
    TASK.fit_output(trained, TargetScale(np.array([3.0, 2.5, 40.0]), np.array([0.5, 0.7, 9.0])))
    x = np.ones((2, 4), np.float32)
    assert trained.predict(x, verbose=0).tolist() == [[3.0, 2.5, 40.0]] * 2  # a zero head: the means
    trained.save_weights(tmp_path / "best.weights.h5")
    loaded = network(3)
    loaded.load_weights(tmp_path / "best.weights.h5")
    assert loaded.predict(x, verbose=0).tolist() == [[3.0, 2.5, 40.0]] * 2
    # One column's mean and std stay scalars: the shape every earlier weights file holds.
    assert [w.shape for w in network(1).get_layer("probabilities").weights] == [(), ()]


def test_the_loss_weighs_each_column_by_its_std_and_the_metric_is_mcrmse():
    from pipeline.core.config import TrainConfig

    rng = np.random.default_rng(0)
    scale = TargetScale(np.array([3.0, 50.0]), np.array([0.5, 20.0]))
    true = np.stack([rng.normal(3, 0.5, 64), rng.normal(50, 20, 64)], axis=1).astype(np.float32)
    predicted = (true + rng.normal(0, 1, true.shape) * [0.2, 10.0]).astype(np.float32)
    loss = TASK.loss(TrainConfig(), scale)
    expected = np.mean(((predicted - true) / scale.std) ** 2)
    assert float(loss(true, predicted)) == pytest.approx(expected, rel=1e-5)
    metric = TASK.train_metric(scale)
    for half in (slice(0, 32), slice(32, 64)):  # running over batches, as the loops feed it
        metric.update_state(true[half], predicted[half])
    mcrmse = METRICS["mcrmse"].score(true, predicted)
    assert metric.name == "accuracy" and float(metric.result()) == pytest.approx(mcrmse, rel=1e-5)
    assert float(metric.result()) > root_mean_squared_error(true.ravel(), predicted.ravel()) / 2
    scores = TASK.scores(predicted, true)
    assert scores["accuracy"] == pytest.approx(mcrmse) and scores["loss"] == pytest.approx(
        np.mean((predicted - true) ** 2.0), rel=1e-6
    )
    assert isinstance(TASK.train_metric(), keras.metrics.RootMeanSquaredError)  # one column: as before
    # The epoch lines and curves title it as what it is: MCRMSE here, RMSE of one column.
    one = load_spec("petfinder-pawpularity")
    assert TASK.metric_title(SPEC) == "mcrmse" and get_task(one.task).metric_title(one) == "rmse"


def test_folds_stratify_several_numbers_by_the_quantile_bins_of_the_row_mean():
    rng = np.random.default_rng(1)
    labels = _scores(rng, 300)
    assert targets.strata(labels).tolist() == targets.quantile_bins(labels.mean(axis=1)).tolist()
    assert targets.strata(labels[:, 2:3]).tolist() == targets.quantile_bins(labels[:, 2]).tolist()


def test_a_submission_holds_a_clipped_column_a_score_checked_the_kaggle_way(tmp_path):
    outputs = np.array([[0.4, 3.0, 5.7, 2.25, 1.0, 4.5], [3.3, 6.0, 2.0, 0.0, 4.0, 3.5]])
    decided = TASK.submission_values(outputs, SPEC)
    assert decided.shape == (2, 6) and decided.min() == 1.0 and decided.max() == 5.0  # the stated 1-5
    unstated = replace(SPEC, value_range=None)
    val = SimpleNamespace(labels=np.array([[1.5, 2, 2, 1, 1, 1], [4, 4.5, 5, 5, 3, 3]], np.float32))
    per_column = TASK.submission_values(outputs, unstated, val)
    assert per_column.tolist() == [[1.5, 3.0, 5.0, 2.25, 1.0, 3.0], [3.3, 4.5, 2.0, 1.0, 3.0, 3.0]]
    ids = ["0016926B079C", "0022683E9EA5"]
    path = tmp_path / "submission.csv"
    submission_frame(SPEC, ids, TASK.submission_column(decided, SPEC)).to_csv(path, index=False)
    assert path.read_text().splitlines()[:2] == [
        "text_id," + ",".join(SCORES),
        "0016926B079C,1,3,5,2.25,1,4.5",
    ]
    assert check_submission(path, SPEC, ids).rows == 2
    assert TASK.describe_submission(SPEC, None).startswith("6 numbers per row (cohesion, syntax,")
    frame = pd.read_csv(path, dtype=str)
    frame.loc[1, "grammar"] = "n/a"
    frame.to_csv(path, index=False)
    with pytest.raises(
        SubmissionError, match=r"grammar 'n/a' for id '0022683E9EA5' \(line 3\) is not a finite"
    ):
        check_submission(path, SPEC, ids)


def test_evaluate_reports_each_column_and_their_mean_and_the_worst_rows_as_mistakes(tmp_path):
    rng = np.random.default_rng(2)
    truth = _scores(rng, 120)
    noise = rng.normal(0, 1, truth.shape) * np.linspace(0.2, 0.7, 6)
    predicted = (truth + noise).astype(np.float32)
    evaluation = TASK.evaluate(truth, predicted, SPEC)
    rmse = root_mean_squared_error(truth, predicted, multioutput="raw_values")
    assert evaluation.score == pytest.approx(rmse.mean()) == pytest.approx(evaluation.fields["val_accuracy"])
    assert evaluation.fields["val_r2"] == pytest.approx(r2_score(truth, predicted))
    assert evaluation.fields["val_mae"] == pytest.approx(mean_absolute_error(truth, predicted))
    assert evaluation.fields["val_rmse_of_the_mean"] == pytest.approx(truth.std(axis=0).mean())
    assert [c["rmse"] for c in evaluation.fields["val_columns"].values()] == pytest.approx(rmse)
    evaluation.write(SimpleNamespace(file=lambda name: tmp_path / name))
    table = pd.read_csv(tmp_path / "per_class.csv")
    assert table["name"].tolist() == SCORES and table["rmse"].tolist() == pytest.approx(rmse)
    assert (tmp_path / "predicted_vs_true.png").read_bytes()[:4] == b"\x89PNG"
    lines = TASK.summary_lines(evaluation.fields)
    assert (
        lines[0].startswith(f"  MCRMSE {rmse.mean():.4f}") and len(lines) == 7 and "conventions" in lines[6]
    )
    mistakes = TASK.mistakes(truth, predicted, SPEC)
    worst = np.abs(predicted - truth).mean(axis=1)
    assert mistakes["row"].iloc[0] == worst.argmax() and mistakes["error"].is_monotonic_decreasing
    assert len(mistakes["true"].iloc[0].split()) == 6


def test_blends_of_several_numbers_are_judged_out_of_fold_a_ridge_stack_a_column():
    rng = np.random.default_rng(3)
    truth = _scores(rng, 200)
    folds = rng.permutation(np.arange(200) % 4)
    members = [truth + rng.normal(0, s, truth.shape) for s in (0.3, 0.3)]
    mcrmse = METRICS["mcrmse"]
    results = cv_blend.compare(members, truth, folds, mcrmse, [m[:5] for m in members])
    assert results["equal"].oof == pytest.approx((members[0] + members[1]) / 2, abs=1e-4)
    for result in results.values():
        assert result.oof.shape == (200, 6) and result.test.shape == (5, 6), result.kind
        assert result.score < min(mcrmse.score(truth, m) for m in members), result.kind
    assert results["stack"].weights.shape == (2,)  # a weight a member, the columns' mean
    changed = truth.copy()
    changed[folds == 0] = rng.uniform(1, 5, ((folds == 0).sum(), 6))
    again = cv_blend.stack_oof(members, changed, folds, mcrmse)
    assert np.allclose(again.oof[folds == 0], results["stack"].oof[folds == 0])  # fitted without fold 0


def test_inspect_summarises_each_score_a_split_where_classes_show_their_counts():
    rng = np.random.default_rng(4)
    labeled = {"train": _split(_scores(rng, 90)), "val": _split(_scores(rng, 10))}
    summary = TASK.labels_summary(labeled, SPEC, None)
    assert summary.file == "number_summary.csv" and len(summary.table) == 12
    train = pd.DataFrame(labeled["train"].training_examples.labels, columns=SCORES).describe()
    row = summary.table.iloc[2]  # train's vocabulary
    assert (row["split"], row["column"], row["count"]) == ("train", "vocabulary", 90)
    for statistic in ("mean", "std", "min", "25%", "50%", "75%", "max"):
        assert row[statistic] == pytest.approx(train.loc[statistic, "vocabulary"]), statistic
    assert summary.lines[0].split() == [
        "split",
        "column",
        "count",
        "mean",
        "std",
        "min",
        "25%",
        "50%",
        "75%",
        "max",
    ]
    assert len(summary.lines) == 13 and not any("rarest" in line for line in summary.lines)
    one = get_task("image_regression").labels_summary(
        {"train": _split(np.array([[1.0], [9.0]]))}, load_spec("petfinder-pawpularity"), None
    )
    assert one.table[["column", "count", "mean", "max"]].values.tolist() == [["Pawpularity", 2, 5.0, 9.0]]


@pytest.mark.parametrize(
    ("edit", "refused"),
    [
        (
            ('by = "code"', 'by = "code"\nlabel_columns = ["cohesion", "syntax"]'),
            "name 2 columns for 6 labels",
        ),
        (('target = "number"', 'target = "labels"'), "reads classes; the data's labels give numbers"),
        (('labels_are = "numbers"', 'labels_are = "ids"'), "reads numbers; the data's labels give classes"),
    ],
)
def test_several_numbers_that_the_file_contradicts_are_refused_in_one_line(tmp_path, edit, refused):
    import shutil

    from competition.spec import SPEC_DIR
    from pipeline.core.errors import PetalsError
    from pipeline.tasks.competitions import load_competition

    folder = tmp_path / "ell"
    shutil.copytree(SPEC_DIR / SPEC.name, folder)
    toml = folder / "competition.toml"
    toml.write_text(toml.read_text().replace(*edit))
    with pytest.raises(PetalsError, match=refused) as raised:
        load_competition(str(toml))
    assert "\n" not in str(raised.value)
