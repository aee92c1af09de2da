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
from pathlib import Path

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions, SweepOptions, TrainOptions
from pipeline.core.paths import check_name
from pipeline.stages import arguments, cv
from pipeline.tasks import recipe_config

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
    parser.add_argument(
        "--storage", default=None, help="the study's database URL (default: SQLite in runs/sweeps/)"
    )
    parser.add_argument("--pruner", choices=study.PRUNERS, default=SweepOptions.pruner)
    parser.add_argument(
        "--folds", type=int, default=SweepOptions.folds, help="K: each trial a CV group of K folds; 0: a run"
    )
    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    arguments.add_submissions_dir(parser)
    device.add_arguments(parser)
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

    def epoch(self, epoch: int, row: dict) -> str | None:
        return self.report(epoch, row.get(self.score_key))

    def fold(self, fold: int, metrics: dict | None) -> bool:
        return self.report(fold + 1, (metrics or {}).get(self.score_key)) is not None


@dataclasses.dataclass(frozen=True)
class Setup:
    base: object  # the recipe's config with the command line's overrides: what every trial shares
    spec: object
    params: list
    name: str  # the study's: competition, recipe, space, and a hash of what the trials share
    build: object  # overrides -> the config they make (checked, as a stage builds it)


def _setup(opts: SweepOptions) -> Setup:
    """The base config, its competition, the space (checked) and the study's name."""
    from pipeline.core import device
    from pipeline.sweep import space
    from pipeline.tasks.competitions import load_competition

    if opts.trials < 1:
        raise PetalsError(f"TRIALS={opts.trials}: a sweep runs at least one trial")
    if opts.folds == 1 or opts.folds < 0:
        raise PetalsError(f"FOLDS={opts.folds}: cross-validation needs at least 2 folds (0: one run a trial)")
    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    if platform.hosts.several:
        raise PetalsError("HOSTS: each sweep trial runs in one process; processes share a study by STORAGE")
    base = recipe_config.config_from_args(opts, platform.device)
    if base.train.merge_val and not opts.folds:
        raise PetalsError(
            "train.merge_val=true: a trial would keep no val split to be judged on (FOLDS=K: out of fold)"
        )
    path = space.space_file(opts.space, base.competition, base.recipe, opts.recipe)
    params = space.read_space(path)

    def build(extra):
        given = dataclasses.replace(opts, overrides=(*opts.overrides, *extra))
        return recipe_config.config_from_args(given, platform.device)

    space.check(params, path, build)
    spec = load_competition(base.competition).spec
    name = f"{spec.name}-{Path(base.recipe).stem}-{path.stem}" + (f"-cv{opts.folds}" if opts.folds else "")
    name = f"{name}-{_shared_hash(base, params, opts)}"
    return Setup(base, spec, params, check_name(name, "study name", "--space"), build)


def _shared_hash(base, params: list, opts: SweepOptions) -> str:
    """What every trial of the study shares: the config's values outside the space and the data's
    labelled fingerprint. Another SET=, other data or another image size is another study."""
    import hashlib
    import json

    from pipeline.core.rundir import data_identity
    from pipeline.data.manifest import read_manifest

    searched = {param.key for param in params}
    shared = {
        f"{section}.{key}": value
        for section, values in base.to_dict().items()
        if isinstance(values, dict)
        for key, value in values.items()
        if f"{section}.{key}" not in searched
    }
    shared["data"] = data_identity(read_manifest(opts.data_dir) or {})
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:8]


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

    from pipeline.sweep import space, study

    setup = _setup(opts)
    spec, name = setup.spec, setup.name
    url = study.storage_url(opts.storage, opts.runs_dir, name)
    direction = "maximize" if spec.metric.greater_is_better else "minimize"
    found = study.open_study(name, url, direction, setup.base.seed, opts.pruner)
    state = optuna.trial.TrialState

    def objective(trial) -> float:
        study.mark_trial(trial)
        values = {param.key: param.suggest(trial) for param in setup.params}
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        log.info("sweep: trial %d of %s: %s", trial.number, name, shown)
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
        metrics = _run_trial(dataclasses.replace(opts, overrides=overrides), judged)
        if judged.pruned:
            log.info("sweep: trial %d pruned by %s", trial.number, judged.pruned)
            raise optuna.TrialPruned()
        score = _judged_score(opts, spec, metrics)
        trial.set_user_attr("run", metrics.get("group") or metrics.get("run"))
        if math.isfinite(score):  # Optuna records a trial that returns nan as failed
            _board_row(opts, spec, metrics, score, f"{name} #{trial.number}")
        log.info("sweep: trial %d: %s %.4f", trial.number, spec.metric.title, score)
        return float(score)

    # Each process stops once the trials run and running reach TRIALS; one that starts while others
    # run the last ones may add one each (the count and the start are not one transaction).
    stop = optuna.study.MaxTrialsCallback(opts.trials, states=(state.COMPLETE, state.PRUNED, state.RUNNING))
    if len(found.get_trials(deepcopy=False, states=(state.COMPLETE, state.PRUNED))) < opts.trials:
        found.optimize(objective, timeout=opts.timeout, callbacks=[stop], catch=(Duplicate,))
    return _summary(found, opts, spec, url)


def _judged_score(opts: SweepOptions, spec, metrics: dict) -> float:
    """What the study compares: the score at the schedule's end, not at the best epoch, which was
    chosen on the same rows and leans high (a CV group: its folds' mean there, as CHOOSE judges)."""
    import pandas as pd

    from pipeline.core.rundir import RunDir
    from pipeline.cv import choose

    if opts.folds:
        return choose.judged(metrics)[0]
    history = pd.read_csv(RunDir(opts.runs_dir / metrics["run"]).history_file)
    scored = history[spec.score_key].dropna() if spec.score_key in history else []
    if not len(scored):
        raise PetalsError(f"{metrics['run']}: scored no epoch on val (train.val_every)")
    return float(scored.iloc[-1])


def _run_trial(opts: SweepOptions, judged: Trial) -> dict:
    """The trial's run or CV group trained; its metrics ({} when the pruner stopped it)."""
    from pipeline.modeling.preemption import Preempted
    from pipeline.stages import train as train_stage

    try:
        if opts.folds:
            return cv.train_folds(cv.checked(cv.as_options(CVOptions, opts)), after_fold=judged.fold) or {}
        return train_stage.train(cv.as_options(TrainOptions, opts), judge=judged.epoch) or {}
    except Preempted:
        if judged.pruned is None:  # a signal or the time limit: the sweep stops, the trial fails
            raise
        return {}  # its run stays, resumable, at the epoch it was stopped


def _board_row(opts: SweepOptions, spec, metrics: dict, score: float, trial: str) -> None:
    """A finished trial on the offline leaderboard: a run's row (kind `trial`, its score the one the
    study compares), or its CV group's row (written by the group) marked with the trial."""
    from pipeline.core.rundir import RunDir
    from pipeline.runs import leaderboard

    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    if opts.folds:
        leaderboard.update(board, metrics["group"], sweep=trial)
        return
    run = RunDir(opts.runs_dir / metrics["run"])
    leaderboard.update(
        board,
        run.name,
        **{**leaderboard.run_fields(run), "kind": "trial"},
        time=leaderboard.now(),
        sweep=trial,
        **{spec.score_key: round(score, 5)},  # the study's score: the schedule's end
    )


def _summary(found, opts: SweepOptions, spec, url: str) -> dict:
    import optuna

    from pipeline.sweep import study

    states = [t.state for t in found.trials]
    count = {s.name.lower(): states.count(s) for s in optuna.trial.TrialState if states.count(s)}
    folder = opts.runs_dir / study.FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    plots = study.plots(found, folder)
    line = ", ".join(f"{n} {k}" for k, n in count.items())
    summary = {"study": found.study_name, "storage": study.shown_url(url), "trials": count,
               "plots": [str(p) for p in plots]}  # fmt: skip
    try:
        best = found.best_trial
    except ValueError:  # no trial finished yet
        log.info("sweep: %s: %s; no finished trial yet", found.study_name, line)
        return summary
    log.info(
        "sweep: %s: %s; best trial %d: %s %.4f with %s (run %s)",
        found.study_name, line, best.number, spec.metric.title, best.value,
        ", ".join(f"{k}={v}" for k, v in best.params.items()), best.user_attrs.get("run"),
    )  # fmt: skip
    return {**summary, "best": {"trial": best.number, "score": best.value, "params": best.params,
                                "run": best.user_attrs.get("run")}}  # fmt: skip
