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


def _setup(opts: SweepOptions):
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
    path = space.space_file(opts.space, base.competition, base.recipe, opts.recipe)
    params = space.read_space(path)

    def build(extra):
        given = dataclasses.replace(opts, overrides=(*opts.overrides, *extra))
        return recipe_config.config_from_args(given, platform.device)

    space.check(params, path, build)
    spec = load_competition(base.competition)
    name = f"{spec.name}-{Path(base.recipe).stem}-{path.stem}" + (f"-cv{opts.folds}" if opts.folds else "")
    return base, spec, params, check_name(name, "study name", "--space")


def sweep(opts: SweepOptions) -> dict:
    """Run this process's share of the study's trials; the study's best trial, in words and values."""
    import optuna

    from pipeline.sweep import space, study

    base, spec, params, name = _setup(opts)
    url = study.storage_url(opts.storage, opts.runs_dir, name)
    direction = "maximize" if spec.metric.greater_is_better else "minimize"
    found = study.open_study(name, url, direction, base.seed, opts.pruner, base.train.epochs)
    stale = study.fail_stale(found)
    if stale:
        log.info("sweep: %d trial(s) of a sweep that was killed marked failed", stale)
    state = optuna.trial.TrialState
    counted = (state.COMPLETE, state.PRUNED, state.RUNNING)  # trials run, or being run elsewhere

    def objective(trial) -> float:
        study.mark_trial(trial)
        values = {param.key: param.suggest(trial) for param in params}
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        log.info("sweep: trial %d of %s: %s", trial.number, name, shown)
        overrides = (*opts.overrides, *(space.override(k, v) for k, v in values.items()))
        judged = Trial(trial, spec.score_key, last=opts.folds or base.train.epochs)
        metrics = _run_trial(dataclasses.replace(opts, overrides=overrides), judged)
        if judged.pruned:
            log.info("sweep: trial %d pruned by %s", trial.number, judged.pruned)
            raise optuna.TrialPruned()
        score = _judged_score(opts, spec, metrics)
        trial.set_user_attr("run", metrics.get("group") or metrics.get("run"))
        _board_row(opts, spec, metrics, f"{name} #{trial.number}")
        log.info("sweep: trial %d: %s %.4f", trial.number, spec.metric.title, score)
        return float(score)

    stop = optuna.study.MaxTrialsCallback(opts.trials, states=counted)
    if len(found.get_trials(deepcopy=False, states=counted)) < opts.trials:
        found.optimize(objective, timeout=opts.timeout, callbacks=[stop], catch=())
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


def _board_row(opts: SweepOptions, spec, metrics: dict, trial: str) -> None:
    """A finished trial on the offline leaderboard: a run's row (kind `trial`), or its CV group's
    row (written by the group) marked with the trial."""
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
        **{spec.score_key: round(metrics[spec.score_key], 5)},
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
    summary = {"study": found.study_name, "storage": url, "trials": count, "plots": [str(p) for p in plots]}
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
