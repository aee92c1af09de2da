"""`make kernel-fanout TRIALS=N`: a study's trials drawn here, trained in kernels (the generated script
run as Kaggle runs it, outside the repo, from its own bundle), collected through the real `kaggle`
client against the loopback server, and told to the study as `make sweep` would have judged them."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import optuna
import pandas as pd
import pytest

from pipeline import cli
from pipeline.core.rundir import RunDir
from pipeline.kernels.client import metadata as kernel
from pipeline.runs import leaderboard
from tests.conftest import TINY
from tests.kaggle_server import Behaviour, KaggleTestServer, KernelPlan
from tests.test_sweep import SPACE

pytestmark = pytest.mark.slow  # generates two kernels and runs one, two trials of a tiny model
OVERRIDES = [*TINY, "augment.where=host", "train.epochs=2"]
# Generated at a resolution Kaggle ships; the kernel is run here on the tiny data's 32 px.
KERNEL_SETS = [a for o in OVERRIDES if not o.startswith("data.image_size") for a in ("--set", o)]
BASE = "petals-sweep"


def _fanout(tmp_path, data_dir, *extra: str) -> int:
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    return cli.main([
        "kernel", "fanout", "--kernels-dir", str(tmp_path / "kernels"), "--name", BASE, "--recipe", "default",
        "--owner", "petals-user", "--accelerator", "None", "--trials", "3", "--trials-per-kernel", "2",
        "--space", str(space), "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
        "--submissions-dir", str(tmp_path / "subs"), "--poll-seconds", "0.05", *KERNEL_SETS, *extra,
    ])  # fmt: skip


def _run_kernel(folder, data_dir, tmp_path) -> dict[str, bytes]:
    """The kernel's script run as Kaggle runs it, with no PYTHONPATH: what it leaves in its working folder."""
    working = tmp_path / f"working-{folder.name}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(folder / kernel.SCRIPT), "--working", str(working), "--data-dir", str(data_dir),
         "--strategy", "cpu", "--set", "data.image_size=32"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {p.relative_to(working).as_posix(): p.read_bytes() for p in working.rglob("*") if p.is_file()}


def _study(tmp_path):
    [database] = (tmp_path / "runs" / "sweeps").glob("*.db")
    return optuna.load_study(study_name=database.stem, storage=f"sqlite:///{database}")


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    return shutil.copytree(tiny_data_dir, tmp_path / "data")


@pytest.mark.heavy  # a chain: four fan-out commands and the kernel's script training in a process
@pytest.mark.alone
def test_trials_drawn_here_trained_in_kernels_are_told_to_the_study(
    data_dir, tmp_path, in_kaggle_env, capsys
):
    """Three trials in kernels of two: the first kernel fails once and completes when pushed again;
    the second stops at its time limit with its trial unfinished, which the study is told failed."""
    first, second = f"petals-user/{BASE}-0", f"petals-user/{BASE}-1"
    plans = {first: KernelPlan(versions=[["RUNNING"]]), second: KernelPlan(versions=[["QUEUED"]])}
    behaviour = Behaviour(plans=plans)
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, "--wait-seconds", "0") == 2
        pushed = capsys.readouterr()
    asked = _study(tmp_path).get_trials()
    assert [t.state for t in asked] == [optuna.trial.TrialState.RUNNING] * 3
    assert [(t.user_attrs["fanout"], t.user_attrs["share"]) for t in asked] == [
        (BASE, 0),
        (BASE, 0),
        (BASE, 1),
    ]
    assert f"trial(s) 0, 1 ({first}) version 1: pushed" in pushed.out
    assert f"trial(s) 2 ({second}) version 1: pushed" in pushed.out

    # Kaggle runs the first kernel (its two trials, at the values drawn here); the second stops at its
    # time limit before its one trial finished.
    files = _run_kernel(tmp_path / "kernels" / f"{BASE}-0", data_dir, tmp_path)
    summary = json.loads(files[kernel.SUMMARY])
    assert [t["number"] for t in summary["trials"]] == [0, 1] and set(summary["trial_runs"]) == {"0", "1"}
    stopped = {**summary, "trials": [{"number": 2, "overrides": []}], "trial_runs": {}, "fold_runs": {},
               "stopped": "training reached the session's time limit"}  # fmt: skip
    plans[first].files, plans[first].versions = files, [["RUNNING", "ERROR"], ["COMPLETE"]]
    plans[second].files = {kernel.SUMMARY: json.dumps(stopped).encode()}
    plans[second].versions = [["COMPLETE"]]
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir) == 0
        collected = capsys.readouterr()
        assert _fanout(tmp_path, data_dir) == 0  # a rerun: nothing pushed, nothing asked, nothing told
        again = capsys.readouterr()
    lines = collected.out.splitlines()
    assert f"trial(s) 0, 1 ({first}) version 1: error: test kernel failed; to be pushed again" in lines
    assert f"trial(s) 0, 1 ({first}) version 2: pushed again" in lines
    said = f"trial 2: the kernel finished no run of it (its time limit?): failed (kernel {second})"
    assert said in lines
    assert [p["slug"] for p in behaviour.pushed] == [first, second, first]
    assert "pushed" not in again.out and "trial 0:" not in again.out

    study = _study(tmp_path)
    trials = study.get_trials()
    states = optuna.trial.TrialState
    assert [t.state for t in trials] == [states.COMPLETE, states.COMPLETE, states.FAIL]  # none asked again
    board = pd.read_csv(leaderboard.board_file(tmp_path / "subs", "flowers"))
    for trial in trials[:2]:
        run = RunDir(tmp_path / "runs" / trial.user_attrs["run"])
        config = run.read_config()
        assert config.train.lr_max == trial.params["train.lr_max"]  # the values drawn here, trained there
        assert config.model.dropout == trial.params["model.dropout"]
        history = pd.read_csv(run.history_file)
        assert trial.value == history["val_macro_f1"].dropna().iloc[-1]  # the schedule's end, as sweep judges
        row = board[board["entry"] == run.name].iloc[0]
        assert row["kind"] == "trial" and row["sweep"] == f"{study.study_name} #{trial.number}"
    assert trials[0].params != trials[1].params

    # A state file moved aside starts another fan-out under the same name: the study's finished and
    # failed trials are not taken again; three new ones are asked.
    state = tmp_path / "kernels" / f"{BASE}.fanout.json"
    state.rename(tmp_path / "old.fanout.json")
    plans[first].versions.append(["RUNNING"])
    plans[second].versions.append(["RUNNING"])
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, "--wait-seconds", "0") == 2
    shares = json.loads(state.read_text())["shares"]
    assert [s["trials"] for s in shares] == [[3, 4], [5]]
    assert [t.state for t in _study(tmp_path).get_trials()][3:] == [states.RUNNING] * 3


def test_a_fan_out_of_trials_refuses_what_it_cannot_do(data_dir, tmp_path, capsys):
    assert _fanout(tmp_path, data_dir, "--trials", "0") == 2
    assert "TRIALS=0: a fan-out of trials runs at least one" in capsys.readouterr().err
    assert _fanout(tmp_path, data_dir, "--trials-per-kernel", "0") == 2
    assert "TRIALS_PER_KERNEL=0: at least one trial a kernel" in capsys.readouterr().err
    assert _fanout(tmp_path, data_dir, "--folds", "2", "--fold", "1") == 2
    assert "FOLD= with TRIALS=" in capsys.readouterr().err
    assert not (tmp_path / "kernels").exists() and not (tmp_path / "runs").exists()


@pytest.mark.thorough  # trials fanned out, here of CV groups: the failing-trial test proves the path
def test_trials_of_cv_groups_are_told_their_groups_fold_mean(data_dir, spec, tmp_path, in_kaggle_env, capsys):
    """FOLDS=2: each trial a CV group trained in the kernel; its outputs (fold runs with their saved
    predictions, written directly here) assemble each trial's group, and the study is told the
    folds' mean at the schedule's end."""
    from pipeline.data import folds
    from pipeline.sweep import space
    from pipeline.tasks.recipe_config import load_config
    from tests import test_kernel_folds as made

    name = f"petals-user/{BASE}-0"
    plans = {name: KernelPlan(versions=[["RUNNING"]])}
    behaviour = Behaviour(plans=plans)
    args = ("--trials", "2", "--folds", "2")
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, *args, "--wait-seconds", "0") == 2
    capsys.readouterr()
    asked = _study(tmp_path).get_trials()
    table = folds.fold_table(data_dir, spec, load_config(overrides=made.OVERRIDES))
    output, fold_runs, trial_runs = tmp_path / "made", {}, {}
    for trial in asked:  # each trial's folds end 0.1 higher than the one before's
        values = [space.override(k, v) for k, v in trial.params.items()]
        overrides = [*made.OVERRIDES, *values]
        made.kernel_output(output, data_dir, spec, table, [0, 1], overrides=overrides, lift=trial.number / 10)
        runs = json.loads((output / kernel.SUMMARY).read_text())["fold_runs"]
        fold_runs.update(runs)
        trial_runs[str(trial.number)] = sorted(runs)
    summary = {"folds": 2, "tta": 1, "trials": [{"number": t.number, "overrides": []} for t in asked],
               "fold_runs": fold_runs, "trial_runs": trial_runs}  # fmt: skip
    (output / kernel.SUMMARY).write_text(json.dumps(summary))
    plans[name].files = {
        p.relative_to(output).as_posix(): p.read_bytes() for p in output.rglob("*") if p.is_file()
    }
    plans[name].versions = [["COMPLETE"]]
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, *args) == 0
    out = capsys.readouterr().out
    told = _study(tmp_path).get_trials()
    assert [t.state for t in told] == [optuna.trial.TrialState.COMPLETE] * 2
    groups = {t.user_attrs["run"] for t in told}
    assert len(groups) == 2  # each trial its own group
    for trial in told:
        group = RunDir(tmp_path / "runs" / trial.user_attrs["run"])
        assert group.name.startswith("cv2-") and (group.path / "oof_predictions.npz").is_file()
        fold_run = RunDir(tmp_path / "runs" / group.read_json(RunDir.GROUP)["fold_runs"]["0"])
        assert fold_run.read_config().train.lr_max == trial.params["train.lr_max"]
        # The kernel's folds ended at 0.3 and 0.4, lifted by the trial's number / 10: their mean.
        assert trial.value == pytest.approx(0.35 + trial.number / 10)
        assert (
            f"trial {trial.number}: macro-F1 {0.35 + trial.number / 10:.4f} ({group.name}, from {name})"
            in out
        )


@pytest.mark.thorough  # a further refusal: the fan-out of trials refuses what it cannot do (above)
def test_a_state_file_naming_trials_the_study_did_not_give_is_one_line(
    data_dir, tmp_path, in_kaggle_env, capsys
):
    plans = {f"petals-user/{BASE}-{k}": KernelPlan(versions=[["RUNNING"]]) for k in range(2)}
    with KaggleTestServer(Behaviour(plans=plans)):
        assert _fanout(tmp_path, data_dir, "--wait-seconds", "0") == 2
        capsys.readouterr()
        state = tmp_path / "kernels" / f"{BASE}.fanout.json"
        for trials in ([99], [], [0, 1, 2], [2]):
            raw = json.loads(state.read_text())
            raw["shares"][0]["trials"] = trials
            state.write_text(json.dumps(raw))
            assert _fanout(tmp_path, data_dir, "--wait-seconds", "0") == 2
            said = f"share 0's trials {trials} are not those the study gave it"
            assert said in capsys.readouterr().err, trials


def test_a_trial_that_fails_in_its_kernel_is_named_and_the_others_go_on(monkeypatch, tmp_path):
    from pipeline.cli import EXIT_PREEMPTED
    from pipeline.kernels.script import share as kernel_shares
    from pipeline.stages import train as train_stage

    monkeypatch.setattr(train_stage, "train", lambda opts, judge=None: {"run": f"run-{opts.overrides[-1]}"})

    def stage(name, function, *arguments):
        if name == "trial 1":
            raise SystemExit(2)  # its stage said why in one line and exited 2
        function(*arguments)

    trials = [{"number": n, "overrides": [f"model.dropout=0.{n}"]} for n in range(3)]
    settings = {"recipe": "default", "folds": None, "trials": trials}
    where = {"data_dir": tmp_path, "runs_dir": tmp_path, "strategy": "cpu"}
    work = kernel_shares.Work(settings, where, (), (), stage, None, lambda: None, lambda: "now", tmp_path)
    runs, failed = {}, {}
    kernel_shares.train_trials(work, {}, runs, failed)
    assert runs == {"0": ["run-model.dropout=0.0"], "2": ["run-model.dropout=0.2"]}
    assert list(failed) == ["1"] and "failed in its kernel (exit 2" in failed["1"]

    def stopped(name, function, *arguments):
        raise SystemExit(EXIT_PREEMPTED)  # the session's time limit: every trial stops

    with pytest.raises(SystemExit):
        kernel_shares.train_trials(dataclasses.replace(work, stage=stopped), {}, {}, {})
