"""CV stage: K-fold cross-validation of a recipe (`make train FOLDS=5`, `pipeline/cv/`).

`train` trains the folds (all, or `--fold 0,1`: a kernel's share), each a resumable run, and once
all are finished writes the CV group: out-of-fold predictions of every labelled example, each
fold's score, the CV score and the spread, and a leaderboard row ranked by CV. `evaluate`
assembles the group again from whatever folds are finished (folds trained elsewhere included).
`predict` writes the submission of the fold average, or with `--refit` of one model trained on
every labelled example to the epoch CV chose. With `--choose` each step is over a recipe's
candidates (`pipeline.cv.choose`): train trains every candidate's group and chooses one by CV;
evaluate and predict take the chosen one's group.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.core import arguments, options
from pipeline.core import config as config_module
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions

STEPS = ("train", "evaluate", "predict")


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
    config_module.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    opts = options.from_args(CVOptions, args, progress_bar=not args.quiet and sys.stdout.isatty())
    {"train": train, "evaluate": evaluate, "predict": predict}[args.step](opts)


def _checked(opts: CVOptions) -> CVOptions:
    if opts.folds < 2:
        raise PetalsError(f"FOLDS={opts.folds}: cross-validation needs at least 2 folds")
    return opts


def train(opts: CVOptions) -> dict | None:
    """Train the folds asked for (each resumes), or every candidate's with `choose`; the group's
    metrics once every fold is finished, else None."""
    from pipeline.cv import choose, experiment

    opts = _checked(opts)
    return choose.train(opts) if opts.choose else experiment.train_folds(opts)


def _group_of(opts: CVOptions) -> CVOptions:
    """The options of the group evaluate and predict work on: with `choose`, the chosen candidate's."""
    from pipeline.cv import choose

    opts = _checked(opts)
    return choose.chosen(opts) if opts.choose else opts


def evaluate(opts: CVOptions) -> dict:
    """Assemble the group from its finished folds (trained anywhere): its out-of-fold scores."""
    from pipeline.cv import experiment

    opts = _group_of(opts)
    found = experiment.setup(opts)
    metrics = experiment.assemble(found, opts)
    if metrics is None:
        raise PetalsError(f"{found.group.name}: not every fold is finished; see the line above")
    print(experiment.summary_line(found.group.name, found.spec, metrics))
    return metrics


def predict(opts: CVOptions) -> Path:
    """The submission of the folds' mean, or with `refit` of one model on every labelled example."""
    from pipeline.cv import experiment

    return experiment.predict_group(_group_of(opts))
