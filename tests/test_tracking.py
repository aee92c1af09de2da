"""Every run's TensorBoard events read back by TensorBoard's own reader, and TRACK=mlflow's run read
back by MLflow's client: the numbers are history.csv's and the leaderboard's."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pipeline import api
from pipeline.core import lock
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.runs import leaderboard, mlflow_runs, tracking
from pipeline.runs.tensorboard import scalar_tag
from tests.conftest import TINY, run_python, tensorboard_events


def _train(tmp_path, tiny_data_dir, track: str = "none") -> tuple[RunDir, dict]:
    where = {"data_dir": tiny_data_dir, "runs_dir": tmp_path / "runs", "strategy": "cpu", "track": track}
    config = {"recipe": "default", "overrides": (*TINY, "train.epochs=3", "train.val_every=2")}
    metrics = api.train(api.TrainOptions(**where, **config))
    scoring = api.ScoreOptions(**where, **config, submissions_dir=tmp_path / "subs")
    api.evaluate(scoring)
    api.predict(scoring)
    return RunDir(tmp_path / "runs" / metrics["run"]), metrics


@pytest.mark.slow
def test_a_runs_event_files_hold_its_history_config_and_evaluation(tiny_data_dir, tmp_path):
    run, _ = _train(tmp_path, tiny_data_dir)
    assert not (tmp_path / "runs" / mlflow_runs.DATABASE).exists()  # MLflow only when asked
    events = tensorboard_events(run.file(RunDir.TENSORBOARD) / "run")
    history = run.read_history()
    columns = [c for c in history.columns if c != "epoch"]
    assert {"loss", "accuracy", "lr", "images_per_second", "val_macro_f1", "val_accuracy"} <= set(columns)
    for column in columns:
        scored = history.dropna(subset=[column])  # val is scored after epochs 1, 2 and 3 (the last)
        read = events[scalar_tag(column)]
        assert [step for step, _ in read] == scored["epoch"].tolist(), column
        np.testing.assert_allclose([float(v) for _, v in read], scored[column], rtol=1e-6, err_msg=column)
    assert "_hparams_/session_start_info" in events  # the config, as the HParams plugin reads it
    evaluation = run.metrics()["evaluation"]
    [(step, value)] = events["evaluate/macro_f1"]
    assert step == 3 and float(value) == pytest.approx(evaluation["val_macro_f1"])
    for picture in ("evaluate/confusion_matrix", "evaluate/per_class_scores"):
        [(_, image)] = events[picture]  # width, height, then the PNG's bytes
        assert int(image[0]) > 100 and image[2].startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.heavy  # a JAX process compiling: 36 s here beside other work, the heavy tier's kind
def test_a_run_on_jax_writes_its_events_too(tiny_data_dir, tmp_path):
    """tf.summary writes the files whatever Keras' backend: a JAX run's events are its history's."""
    args = ["train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(tmp_path), "--run", "on-jax",
            "--recipe", "default", "--backend", "jax", "--strategy", "cpu"]  # fmt: skip
    for override in TINY:
        args += ["--set", override]
    done = run_python(f"from pipeline import cli\nassert cli.main({args!r}) == 0")
    assert done.returncode == 0, done.stderr[-3000:]
    run = RunDir(tmp_path / "on-jax")
    info = run.read_json(RunDir.RUN_INFO)
    assert info["backend"] == "jax" and "jax" in info["built_with"]  # what computed it, recorded
    assert not any(name.startswith("tensorflow") for name in info["built_with"])
    events, history = tensorboard_events(run.file(RunDir.TENSORBOARD) / "run"), run.read_history()
    for column in ("loss", "val_macro_f1", "lr", "images_per_second"):
        np.testing.assert_allclose(
            [float(v) for _, v in events[scalar_tag(column)]], history[column], rtol=1e-6
        )


@pytest.mark.slow
@pytest.mark.thorough  # the optional second tracker: TensorBoard's events are proven above, MlflowRun below
def test_track_mlflow_mirrors_the_run_and_its_leaderboard_row(tiny_data_dir, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv(mlflow_runs.URI_VARIABLE, uri)
    monkeypatch.chdir(tmp_path)  # a given store keeps its artifacts in ./mlruns, as MLflow does
    run, metrics = _train(tmp_path, tiny_data_dir, track="mlflow")
    client = MlflowClient(uri)
    [found] = client.search_runs(
        [client.get_experiment_by_name("petals-flowers").experiment_id], f"tags.`petals.run` = '{run.name}'"
    )
    board = leaderboard.read(leaderboard.board_file(tmp_path / "subs", "flowers"))
    row = board[board["entry"] == run.name].iloc[0]
    for column in ("val_macro_f1", "val_accuracy", "tta", "train_seconds", "epochs", "image_size"):
        assert found.data.metrics[column] == pytest.approx(float(row[column]), abs=0), column
    assert found.data.metrics["run/train_seconds"] == pytest.approx(metrics["train_seconds"])
    curve = client.get_metric_history(found.info.run_id, "val/macro_f1")
    history = run.read_history()
    assert [m.step for m in curve] == history["epoch"].tolist()
    np.testing.assert_allclose([m.value for m in curve], history["val_macro_f1"], rtol=1e-6)
    assert found.data.params["train.epochs"] == "3" and found.data.params["model.backbone"] == "cnn"
    manifest = run.trained_on()
    assert found.data.tags["data_fingerprint"] == manifest["fingerprint"]
    assert found.data.tags["competition"] == "flowers" and found.data.tags["recipe"] == "default"
    assert (tmp_path / "mlruns").is_dir()
    stored = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert {"curves.png", "history.csv", "confusion.png", "per_class.csv", "submission"} <= stored
    [submission] = client.list_artifacts(found.info.run_id, "submission")
    assert submission.path == f"submission/{run.name}.csv"


@pytest.mark.slow  # MLflow's store
def test_a_sweeps_trials_are_children_of_their_studys_run_and_grouped_by_name(tmp_path, monkeypatch):
    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)
    tags = {mlflow_runs.STUDY_TAG: "flowers-default-space-1234", "trial": "0"}
    first = mlflow_runs.MlflowRun(tmp_path, "flowers", "run-a", tags, new=True)
    second = mlflow_runs.MlflowRun(tmp_path, "flowers", "run-b", {**tags, "trial": "1"}, new=True)
    again = mlflow_runs.MlflowRun(tmp_path, "flowers", "run-a", tags)  # evaluate finds train's run
    assert again.id == first.id != second.id
    parents = {first.client.get_run(r.id).data.tags[mlflow_runs.PARENT_TAG] for r in (first, second)}
    [parent] = parents
    assert first.client.get_run(parent).data.tags[mlflow_runs.KIND_TAG] == "study"
    assert (tmp_path / mlflow_runs.DATABASE).is_file()  # the default store: SQLite in the runs dir
    best = {"trial": 1, "score": 0.75, "params": {"train.lr_max": 0.003}, "run": "run-b"}
    tracking.study_finished(
        tmp_path, "flowers", {"study": tags[mlflow_runs.STUDY_TAG], "best": best}, "mlflow"
    )
    study = first.client.get_run(parent).data
    assert (
        study.metrics == {"best_score": 0.75, "best_trial": 1.0}
        and study.tags["best.train.lr_max"] == "0.003"
    )
    # A fold of a trial's CV group: under its group's run, itself under the study's run.
    fold = mlflow_runs.MlflowRun(
        tmp_path, "flowers", "run-c", {**tags, "trial": "2", "cv_group": "g", "fold": "0"}
    )
    group = first.client.get_run(first.client.get_run(fold.id).data.tags[mlflow_runs.PARENT_TAG]).data.tags
    assert (group[mlflow_runs.KIND_TAG], group["cv_group"], group["trial"]) == ("cv_group", "g", "2")
    assert group[mlflow_runs.PARENT_TAG] == parent
    label = tracking.place_label({"study": "s", "trial": 3, "cv_group": "cv5-x", "fold": 2})
    assert label == "s-trial3-cv5-x-fold2" and tracking.place_label({}) == "run"
    with pytest.raises(PetalsError, match=r"track='mlfow': one of none, mlflow"):  # the API's, unparsed
        tracking.mlflow_asked("mlfow")


@pytest.mark.slow  # MLflow's store
def test_a_stopped_failed_or_killed_trains_mlflow_run_is_not_left_running(tmp_path, monkeypatch):
    """A stop, an error or a `kill -9` left the MLflow run RUNNING for good: a stop (resumable) is
    KILLED, an error FAILED, a resume RUNNING again, and RETRAIN=1 after a kill ends the killed one."""
    from pipeline.core.errors import Preempted

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)
    run = RunDir(tmp_path / "runs" / "default-cnn-32-abc")
    run.path.mkdir(parents=True)

    def train(new: bool) -> tracking.Tracker:
        return tracking.Tracker(run, "flowers", {"train": {"epochs": 3}}, {}, "mlflow", new=new)

    def status(tracker) -> str:
        return tracker.mlflow.client.get_run(tracker.mlflow.id).info.status

    killed = train(new=True)  # then kill -9: nothing ends it
    again = train(new=True)  # RETRAIN=1
    assert again.mlflow.id != killed.mlflow.id and (status(killed), status(again)) == ("KILLED", "RUNNING")
    again.stopped(Preempted("stopped by SIGTERM"))
    assert status(again) == "KILLED"
    resumed = train(new=False)
    assert resumed.mlflow.id == again.mlflow.id and status(resumed) == "RUNNING"
    resumed.stopped(ValueError("out of memory"))
    assert status(resumed) == "FAILED"
    last = train(new=False)
    last.trained({"epochs": 3})
    last.stopped(OSError("the feature cache could not be removed"))  # after the run finished
    assert status(last) == "FINISHED"


@pytest.mark.slow  # MLflow's store
def test_retrain_ends_only_the_runs_whose_trainer_is_gone_never_one_training_on_another_machine(
    tmp_path, monkeypatch
):
    """RETRAIN=1 ends as KILLED the runs a `kill -9` left RUNNING, never a run another machine
    sharing the store still trains, nor one whose process still runs here."""
    import subprocess
    import sys

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)  # fmt: skip
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    here = lock.process_name().split(".")[0]
    trainers = {
        "killed here": f"{here}.{dead.stdout.strip()}.1",
        "training here": lock.process_name(alive.pid),
        "its pid reused": f"{here}.{alive.pid}.1",  # the same pid, started at another moment
        "on another machine": "kaggle-kernel-7.4242.999",
        "before the tag": None,
    }
    ids = {}
    try:
        for what, tag in trainers.items():
            old = mlflow_runs.MlflowRun(tmp_path, "flowers", "run-a", {}, new=True)
            if tag is not None:
                old.client.set_tag(old.id, mlflow_runs.TRAINER_TAG, tag)
            ids[what] = old.id
        again = mlflow_runs.MlflowRun(tmp_path, "flowers", "run-a", {}, new=True)
        again.training(resumed=False)
        status = {what: again.client.get_run(i).info.status for what, i in ids.items()}
    finally:
        alive.kill()
        alive.wait()
    assert status == {
        "killed here": "KILLED",
        "training here": "RUNNING",
        "its pid reused": "KILLED",
        "on another machine": "RUNNING",
        "before the tag": "KILLED",
    }
    assert again.client.get_run(again.id).data.tags[mlflow_runs.TRAINER_TAG] == lock.process_name()
    assert mlflow_runs.gone(lock.process_name())  # this process trains anew: its old run is done


def test_an_unreachable_tracking_server_is_one_line_without_its_password(tmp_path, monkeypatch):
    monkeypatch.setenv(mlflow_runs.URI_VARIABLE, "http://me:hunter2@127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # MLflow's own retries take minutes
    with pytest.raises(PetalsError) as refused:
        mlflow_runs.MlflowRun(tmp_path, "flowers", "run-a", {}, new=True)
    line = str(refused.value)
    assert line.startswith("TRACK=mlflow: http://me:***@127.0.0.1:1: ") and "Connection refused" in line
    assert "hunter2" not in line and "\n" not in line


def test_the_per_class_picture_draws_the_weakest_classes(tmp_path):
    from pipeline.runs.tensorboard import MAX_CLASSES_DRAWN, per_class_png

    table = pd.DataFrame({"class": [f"c{i}" for i in range(250)], "precision": 0.5, "recall": 0.5,
                          "f1": np.linspace(0, 1, 250)})  # fmt: skip
    png = per_class_png(table)
    assert png.startswith(b"\x89PNG") and MAX_CLASSES_DRAWN < 250
    assert per_class_png(pd.DataFrame({"label": [0], "threshold": [0.5]})) is None


def test_each_scores_bar_is_as_long_as_the_score():
    """The bars are drawn as one collection a score (barh's patches cost a third of the picture):
    each colour covers the picture in proportion to its score, a missing score draws nothing."""
    import io

    from PIL import Image

    from pipeline.runs.tensorboard import per_class_png

    # Short of the legend, in the lower right corner.
    table = pd.DataFrame({"class": ["a", "b", "c", "d"], "precision": [0.1, 0.1, 0.1, np.nan],
                          "recall": 0.3, "f1": 0.45})  # fmt: skip
    pixels = np.asarray(Image.open(io.BytesIO(per_class_png(table))).convert("RGB")).astype(int)
    colours = {"precision": (31, 119, 180), "recall": (255, 127, 14), "f1": (44, 160, 44)}  # C0, C1, C2
    covered = {name: int((np.abs(pixels - rgb).sum(axis=-1) < 30).sum()) for name, rgb in colours.items()}
    # Each colour: its legend's patch and its bars, 3 x 0.1, 4 x 0.3 and 4 x 0.45 long in all.
    per_unit = (covered["recall"] - covered["precision"]) / (4 * 0.3 - 3 * 0.1)
    legend = covered["precision"] - 3 * 0.1 * per_unit
    assert 0 < legend < 0.3 * covered["precision"]
    assert covered["f1"] == pytest.approx(legend + 4 * 0.45 * per_unit, rel=0.03)


@pytest.mark.slow
@pytest.mark.heavy  # a whole sweep, 45 s here beside other work; MlflowRun's nesting is tested above
def test_a_sweeps_trials_are_tracked_as_children_of_its_study(tiny_data_dir, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from pipeline.core.options import SweepOptions
    from pipeline.stages.sweep import sweep

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)  # the default: SQLite in the runs dir
    space = tmp_path / "space.toml"
    space.write_text("[train.lr_max]\nlow = 1e-4\nhigh = 1e-2\nlog = true\n")  # two trials, two values
    where = {"data_dir": tiny_data_dir, "runs_dir": tmp_path / "runs", "submissions_dir": tmp_path / "subs"}
    config = {"recipe": "default", "overrides": (*TINY, "augment.where=host"), "space": str(space)}
    opts = SweepOptions(**where, **config, strategy="cpu", trials=2, pruner="none", track="mlflow")
    sweep(opts)
    client = MlflowClient(mlflow_runs.tracking_uri(opts.runs_dir))
    experiment = client.get_experiment_by_name("petals-flowers").experiment_id
    [parent] = client.search_runs([experiment], f"tags.`{mlflow_runs.KIND_TAG}` = 'study'")
    study = parent.data.tags[mlflow_runs.STUDY_TAG]
    assert parent.data.metrics["best_trial"] in (0, 1) and 0 <= parent.data.metrics["best_score"] <= 1
    trials = client.search_runs([experiment], f"tags.`{mlflow_runs.PARENT_TAG}` = '{parent.info.run_id}'")
    assert sorted(t.data.tags["trial"] for t in trials) == ["0", "1"]
    for trial in trials:  # each trial's events are named by its study and number: TensorBoard's filter
        run = RunDir(opts.runs_dir / trial.data.tags[mlflow_runs.RUN_TAG])
        place = f"{study}-trial{trial.data.tags['trial']}"
        assert tensorboard_events(run.file(RunDir.TENSORBOARD) / place)["train/loss"]
        assert 1e-4 <= float(trial.data.params["train.lr_max"]) <= 1e-2


def _hparams(folder) -> dict:
    """The HParams plugin's hyperparameters in a folder of event files, as TensorBoard reads them."""
    from google.protobuf.json_format import MessageToDict
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    reader = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    reader.Reload()
    content = reader.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    started = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {key: MessageToDict(value) for key, value in started.hparams.items()}


@pytest.mark.slow
@pytest.mark.thorough  # two folds trained: the group's tracking; one run's is proven above
def test_a_cv_groups_folds_nest_under_its_mlflow_run_and_group_in_tensorboard(
    tiny_data_dir, tmp_path, monkeypatch
):
    """FOLDS=2 with TRACK=mlflow: the group's MLflow run holds its leaderboard row's numbers (the
    CV score first), each fold is its child, tagged with its place; each fold's events are named
    by the group and fold, and carry both as hyperparameters."""
    from mlflow.tracking import MlflowClient

    from pipeline.core.options import CVOptions
    from pipeline.stages import cv as cv_stage

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)  # the default: SQLite in the runs dir
    where = {"data_dir": tiny_data_dir, "runs_dir": tmp_path / "runs", "submissions_dir": tmp_path / "subs"}
    opts = CVOptions(**where, folds=2, recipe="default", overrides=(*TINY, "augment.where=host"),
                     strategy="cpu", track="mlflow")  # fmt: skip
    metrics = cv_stage.train(opts)
    group = metrics["group"]
    client = MlflowClient(mlflow_runs.tracking_uri(opts.runs_dir))
    experiment = client.get_experiment_by_name("petals-flowers").experiment_id
    [parent] = client.search_runs([experiment], f"tags.`{mlflow_runs.KIND_TAG}` = 'cv_group'")
    board = leaderboard.read(leaderboard.board_file(tmp_path / "subs", "flowers"))
    row = board[board["entry"] == group].iloc[0]
    for column in ("val_macro_f1", "cv_score", "cv_spread", "val_accuracy", "folds", "train_seconds"):
        assert parent.data.metrics[column] == pytest.approx(float(row[column]), abs=0), column
    assert parent.data.metrics["cv_score"] == pytest.approx(metrics["cv_score"], abs=1e-5)
    assert parent.data.tags["cv_group"] == group and parent.data.tags[mlflow_runs.RUN_TAG] == group
    assert parent.data.tags["data_fingerprint"] == row["data_fingerprint"]
    folds = client.search_runs([experiment], f"tags.`{mlflow_runs.PARENT_TAG}` = '{parent.info.run_id}'")
    assert sorted(f.data.tags["fold"] for f in folds) == ["0", "1"]
    for fold in folds:
        tags, run = fold.data.tags, RunDir(opts.runs_dir / fold.data.tags[mlflow_runs.RUN_TAG])
        assert (tags["competition"], tags["recipe"], tags["cv_group"]) == ("flowers", "default", group)
        assert tags["data_fingerprint"] == row["data_fingerprint"]
        assert tags.get("git_commit") == run.read_json(RunDir.RUN_INFO).get("git_commit")
        place = (
            run.file(RunDir.TENSORBOARD) / f"{group}-fold{tags['fold']}"
        )  # TensorBoard's filter: the group
        assert tensorboard_events(place)["train/loss"]
        hparams = _hparams(place)
        assert hparams["cv_group"] == group and hparams["fold"] == float(tags["fold"])


@pytest.mark.parametrize(
    ("tags", "says"),
    [
        ({"study": "../../../outside/pwn", "trial": 1}, "study '../../../outside/pwn' is not a plain name"),
        ({"cv_group": "/tmp/petals-pwn", "fold": 0}, "cv_group '/tmp/petals-pwn' is not a plain name"),
        ({"study": "s", "trial": "1/../../x"}, "trial '1/../../x' is not a whole number"),
    ],
)
def test_a_runs_tags_from_elsewhere_cannot_place_its_events_outside_it(tmp_path, tags, says):
    """tags.json names the run's event folder and comes back in a kernel's output: a name with a
    way out of the run is one line, and nothing is written outside."""
    run = RunDir(tmp_path / "runs" / "r")
    run.path.mkdir(parents=True)
    run.write_json(RunDir.METRICS, {"epochs": 1})
    run.write_json(RunDir.TAGS, tags)
    with pytest.raises(PetalsError, match=re.escape(f"{run.file(RunDir.TAGS)}: {says}")):
        tracking.evaluated(run, "flowers", {}, tmp_path / "board.csv", "none")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not (run.path / "tensorboard").exists()
    assert not (tmp_path.parent / "outside").exists() and not (tmp_path / "outside").exists()


@pytest.mark.parametrize(
    "picture", [b"not a png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\x7f\xff\xff\xff\x7f\xff\xff\xff"]
)
def test_a_runs_pictures_and_numbers_from_elsewhere_are_left_out_not_a_traceback(tmp_path, caplog, picture):
    """A regression writes no confusion.png, so one in its folder came from a kernel's output: not a
    PNG, or one declaring 2 billion px a side, is left out with a line; an epoch count that is not a
    number is step 0; a per_class.csv that is not evaluate's table is not drawn."""
    run = RunDir(tmp_path / "runs" / "r")
    run.path.mkdir(parents=True)
    run.write_json(RunDir.METRICS, {"epochs": "3 epochs"})
    (run.path / RunDir.CONFUSION_PLOT).write_bytes(picture)
    (run.path / RunDir.PER_CLASS).write_text("")
    tracking.evaluated(run, "flowers", {"val_macro_f1": 0.5}, tmp_path / "board.csv", "none")
    assert "evaluate/confusion_matrix is not a picture it can draw; left out" in caplog.text
    events = tensorboard_events(tracking.event_folder(run, {}))
    assert [(step, float(v)) for step, v in events["evaluate/macro_f1"]] == [(0, 0.5)]
