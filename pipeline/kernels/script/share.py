"""What a kernel of a fan-out trains (`pipeline/kernels/script/main.py` calls it): some folds of a CV group
(`make kernel FOLDS=5 FOLD=0,1`, `make kernel-fanout FOLDS=5`), or a share of a study's trials
(`make kernel-fanout TRIALS=N`), each trial with the values the study fixed before the push, since
a kernel without internet cannot reach the study's database. No submission: the runs are merged,
and the trials told to their study, where the fan-out collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Work:
    settings: dict  # the kernel's SETTINGS
    where: dict  # data_dir, runs_dir, strategy
    overrides: tuple[str, ...]  # the recipe's overrides the kernel was made with (SETTINGS')
    extra: tuple[str, ...]  # --set given to the kernel's script: last
    stage: Callable  # runs one step, timed; a failure is its line and SystemExit with its code
    platform: object
    time_left: Callable[[], float | None]  # train's time limit now
    now: Callable[[], str]  # the time, as the summary writes it
    board: Path  # where a group's leaderboard row goes, once the kernel has every fold

    def config(self, values: tuple[str, ...] = ()) -> dict:
        """The recipe and its overrides: the kernel's, a trial's values, then the script's --set."""
        return {"recipe": self.settings["recipe"], "overrides": (*self.overrides, *values, *self.extra)}


def train_folds(work: Work, done: dict, values: tuple[str, ...] = (), label: str = "") -> None:
    """This kernel's folds one after another (each with the session's time left), each one's val and
    test predictions written into its run as it finishes: `make kernel-output` assembles the CV
    group from them without the weights. `done` gets each fold run's id and time."""
    from pipeline.core.options import CVOptions
    from pipeline.cv import experiment
    from pipeline.modeling.inference import predict_split
    from pipeline.stages import cv as cv_stage

    folds, tta, where = work.settings["folds"], work.settings["tta"], work.where
    if work.settings.get("fold_table"):  # dealt where the kernel was made: used if it deals this data
        from pipeline.data.folds import receive_table

        receive_table(where["data_dir"], work.settings["fold_table"])

    def train(opts: CVOptions) -> None:
        # The CV stage's step, its competition resolved inside it: a bad one is the stage's one line.
        cv_stage.train_folds(opts, cv_stage.competition_of(opts))

    for fold in work.settings.get("fold_list") or range(folds):
        opts = CVOptions(**where, **work.config(values), folds=folds, fold_list=(fold,), tta=tta,
                         time_limit=work.time_left(), submissions_dir=work.board)  # fmt: skip
        work.stage(f"{label}fold {fold}", train, opts)
        competition = cv_stage.competition_of(opts)  # as the stage resolved it: the fold trained
        run = experiment.setup(opts, competition).fold_run(fold)
        for split in ("val", "test"):
            work.stage(f"{label}fold {fold} {split}", predict_split, run, competition, where["data_dir"],
                       split, tta, work.platform)  # fmt: skip
        done[run.name] = work.now()


def train_trials(work: Work, fold_runs: dict, trial_runs: dict, trial_failed: dict) -> None:
    """Each trial of this kernel's share, one after another: its run, or with FOLDS=K its CV group's
    folds, trained with the study's values over the recipe. `trial_runs` gets each finished trial's
    run ids (by trial number), `fold_runs` each fold run's time, `trial_failed` why a trial failed:
    one trial's failure (its one line is in the log) is not its share's. A stop at the session's
    time limit ends them all, with what finished kept."""
    from pipeline.cli import EXIT_PREEMPTED

    for trial in work.settings["trials"]:
        number, values = str(trial["number"]), tuple(trial["overrides"])
        try:
            trial_runs[number] = _train_trial(work, number, values, fold_runs)
        except SystemExit as err:
            if err.code == EXIT_PREEMPTED:
                raise
            trial_failed[number] = f"failed in its kernel (exit {err.code}; its line is in the kernel's log)"


def _train_trial(work: Work, number: str, values: tuple[str, ...], fold_runs: dict) -> list[str]:
    """One trial trained: its run ids (a run, or its group's fold runs)."""
    from pipeline.core.options import TrainOptions
    from pipeline.stages import train as train_stage

    if work.settings.get("folds"):
        runs: dict = {}
        train_folds(work, runs, values, label=f"trial {number} ")
        fold_runs.update(runs)
        return sorted(runs)
    made: dict = {}

    def train(opts) -> None:  # a judge that never stops it: its metrics come back, finished or not
        made.update(train_stage.train(opts, judge=lambda epoch, row: None) or {})

    work.stage(f"trial {number}", train, TrainOptions(**work.where, **work.config(values),
                                                      time_limit=work.time_left()))  # fmt: skip
    return [made["run"]]
