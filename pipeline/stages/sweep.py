"""Sweep stage: an Optuna search over a recipe (`make sweep`, `pipeline/sweep/`).

The search space is a file beside the recipes (`recipes/spaces/<recipe>.toml`, or `--space
FILE`), checked against the config before any trial. Each trial is a petals run of the recipe
with the trial's values set over it, judged by its val score, or with `--folds K` a CV group
judged out of fold; each reports its epochs' val scores (a CV group: its folds') to the study,
whose pruner stops a trial that trails the others at the same point. The study lives in a database
(SQLite in runs/sweeps/, or `--storage URL`): several processes, on one machine or several, split
its `--trials`, a killed sweep's rerun goes on with it, and a trial that was run before (the same
values) is found finished. Finished trials get their leaderboard rows; the study's plots are
written beside its database.

The sweep stage is above the CV stage: a trial is a train-stage run or a CV-stage group.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import time

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions, SweepOptions, TrainOptions
from pipeline.core.progress import parts_left
from pipeline.stages import arguments, cv
from pipeline.sweep import setup as setups
from pipeline.tasks import recipe_config
from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import device
    from pipeline.sweep import study

    parser.add_argument(
        "--space",
        default=SweepOptions.space,
        metavar="1|FILE",
        help="the search space: 1, the recipe's (recipes/spaces/<recipe>.toml), or a file",
    )
    parser.add_argument("--trials", type=int, default=SweepOptions.trials, help="the study's trials in all")
    parser.add_argument("--timeout", type=float, default=None, help="seconds: start no trial past them")
    arguments.add_storage(parser, "the study's database URL")
    parser.add_argument("--pruner", choices=study.PRUNERS, default=SweepOptions.pruner)
    parser.add_argument(
        "--folds", type=int, default=SweepOptions.folds, help="K: each trial a CV group of K folds; 0: a run"
    )
    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    arguments.add_submissions_dir(parser)
    device.add_arguments(parser)
    arguments.add_track(parser)
    recipe_config.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    sweep(options.from_args(SweepOptions, args))


@dataclasses.dataclass
class Trial:
    """One trial as the stages see it: it reports a score at each step (an epoch, or a fold) and is
    told to stop when the pruner says so."""

    trial: object  # optuna.Trial
    score_key: str
    last: int  # the last step (epochs, or folds): a trial that reached it is finished, not pruned
    pruned: str | None = None

    def report(self, step: int, score: float | None) -> str | None:
        if score is None or not math.isfinite(score):
            return None
        self.trial.report(score, step)
        if step < self.last and self.trial.should_prune():
            self.pruned = f"the sweep's pruner (trial {self.trial.number}, step {step}: {score:.4f})"
        return self.pruned

    @property
    def tags(self) -> dict:
        """The trial's runs' tags in their tracking: its study and number (pipeline/runs/tracking.py)."""
        return {"study": self.trial.study.study_name, "trial": self.trial.number}

    def epoch(self, epoch: int, row: dict) -> str | None:
        return self.report(epoch, row.get(self.score_key))

    def fold(self, fold: int, metrics: dict | None) -> bool:
        return self.report(fold + 1, (metrics or {}).get(self.score_key)) is not None


class Duplicate(Exception):
    """A trial whose values another process is running now: it fails, and the next one is drawn."""


def _same_values(found, trial) -> float | None:
    """The score of a finished trial with this trial's values (its run was trained once), or None;
    `Duplicate` when a running one has them."""
    import optuna

    state = optuna.trial.TrialState
    for other in found.get_trials(deepcopy=False, states=(state.COMPLETE, state.RUNNING)):
        if other.number != trial.number and other.params == trial.params:
            if other.state == state.RUNNING:
                raise Duplicate(f"trial {trial.number}: trial {other.number} is running the same values")
            trial.set_user_attr("same_as", other.number)
            trial.set_user_attr("run", other.user_attrs.get("run"))
            return other.value
    return None


def sweep(opts: SweepOptions) -> dict:
    """Run this process's share of the study's trials; the study's best trial, in words and values."""
    import optuna

    from pipeline.core import device
    from pipeline.runs import tracking
    from pipeline.sweep import space, study, turns
    from pipeline.tasks.competitions import load_competition

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    if platform.hosts.several:
        raise PetalsError("HOSTS: each sweep trial runs in one process; processes share a study by STORAGE")
    competition = load_competition(setups.base_config(opts, platform.device).competition)
    setup = setups.setup(opts, platform.device, competition)
    spec, name = setup.spec, setup.name
    url = study.storage_url(opts.storage, opts.runs_dir, name)
    direction = "maximize" if spec.metric.greater_is_better else "minimize"
    found = study.open_study(name, url, direction, setup.base.seed, opts.pruner)

    took: list[float] = []  # this process's trials that trained, seconds each: the time left's pace

    def objective(trial) -> float:
        study.mark_trial(trial)
        values = {param.key: param.suggest(trial) for param in setup.params}
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        log.info(
            "sweep: trial %d of %s: %s%s", trial.number, name, shown, _time_left(found, opts.trials, took)
        )
        started = time.monotonic()
        earlier = _same_values(found, trial)
        if earlier is not None:
            log.info(
                "sweep: trial %d: the values of trial %d, scored %.4f",
                trial.number,
                trial.user_attrs["same_as"],
                earlier,
            )
            return earlier
        overrides = (*opts.overrides, *(space.override(k, v) for k, v in values.items()))
        last = opts.folds or setup.build(tuple(space.override(k, v) for k, v in values.items())).train.epochs
        judged = Trial(trial, spec.score_key, last=last)
        metrics = _run_trial(dataclasses.replace(opts, overrides=overrides), competition, judged)
        took.append(time.monotonic() - started)  # a pruned trial's too: the pruner shortens trials
        if judged.pruned:
            log.info("sweep: trial %d pruned by %s", trial.number, judged.pruned)
            raise optuna.TrialPruned()
        score = setups.judged_score(opts.runs_dir, opts.folds, spec, metrics)
        trial.set_user_attr("run", metrics.get("group") or metrics.get("run"))
        if math.isfinite(score):  # Optuna records a trial that returns nan as failed
            setups.board_row(
                opts.runs_dir, opts.submissions_dir, spec, metrics, score, f"{name} #{trial.number}"
            )
        log.info("sweep: trial %d: %s %.4f", trial.number, spec.metric.title, score)
        return float(score)

    turns.run_share(found, objective, opts.trials, opts.timeout, url, catch=(Duplicate,))
    summary = study.summary(found, spec, url, opts.runs_dir)
    tracking.study_finished(opts.runs_dir, spec.name, summary, opts.track)  # MLflow's study run, if asked
    return summary


def _time_left(found, trials: int, took: list[float]) -> str:
    """The time left for the study's trials not ended yet (this one too), one after another at the
    pace of this process's trials: a trial found finished before took no time, and is not counted."""
    import optuna

    ended = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    left = max(trials - len(found.get_trials(deepcopy=False, states=ended)), 1)
    return parts_left(took, left, "trial")


def _run_trial(opts: SweepOptions, competition: Competition, judged: Trial) -> dict:
    """The trial's run or CV group (on `competition`, the study's) trained; its metrics ({} when the
    pruner stopped it)."""
    from pipeline.modeling.preemption import Preempted
    from pipeline.stages import train as train_stage

    try:
        if opts.folds:
            folds = cv.checked(cv.as_options(CVOptions, opts))
            return cv.train_folds(folds, competition, after_fold=judged.fold, tags=judged.tags) or {}
        trial = cv.as_options(TrainOptions, opts)
        return train_stage.train(trial, judge=judged.epoch, tags=judged.tags, competition=competition) or {}
    except Preempted:
        if judged.pruned is None:  # a signal or the time limit: the sweep stops, the trial fails
            # Its values go back in the queue: the rerun's next trial takes them, finds the same run
            # (its id is its config's) and resumes it from its checkpoint, rather than drawing anew.
            judged.trial.study.enqueue_trial(judged.trial.params)
            raise
        return {}  # its run stays, resumable, at the epoch it was stopped
