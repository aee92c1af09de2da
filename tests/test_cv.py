"""A CV group end to end on the tiny data: folds trained in different processes assemble into one
group, its out-of-fold rows are every labelled example once in id order (each predicted by the
fold that held it out), an interrupted fold resumes, and the refit and fold mean submit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.core import rundir
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions
from pipeline.core.rundir import RunDir
from pipeline.cv import experiment
from pipeline.cv.group import fold_config, group_id
from pipeline.data import folds, splits
from pipeline.data.manifest import read_manifest
from pipeline.modeling.inference import Predictions
from pipeline.stages import cv as cv_stage
from pipeline.tasks.competitions import load_competition, size_of
from pipeline.tasks.recipe_config import load_config
from tests.conftest import REPO, TINY, kill_at_first_checkpoint, run_cli

OVERRIDES = (*TINY, "augment.where=host")
SETS = [arg for value in OVERRIDES for arg in ("--set", value)]


def cv_args(step: str, data_dir, tmp_path, *more: str) -> list[str]:
    return [
        "cv", step, "--folds", "2", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
        "--submissions-dir", str(tmp_path / "subs"), "--recipe", "default", "--backend", "tensorflow",
        *SETS, *more,
    ]  # fmt: skip


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


def names(data_dir, tmp_path) -> tuple[RunDir, list[RunDir]]:
    """The group's run dir and its two folds' run dirs, named as the CV stage names them."""
    config = load_config(overrides=[*TINY, "augment.where=host", "train.folds=2"])
    identity, size = (
        rundir.data_identity(read_manifest(data_dir)),
        size_of(config, load_competition(config.competition)),
    )
    runs = tmp_path / "runs"
    fold_runs = [RunDir(runs / rundir.run_id(fold_config(config, k), identity, size)) for k in range(2)]
    return RunDir(runs / group_id(config, identity)), fold_runs


@pytest.mark.slow
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_folds_trained_in_two_processes_make_one_group_of_every_labelled_example_once(
    data_dir, tmp_path, spec
):
    first = run_cli(*cv_args("train", data_dir, tmp_path, "--fold", "0"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "missing 1 (train them: FOLDS=2 FOLD=1)" in first.stderr
    group, fold_runs = names(data_dir, tmp_path)
    assert fold_runs[0].finished and not fold_runs[1].exists and not group.finished
    second = run_cli(*cv_args("train", data_dir, tmp_path, "--fold", "1"))
    assert second.returncode == 0, second.stderr[-2000:]
    assert group.finished and "CV macro-F1" in second.stderr

    table = folds.FoldTable(*_stored(data_dir), k=2, seed=0)
    oof = Predictions.load(group.predictions("oof"))
    assert oof.ids.tolist() == table.ids.tolist() == sorted(oof.ids.tolist())  # id order, each once
    assert np.array_equal(oof.labels, table.labels)
    for k, run in enumerate(fold_runs):  # each row from the fold that never trained on it
        held = Predictions.load(run.predictions("val"))
        assert sorted(held.ids.tolist()) == sorted(table.ids[table.held_out(k)].tolist())
        rows = table.held_out(k)
        assert np.array_equal(oof.probabilities[rows], held.by_ids(table.ids[rows]).probabilities)
    metrics = group.metrics()
    assert metrics["examples"] == 232 and len(metrics["fold_scores"]) == 2
    assert metrics["cv_score"] == pytest.approx(spec.metric.score(table.labels, oof.probabilities))
    wrong = int((oof.predicted != oof.labels).sum())  # the out-of-fold rows' mistakes, shown
    assert metrics["mistakes"]["wrong"] == wrong and metrics["mistakes"]["of"] == 232
    assert (group.path / "mistakes.png").is_file()

    again = options(data_dir, tmp_path)
    cv_stage.train_folds(again, cv_stage.competition_of(again))  # all folds in this process: nothing to train
    assert np.array_equal(Predictions.load(group.predictions("oof")).probabilities, oof.probabilities)
    assert group.metrics()["cv_score"] == metrics["cv_score"]

    board = pd.read_csv(tmp_path / "subs" / "leaderboard-flowers.csv")
    row = board[board["entry"] == group.name].iloc[0]
    assert (
        row["kind"] == "cv"
        and row["folds"] == 2
        and row["cv_score"] == pytest.approx(metrics["cv_score"], abs=1e-5)
    )

    cv_stage.predict(options(data_dir, tmp_path))
    submission = pd.read_csv(tmp_path / "subs" / f"{group.name}.csv")
    assert len(submission) == 104
    cv_stage.predict(options(data_dir, tmp_path, refit=True))
    refits = [RunDir(p.parent) for p in (tmp_path / "runs").glob("*/refit.json")]
    assert len(refits) == 1 and refits[0].read_json(RunDir.REFIT)["cv_group"] == group.name
    refit_config = refits[0].read_config()
    assert refit_config.train.merge_val and refit_config.train.folds == 0  # every labelled example
    assert refit_config.train.epochs == metrics["cv_epoch"]
    assert refits[0].read_json(RunDir.RUN_INFO)["train_images"] == 232


def _stored(data_dir):
    frame = pd.read_csv(data_dir / "folds" / "k2-seed0.csv", dtype={"id": str})
    return frame["id"].to_numpy(), frame["label"].to_numpy(), frame["fold"].to_numpy()


@pytest.mark.slow
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_an_interrupted_fold_resumes_where_it_stopped(data_dir, tmp_path):
    command = [sys.executable, "-m", "pipeline", *cv_args("train", data_dir, tmp_path, "--fold", "0")]
    command[command.index("train.epochs=2")] = "train.epochs=3"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    config = load_config(overrides=[*TINY, "augment.where=host", "train.folds=2", "train.epochs=3"])
    identity, size = (
        rundir.data_identity(read_manifest(data_dir)),
        size_of(config, load_competition(config.competition)),
    )
    run = RunDir(tmp_path / "runs" / rundir.run_id(fold_config(config, 0), identity, size))
    kill_at_first_checkpoint(command, env, run.path)
    second = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming" in second.stderr
    assert pd.read_csv(run.history_file)["epoch"].tolist() == [1, 2, 3]  # no epoch twice


def test_impossible_cv_settings_are_refused_in_one_line(data_dir, tmp_path):
    with pytest.raises(
        PetalsError, match=r"class '.*' has 2 labelled examples, fewer than the folds: at most FOLDS=2"
    ):
        set_up(options(data_dir, tmp_path, folds=3))
    with pytest.raises(PetalsError, match=r"FOLD=5: folds are 0\.\.1"):
        set_up(options(data_dir, tmp_path, fold_list=(5,)))
    with pytest.raises(PetalsError, match=r"train\.folds and train\.merge_val exclude each other"):
        set_up(options(data_dir, tmp_path, overrides=(*OVERRIDES, "train.merge_val=true")))
    assert not (tmp_path / "runs").exists() and not (data_dir / "folds").exists()  # nothing written


def set_up(opts: CVOptions) -> experiment.Setup:
    """The group's setup on the competition the CV stage resolves for the options."""
    return experiment.setup(opts, cv_stage.competition_of(opts))


def options(data_dir, tmp_path, **given) -> CVOptions:
    return CVOptions(
        **{
            "folds": 2, "data_dir": data_dir, "runs_dir": tmp_path / "runs",
            "submissions_dir": tmp_path / "subs", "recipe": "default", "overrides": OVERRIDES,
            "backend": "tensorflow", "strategy": "cpu", **given,
        }
    )  # fmt: skip


def test_a_fold_run_of_another_fold_table_is_refused_before_its_rows_are_used(data_dir, tmp_path, spec):
    from pipeline.cv.group import check_dealt

    table = splits.fold_table(data_dir, spec, load_config(overrides=[*OVERRIDES, "train.folds=2"]))
    run = RunDir(tmp_path / "fold0")
    run.path.mkdir()
    run.write_json(RunDir.RUN_INFO, {"fold_table": table.digest})
    check_dealt(run, 0, table)  # the table it trained on: used
    run.write_json(RunDir.RUN_INFO, {"fold_table": "0123456789abcdef"})  # dealt elsewhere, or dealt again
    with pytest.raises(PetalsError, match=r"fold 0 \(fold0\): trained on fold table 0123456789abcdef, not"):
        check_dealt(run, 0, table)
    run.write_json(RunDir.RUN_INFO, {})  # a run that never recorded one
    with pytest.raises(PetalsError, match="trained on fold table unrecorded"):
        check_dealt(run, 0, table)


def test_a_refit_trains_on_every_example_the_folds_dealt(data_dir, tmp_path, spec):
    from types import SimpleNamespace

    cats = load_spec("dogs-vs-cats")
    for competition, keep_val, merged in ((spec, False, "true"), (spec, True, "false"), (cats, True, "true")):
        config = load_config(
            overrides=[*OVERRIDES, "train.folds=2", f"train.folds_keep_val={str(keep_val).lower()}"]
        )
        found = SimpleNamespace(config=config, spec=competition)
        refit = experiment.refit_overrides(options(data_dir, tmp_path), found, {"cv_epoch": 1})
        assert f"train.merge_val={merged}" in refit and "train.folds=0" in refit and "train.epochs=1" in refit
    # A recipe frozen for every epoch (a head on features) refits frozen for as many as it trains.
    frozen = load_config(overrides=[*OVERRIDES, "train.folds=2", "train.epochs=6", "train.frozen_epochs=6"])
    refit = experiment.refit_overrides(
        options(data_dir, tmp_path), SimpleNamespace(config=frozen, spec=spec), {"cv_epoch": 3}
    )
    assert "train.epochs=3" in refit and "train.frozen_epochs=3" in refit
    load_config(overrides=[override for override in refit if override != "train.pseudo_labels="])  # valid


def test_each_folds_line_says_the_time_left_at_the_pace_of_the_folds_trained(
    data_dir, tmp_path, monkeypatch, caplog
):
    from types import SimpleNamespace

    from pipeline.stages import train as train_stage

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(cv_stage, "time", SimpleNamespace(monotonic=lambda: clock.now))

    def train(
        opts, tags=None, competition=None
    ):  # a fold that takes two minutes (and leaves no run: none finished)
        clock.now += 120

    monkeypatch.setattr(train_stage, "train", train)
    caplog.set_level("INFO", logger="pipeline.stages.cv")
    opts = options(data_dir, tmp_path)
    assert cv_stage.train_folds(opts, cv_stage.competition_of(opts)) is None
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cv: fold")]
    _, fold_runs = names(data_dir, tmp_path)
    assert said == [
        f"cv: fold 0 of 2 ({fold_runs[0].name})",  # no fold trained yet: no pace to go by
        f"cv: fold 1 of 2 ({fold_runs[1].name}); about 2 min 00 s left (2 min 00 s a fold)",
    ]


@pytest.mark.slow
def test_a_fold_keeps_its_schedules_end_not_the_epoch_its_rows_scored_best(
    data_dir, tmp_path, cpu, monkeypatch
):
    """A fold's val rows are the out-of-fold rows its group is scored on: an epoch chosen on them
    would make the CV score lean high, so a fold keeps its latest scored epoch even where an earlier
    one scored better (a single run keeps its best: tests/test_evaluate.py says how it is told)."""
    from pipeline.modeling import trainer
    from pipeline.stages import train

    spec = load_spec("flowers")
    real_score, saved = trainer.Trainer._score, []

    def first_epoch_best(self, val, epoch):  # as if the first epoch had scored best on these rows
        scores = real_score(self, val, epoch)
        return {**scores, spec.score_key: 0.99 if len(self.history) == 0 else 0.01}

    monkeypatch.setattr(trainer.Trainer, "_score", first_epoch_best)
    real_save = trainer.save_weights
    monkeypatch.setattr(
        trainer, "save_weights", lambda net, path: saved.append(path.name) or real_save(net, path)
    )
    config = load_config(overrides=[*OVERRIDES, "train.folds=2"])
    job = train.prepare(config, cpu, data_dir, tmp_path / "runs", None, None)
    train.fit(job, progress=False)
    run = RunDir(job.run_dir)
    best, last = run.best_weights.name, run.last_weights.name
    assert saved == [best, last, best]  # the first epoch's, then the end's as both
    assert run.metrics()["best_epoch"] == 2 and run.metrics()[spec.score_key] == pytest.approx(0.01)
