"""A single feature-cache run evaluates on the val predictions training scored; a CV group of
feature-cache folds predicts through its cut: each fold's out-of-fold rows are the
probabilities training scored at its last epoch (no second pass), the test set goes through the
frozen network below the cut once for every fold, and both stay within float16's rounding of the
whole network's; a fold whose weights or bottom changed is predicted from pixels instead."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from pipeline.core import rundir
from pipeline.core.options import CVOptions
from pipeline.core.rundir import RunDir
from pipeline.cv.group import fold_config
from pipeline.data import splits
from pipeline.data.manifest import read_manifest
from pipeline.modeling import feature_pass
from pipeline.modeling.inference import Predictions, load_inference_model, predict_split
from pipeline.modeling.trainer import save_weights
from pipeline.stages import cv as cv_stage
from pipeline.tasks.competitions import load_competition, size_of
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY, competition_of, kept_score, run_cli

OVERRIDES = (*TINY, "augment.where=host", "train.feature_cache=true", "train.unfrozen_layers=4",
             "train.feature_views=2")  # fmt: skip
FLOAT16_ROUNDING = 0.02  # the most a probability moves when the activations below the cut are float16


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    return shutil.copytree(tiny_data_dir, tmp_path / "data")


def options(data_dir, tmp_path) -> CVOptions:
    return CVOptions(
        folds=2, data_dir=data_dir, runs_dir=tmp_path / "runs", submissions_dir=tmp_path / "subs",
        recipe="default", overrides=OVERRIDES, backend="tensorflow", strategy="cpu",
    )  # fmt: skip


def fold_runs(data_dir, tmp_path) -> list[RunDir]:
    config = load_config(overrides=[*OVERRIDES, "train.folds=2"])
    identity, size = (
        rundir.data_identity(read_manifest(data_dir)),
        size_of(config, load_competition(config.competition)),
    )
    return [
        RunDir(tmp_path / "runs" / rundir.run_id(fold_config(config, k), identity, size)) for k in range(2)
    ]


def through(predictions: Predictions) -> bool:
    return "through" in json.loads(predictions.source)


def close_to_whole(cut: Predictions, whole: Predictions) -> None:
    whole = whole.by_ids(cut.ids)
    assert np.abs(cut.probabilities - whole.probabilities).max() < FLOAT16_ROUNDING
    assert (cut.predicted == whole.predicted).mean() >= 0.95


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_folds_predict_out_of_fold_as_scored_and_the_test_set_through_one_bottom_pass(
    data_dir, tmp_path, spec, cpu, monkeypatch
):
    extracted = []
    real = feature_pass._piece
    monkeypatch.setattr(
        feature_pass, "_piece", lambda *a: extracted.append(len((kept := real(*a)).ids)) or kept
    )
    opts = options(data_dir, tmp_path)
    metrics = cv_stage.train_folds(opts, cv_stage.competition_of(opts))
    runs = fold_runs(data_dir, tmp_path)
    table = splits.fold_table(data_dir, spec, load_config(overrides=[*OVERRIDES, "train.folds=2"]))
    for k, run in enumerate(runs):  # out of fold: what training scored with the weights it kept
        kept = Predictions.load(run.predictions("val"))
        assert through(kept) and sorted(kept.ids.tolist()) == sorted(table.ids[table.held_out(k)].tolist())
        end = pd.read_csv(run.history_file)[spec.score_key].dropna().iloc[-1]  # a fold keeps its end
        assert spec.metric.score(kept.labels, kept.probabilities) == pytest.approx(end, abs=1e-6)
        assert metrics["fold_scores"][k] == pytest.approx(end, abs=1e-6)
        whole = predict_split(run, competition_of(run), data_dir, "val", 1, cpu, as_scored=False)
        close_to_whole(kept, whole)
        kept.save(run.predictions("val"))  # the whole network's replaced it

    extracted.clear()
    cv_stage.predict(options(data_dir, tmp_path))
    assert sum(extracted) == 104  # the test set below the cut once, for both folds
    group = RunDir(tmp_path / "runs" / metrics["fold_runs"]["0"]).path.parent
    assert not list(group.glob("cv2-*/features"))  # the test activations go once used
    cut_made = [Predictions.load(run.predictions("test")) for run in runs]
    assert all(through(p) for p in cut_made)
    extracted.clear()
    cv_stage.predict(options(data_dir, tmp_path))  # a rerun reuses what it saved
    assert extracted == []
    for run, made in zip(runs, cut_made, strict=True):
        close_to_whole(made, predict_split(run, competition_of(run), data_dir, "test", 1, cpu))

    # Fold 1's network below the cut moved (weights from elsewhere): it is predicted from pixels,
    # and its kept out-of-fold rows are of other weights, so they are not used either.
    for run in runs:
        run.predictions("test").unlink()
    net = load_inference_model(runs[1], competition_of(runs[1]))
    first = next(w for w in net.get_layer("backbone").weights if len(w.shape) == 4)
    first.assign(first.numpy() * 1.01)
    save_weights(net, runs[1].best_weights)
    from pipeline.cv.held import held_predictions

    assert not through(held_predictions(runs[1], competition_of(runs[1]), data_dir, "val", 1, cpu))
    assert through(held_predictions(runs[0], competition_of(runs[0]), data_dir, "val", 1, cpu))
    cv_stage.predict(options(data_dir, tmp_path))
    assert through(Predictions.load(runs[0].predictions("test")))
    assert not through(Predictions.load(runs[1].predictions("test")))


@pytest.mark.slow  # a Python process
def test_cv_predict_picks_its_backend_before_anything_imports_keras(data_dir, tmp_path):
    """`cv predict --backend jax` in a fresh process: Keras must not be imported (by the cut's
    module) before the stage picks the backend; here it gets as far as the group's absence."""
    sets = [arg for value in OVERRIDES for arg in ("--set", value)]
    done = run_cli(
        "cv", "predict", "--folds", "2", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
        "--submissions-dir", str(tmp_path / "subs"), "--recipe", "default", "--backend", "jax", *sets,
    )  # fmt: skip
    assert done.returncode != 0
    assert "the CV group is not complete" in done.stderr and "backend cannot change" not in done.stderr


@pytest.mark.slow
def test_a_single_runs_evaluate_reads_the_val_predictions_training_scored_with_its_best_weights(
    data_dir, tmp_path, spec, cpu, monkeypatch, caplog
):
    from pipeline import cli
    from pipeline.modeling import inference
    from pipeline.stages import train

    config = load_config(overrides=list(OVERRIDES))
    job = train.prepare(config, cpu, data_dir, tmp_path / "runs", None, None)
    train.fit(job, progress=False)
    run = RunDir(job.run_dir)
    kept = Predictions.load(run.predictions("val"))
    best = pd.read_csv(run.history_file)[spec.score_key].max()
    assert through(kept) and spec.metric.score(kept.labels, kept.probabilities) == pytest.approx(
        best, abs=1e-6
    )

    whole = predict_split(run, competition_of(run), data_dir, "val", 1, cpu, as_scored=False)
    close_to_whole(kept, whole)
    kept.save(run.predictions("val"))  # the whole network's replaced it

    def no_network(*_):
        raise AssertionError("the val split was predicted again")

    monkeypatch.setattr(inference, "load_inference_model", no_network)
    caplog.set_level("INFO")
    common = ["--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"), "--run", run.name]
    assert cli.main(["evaluate", *common, "--submissions-dir", str(tmp_path / "subs")]) == 0
    assert "as training scored them" in caplog.text and "val pass" not in caplog.text
    metrics = json.loads((run.path / "metrics.json").read_text())
    assert kept_score(metrics["evaluation"], spec.score_key) == pytest.approx(best, abs=1e-6)

    # Other weights than those it scored with (a copy from elsewhere): the whole network predicts.
    monkeypatch.undo()
    net = load_inference_model(run, competition_of(run))
    first = next(w for w in net.get_layer("backbone").weights if len(w.shape) == 4)
    first.assign(first.numpy() * 1.01)
    save_weights(net, run.best_weights)
    assert not through(predict_split(run, competition_of(run), data_dir, "val", 1, cpu))
