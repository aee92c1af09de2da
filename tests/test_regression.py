"""Regression as a target part (pipeline/tasks/targets/regression.py): the standardised head's scale kept
with the weights, the loss in standardised units, RMSE as the training metric, and what the
task and its competition file must agree on, refused in one line."""

from __future__ import annotations

import keras
import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import PetalsError
from pipeline.networks import numbers
from pipeline.tasks import get_task
from pipeline.tasks.targets.regression import TargetScale

TASK = get_task("image_regression")


def test_the_output_layer_keeps_the_targets_mean_and_std_in_the_weights_file(tmp_path):
    def network():
        inputs = keras.Input((3,))
        logits = keras.layers.Dense(1, kernel_initializer="zeros", name="logits")(inputs)
        return keras.Model(inputs, numbers.Unstandardise(dtype="float32", name="probabilities")(logits))

    trained = network()
    TASK.fit_output(trained, TargetScale(mean=38.0, std=20.0))
    x = np.ones((2, 3), np.float32)
    assert trained.predict(x, verbose=0).tolist() == [[38.0], [38.0]]  # a zero head predicts the mean
    trained.save_weights(tmp_path / "best.weights.h5")
    loaded = network()  # as evaluate and predict build it: mean 0, std 1 until the weights load
    loaded.load_weights(tmp_path / "best.weights.h5")
    assert loaded.predict(x, verbose=0).tolist() == [[38.0], [38.0]]
    assert not loaded.get_layer("probabilities").trainable_weights


def test_the_loss_is_the_standardised_mse_and_the_metric_the_rmse_in_units():
    from pipeline.core.config import TrainConfig

    loss = TASK.loss(TrainConfig(), TargetScale(mean=38.0, std=20.0))
    true, predicted = np.array([[30.0], [50.0]], np.float32), np.array([[40.0], [40.0]], np.float32)
    assert float(loss(true, predicted)) == pytest.approx(100.0 / 400.0)  # ((y - p) / std)^2
    metric = TASK.train_metric()
    metric.update_state(true, predicted)
    assert metric.name == "accuracy" and float(metric.result()) == pytest.approx(10.0)
    assert TASK.scores(predicted, true) == {"loss": 100.0, "accuracy": 10.0}


@pytest.mark.parametrize(
    "override",
    ["train.label_smoothing=0.1", "train.logit_adjustment=1.0", "train.folds=2 train.pseudo_labels=group"],
)
def test_what_a_number_does_not_serve_is_refused_before_any_work(override):
    from pipeline.tasks.competitions import check_network
    from pipeline.tasks.recipe_config import load_config

    config = load_config("cpu", ["competition=petfinder-pawpularity", *override.split()])
    with pytest.raises(PetalsError, match="competition petfinder-pawpularity predicts a number an example"):
        check_network(config, TASK_SPEC(), "tensorflow")


def TASK_SPEC():
    from competition import load_spec

    return load_spec("petfinder-pawpularity")


@pytest.mark.parametrize(
    ("edit", "refused"),
    [
        (
            ('metric = "rmse"', 'metric = "macro_f1"'),
            "metric macro_f1 scores classes or labels; task image_table_regression",
        ),
        (
            ('target = "number"', 'target = "class"'),
            "task image_table_classification reads classes",
        ),
        (
            ('labels_are = "numbers"', 'labels_are = "ids"'),
            "task image_table_regression reads numbers; the data's labels",
        ),
        (  # the flags declared, an image alone read: refused, not silently dropped
            ('input = "image_table"', 'input = "image"'),
            r"task image_regression reads no \[data\] feature_columns; an image_table input does",
        ),
    ],
)
def test_a_number_task_metric_or_label_column_that_disagree_are_refused_in_one_line(tmp_path, edit, refused):
    import shutil

    from competition.spec import SPEC_DIR
    from pipeline.tasks.competitions import load_competition

    folder = tmp_path / "paw"
    shutil.copytree(SPEC_DIR / "petfinder-pawpularity", folder)
    toml = folder / "competition.toml"
    toml.write_text(toml.read_text().replace(*edit))
    (folder / "classes.txt").write_text("low\nhigh\n")
    with pytest.raises(PetalsError, match=refused):
        load_competition(str(toml))


@pytest.mark.slow
@pytest.mark.heavy  # four fold runs and a blend: a long chain (`make test-heavy`)
def test_cv_groups_of_numbers_give_out_of_fold_numbers_and_blend_into_one_submission(cpu, tmp_path):
    """Two tiny CV groups on a tenth of the embedded Pawpularity photos: each group's OOF rows are
    every labelled photo with its score, its CV score the RMSE over them; their equal blend is the
    mean of their numbers, out of fold and on the test set, and ranks on the board by RMSE."""
    from pipeline import api
    from pipeline.modeling.inference import Predictions
    from pipeline.runs import leaderboard
    from pipeline.stages.fetch import FetchOptions, fetch

    spec = TASK_SPEC()
    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.1, progress=False), spec)
    tiny = (f"competition={spec.name}", "model.backbone=cnn", "data.image_size=32", "data.batch_size=8",
            "train.epochs=1", "train.steps_per_epoch=2")  # fmt: skip
    where = {"runs_dir": tmp_path / "runs", "submissions_dir": tmp_path / "s", "strategy": "cpu"}
    groups = []
    for seed in (0, 1):
        overrides = (*tiny, f"seed={seed}")
        options = api.CVOptions(data_dir=data_dir, overrides=overrides, recipe="default", folds=2, **where)
        metrics = api.cv_train(options)
        api.cv_predict(options)
        oof = Predictions.load(tmp_path / "runs" / metrics["group"] / "oof_predictions.npz")
        assert oof.labels.dtype == np.float32 and oof.probabilities.shape == (60, 1)
        assert metrics["cv_score"] == pytest.approx(spec.metric.score(oof.labels, oof.probabilities))
        groups.append((metrics["group"], oof))
    names = tuple(g for g, _ in groups)
    path = api.ensemble(api.EnsembleOptions(runs=names, method="equal", data_dir=data_dir, **where))
    tests = [Predictions.load(tmp_path / "runs" / g / "test_predictions.npz") for g, _ in groups]
    mean = (tests[0].probabilities[:, 0] + tests[1].probabilities[:, 0]) / 2
    written = pd.read_csv(path).set_index("Id")["Pawpularity"]
    assert [written[i] for i in tests[0].ids] == pytest.approx(np.clip(mean, 1, 100), abs=1e-5)
    board = leaderboard.ranked(leaderboard.read(leaderboard.board_file(tmp_path / "s", spec.name)), spec)
    scores = [float(v.split()[0]) for v in board["rmse"]]
    assert len(scores) == 3 and scores == sorted(scores)  # lower RMSE first
