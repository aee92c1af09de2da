"""What a kernel of a fan-out trains (`pipeline/kernel_main.py` calls it): some folds of a CV group
(`make kernel FOLDS=5 FOLD=0,1`, `make kernel-fanout FOLDS=5`), or a share of a study's trials
(`make kernel-fanout TRIALS=N`), each trial with the values the study fixed before the push, since
a kernel without internet cannot reach the study's database. No submission: the runs are merged,
and the trials told to their study, where the fan-out collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime


@dataclass(frozen=True)
class Work:
    settings: dict  # the kernel's SETTINGS
    where: dict  # data_dir, runs_dir, strategy
    config: dict  # recipe, overrides
    stage: Callable  # runs one step, timed; a failure is its line and the kernel's exit
    platform: object
    time_left: Callable[[], float | None]  # train's time limit now


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def train_folds(work: Work, done: dict, label: str = "") -> str:
    """This kernel's folds one after another (each with the session's time left), each one's val and
    test predictions written into its run as it finishes: `make kernel-output` assembles the CV
    group from them without the weights. `done` gets each fold run's id and time; the group's id."""
    from pipeline.core.options import CVOptions
    from pipeline.cv import experiment
    from pipeline.modeling.inference import predict_split
    from pipeline.stages import cv as cv_stage

    folds, tta, where = work.settings["folds"], work.settings["tta"], work.where
    board = where["runs_dir"].parent / "petals_submissions"  # the group's row, once it has every fold
    if work.settings.get("fold_table"):  # dealt where the kernel was made: used if it deals this data
        from pipeline.data.folds import receive_table

        receive_table(where["data_dir"], work.settings["fold_table"])
    group = ""
    for fold in work.settings.get("fold_list") or range(folds):
        opts = CVOptions(**where, **work.config, folds=folds, fold_list=(fold,), tta=tta,
                         time_limit=work.time_left(), submissions_dir=board)  # fmt: skip
        work.stage(f"{label}fold {fold}", cv_stage.train_folds, opts)
        found = experiment.setup(opts)
        run, group = found.fold_run(fold), found.group.name
        for split in ("val", "test"):
            work.stage(f"{label}fold {fold} {split}", predict_split, run, where["data_dir"], split, tta,
                       work.platform)  # fmt: skip
        done[run.name] = now()
    return group


def train_trials(work: Work, fold_runs: dict, trial_runs: dict) -> None:
    """Each trial of this kernel's share, one after another: its run, or with FOLDS=K its CV group's
    folds, trained with the study's values over the recipe. `trial_runs` gets each finished trial's
    run ids (by trial number), `fold_runs` each fold run's time."""
    from pipeline.core.options import TrainOptions
    from pipeline.stages import train as train_stage

    for trial in work.settings["trials"]:
        number, values = trial["number"], tuple(trial["overrides"])
        # The study's values after the recipe's overrides, before --set given to this script.
        recipe, overrides = work.config["recipe"], work.config["overrides"]
        settings_overrides = tuple(work.settings["overrides"])
        extra = overrides[len(settings_overrides) :]
        config = {"recipe": recipe, "overrides": (*settings_overrides, *values, *extra)}
        if work.settings.get("folds"):
            runs: dict = {}
            train_folds(replace(work, config=config), runs, label=f"trial {number} ")
            fold_runs.update(runs)
            trial_runs[str(number)] = sorted(runs)
            continue
        made: dict = {}

        def train(opts, made=made) -> None:  # a judge that never stops it: the metrics come back
            made.update(train_stage.train(opts, judge=lambda epoch, row: None) or {})

        work.stage(
            f"trial {number}", train, TrainOptions(**work.where, **config, time_limit=work.time_left())
        )
        trial_runs[str(number)] = [made["run"]]
