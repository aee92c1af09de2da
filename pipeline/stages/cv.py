"""CV stage: K-fold cross-validation of a recipe (`make train FOLDS=5`, `pipeline/cv/`).

`train` trains the folds (all, or `--fold 0,1`: a kernel's share), each a resumable run, and once
all are finished writes the CV group: out-of-fold predictions of every labelled example, each
fold's score, the CV score and the spread, and a leaderboard row ranked by CV. `evaluate`
assembles the group again from whatever folds are finished (folds trained elsewhere included).
`predict` writes the submission of the fold average, or with `--refit` of one model trained on
every labelled example to the epoch CV chose. With `--choose` each step is over a recipe's
candidates (`pipeline.cv.choose`): train trains every candidate's group and chooses one by CV;
evaluate and predict take the chosen one's group.

The CV stage is the one stage above others: a fold is a train-stage run, a refit a train-stage run
and a predict-stage submission (the contracts in .importlinter say so; no other stage imports one).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions, ScoreOptions, TrainOptions
from pipeline.core.progress import parts_left
from pipeline.core.rundir import RunDir
from pipeline.stages import arguments
from pipeline.tasks import recipe_config
from pipeline.tasks.competitions import Competition

STEPS = ("train", "evaluate", "predict")
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import device

    parser.add_argument(
        "step", choices=STEPS, help="train the folds, assemble the group, or predict the test set"
    )
    parser.add_argument("--folds", type=int, required=True, help="K: the folds of the data's fold table")
    parser.add_argument(
        "--fold",
        dest="fold_list",
        type=arguments.fold_list,
        default=(),
        help="train only these folds, e.g. 0,1",
    )
    parser.add_argument(
        "--refit", action="store_true", help="predict: one model refit on all the labelled data to CV's epoch"
    )
    parser.add_argument(
        "--choose",
        default=None,
        metavar="1|FILE",
        help="CV chooses between the recipe's candidates (1: recipes/candidates/<recipe>.toml) or a file's",
    )
    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    arguments.add_tta(parser)
    arguments.add_submissions_dir(parser)
    device.add_arguments(parser)
    parser.add_argument("--force", action="store_true", help="train the folds again over finished ones")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per fold: stop with a checkpoint; the rerun resumes",
    )
    parser.add_argument(
        "--keep-checkpoints", type=int, default=CVOptions.keep_checkpoints, help="checkpoints kept per fold"
    )
    arguments.add_track(parser)
    recipe_config.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    opts = options.from_args(CVOptions, args, progress=not args.quiet)
    {"train": train, "evaluate": evaluate, "predict": predict}[args.step](opts)


def by_size(step: str, run: Callable[..., Any]) -> Callable[[argparse.Namespace], Any]:
    """The train, evaluate or predict stage's `run`, or, on data its recipe calls small, this
    stage's same step over the recipe's candidates, as FOLDS=5 CHOOSE=1 (pipeline.cv.auto); either
    given the competition the decision resolved (None where it resolved none: the stage's own)."""

    def decide(args: argparse.Namespace) -> Any:
        opts, competition = small_data(step, args)
        if opts is None:
            return run(args, competition)
        return {"train": train, "evaluate": evaluate, "predict": predict}[step](opts, competition)

    return decide


def small_data(step: str, args: argparse.Namespace) -> tuple[CVOptions | None, Competition | None]:
    """The CV options a stage's command line becomes where its recipe's `train.choose_up_to` covers
    the data, else None: it trains or scores one run (a run named, checkpoints elsewhere, ...); and
    the competition resolved to decide, passed down (None where the recipe never chooses)."""
    one_run = ("run_id", "checkpoint_dir", "list_backbones", "print_config")
    if any(getattr(args, key, None) for key in one_run):
        return None, None
    from pipeline.core import device
    from pipeline.cv import auto, choose
    from pipeline.tasks.competitions import load_competition

    opts = options.from_args(CVOptions, args, folds=auto.FOLDS, choose="1", progress=not args.quiet)
    platform = device.pick_from_args(opts)
    config = recipe_config.config_from_args(opts, platform.device)
    if not config.train.choose_up_to:
        return None, None
    competition = load_competition(config.competition)
    spec = competition.spec
    count = auto.labelled_examples(opts.data_dir, spec)
    found, _ = recipe_config.beside_recipe(choose.FOLDER, competition, config.recipe, opts.recipe)
    if not auto.applies(config, count, found is not None):
        return None, competition
    from pipeline.data import folds
    from pipeline.data.manifest import locate_data

    _, labels, grouped = folds.labelled(locate_data(opts.data_dir), spec, config)
    k = auto.folds_for(labels, spec.num_classes, grouped)
    if k < 2:
        log.info("%s: too few examples of a class (or groups) for CV: the recipe alone", step)
        return None, competition
    listed = choose.here(opts, choose.read_candidates(found, found.parents[1]), platform.device)
    reason = choose.cannot_run(opts, listed, platform.device, competition.task)
    if reason is None and len(listed) < 2:
        reason = f"{len(listed)} candidate(s) whose weights are here"
    if reason is not None:
        log.info("%s: small data, but a candidate cannot train here (%s): the recipe alone", step, reason)
        return None, competition
    log.info("%s: %s", step, auto.said(count, k, config, [c.name for c in listed]))
    return dataclasses.replace(opts, folds=k), competition


def competition_of(opts: CVOptions, resolved: Competition | None = None) -> Competition:
    """The competition the options' group config names, resolved once for the stage and passed
    down (`experiment.setup` resolves the same config again, on the same platform); `resolved`
    where the caller resolved it already (the small-data decision: the same recipe and --set)."""
    from pipeline.cv import experiment
    from pipeline.tasks.competitions import load_competition

    if resolved is not None:
        return resolved
    return load_competition(experiment.group_config(opts).competition)


def checked(opts: CVOptions) -> CVOptions:
    if opts.folds < 2:
        raise PetalsError(f"FOLDS={opts.folds}: cross-validation needs at least 2 folds")
    return opts


def train(opts: CVOptions, competition: Competition | None = None) -> dict | None:
    """Train the folds asked for (each resumes), or every candidate's with `choose`; the group's
    metrics once every fold is finished, else None. `competition`: the options', if resolved."""
    from pipeline.cv import choose

    opts = checked(opts)
    competition = competition_of(opts, competition)
    if opts.choose:
        return choose.train(opts, competition, train_folds)
    return train_folds(opts, competition)


def train_folds(
    opts: CVOptions, competition: Competition, after_fold=None, tags: dict | None = None
) -> dict | None:
    """Train the folds asked for (each resumes where it stopped), then the group's scores once every
    fold is finished; the group's metrics, or None while folds are missing. `competition`: the
    options' (`competition_of`). `after_fold(fold, metrics)` (a sweep's trial) sees each fold's
    metrics and may stop the group there; `tags` (its study and trial) join each fold's in its
    tracking."""
    from pipeline.cv import experiment
    from pipeline.stages import train as train_stage

    found = experiment.setup(opts, competition)
    folds, took = list(opts.fold_list or range(opts.folds)), []  # took: the folds trained now, seconds
    for place, fold in enumerate(folds):
        run, started = found.fold_run(fold), time.monotonic()
        trained_before = run.finished
        left = sum(not found.fold_run(f).finished for f in folds[place:])
        log.info("cv: fold %d of %d (%s)%s", fold, opts.folds, run.name, parts_left(took, left, "fold"))
        overrides = (*opts.overrides, f"train.folds={opts.folds}", f"train.fold={fold}")
        fold_opts = dataclasses.replace(as_options(TrainOptions, opts), overrides=overrides, run_id=None)
        if after_fold is None:
            train_stage.train(fold_opts, tags=tags, competition=competition)
        elif after_fold(fold, train_stage.train(fold_opts, judge=_never, tags=tags, competition=competition)):
            return None
        if not trained_before:
            took.append(time.monotonic() - started)
    metrics = experiment.assemble(found, opts)
    return None if metrics is None else {**metrics, "group": found.group.name}


def _never(epoch: int, row: dict) -> None:
    """A judge that never stops a fold: with it, `train` gives the metrics of a fold trained before."""


def as_options(kind: type, opts: CVOptions):
    """The options of another stage, each field taken from the CV stage's."""
    return kind(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(kind)})


def _group_of(opts: CVOptions, competition: Competition) -> CVOptions:
    """The options of the group evaluate and predict work on: with `choose`, the chosen candidate's."""
    from pipeline.cv import choose

    return choose.chosen(opts, competition) if opts.choose else opts


def evaluate(opts: CVOptions, competition: Competition | None = None) -> dict:
    """Assemble the group from its finished folds (trained anywhere): its out-of-fold scores, and
    the examples they get most confidently wrong (pipeline/tasks/mistakes.py)."""
    from pipeline.cv import experiment
    from pipeline.tasks import mistakes

    opts = checked(opts)
    competition = competition_of(opts, competition)
    opts = _group_of(opts, competition)
    found = experiment.setup(opts, competition)
    metrics = experiment.assemble(found, opts)
    if metrics is None:
        raise PetalsError(f"{found.group.name}: not every fold is finished; see the line above")
    print("\n".join([experiment.summary_line(found.group.name, found.spec, metrics),
                     *mistakes.summary_line(metrics.get("mistakes"))]))  # fmt: skip
    return metrics


def predict(opts: CVOptions, competition: Competition | None = None) -> Path:
    """The submission of the folds' mean, or with `refit` of one model on every labelled example."""
    from pipeline.cv import experiment

    opts = checked(opts)
    competition = competition_of(opts, competition)  # the backend, before anything imports Keras
    opts = _group_of(opts, competition)
    found = experiment.setup(opts, competition)
    metrics = experiment.finished_group(found)
    return refit(opts, found, metrics) if opts.refit else experiment.predict_mean(opts, found, metrics)


def refit(opts: CVOptions, found, metrics: dict) -> Path:
    """Train (or resume) the refit run, record which group justifies it, and submit its predictions."""
    from pipeline.cv import experiment
    from pipeline.modeling.inference import find_run
    from pipeline.stages import predict as predict_stage
    from pipeline.stages import train as train_stage

    overrides = experiment.refit_overrides(opts, found, metrics)
    train_opts = dataclasses.replace(as_options(TrainOptions, opts), overrides=overrides, run_id=None)
    train_stage.train(train_opts, competition=found.competition)
    score_opts = dataclasses.replace(as_options(ScoreOptions, opts), overrides=overrides, run_id=None)
    config = recipe_config.config_from_args(score_opts, found.platform.device)
    run = find_run(score_opts, config, found.competition)
    if found.platform.hosts.writer:
        run.write_json(
            RunDir.REFIT,
            {
                "cv_group": found.group.name,
                "cv_score": metrics["cv_score"],
                "cv_spread": metrics["fold_std"],
                "epochs": metrics.get("cv_epoch"),
                "fold_table": found.table.digest,
            },
        )
    path = predict_stage.predict(score_opts, found.competition)
    if found.platform.hosts.writer:  # the refit has no val: its row carries the CV that chose it
        experiment.record_submission(
            opts,
            found.spec,
            run.name,
            path,
            kind="refit",
            cv_score=round(metrics["cv_score"], 5),
            cv_spread=round(metrics["fold_std"], 5),
            folds=opts.folds,
            members=f"refit of {found.group.name} to epoch {metrics.get('cv_epoch')}",
        )
    return path
