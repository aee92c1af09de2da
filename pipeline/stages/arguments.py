"""The command-line arguments several stages share, each defined once."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipeline.core import options
from pipeline.core.config import DEFAULT_COMPETITION


def add_data_dir(
    parser: argparse.ArgumentParser, help: str = "fetched data dir", default=options.DATA_DIR
) -> None:
    parser.add_argument("--data-dir", type=Path, default=default, help=help)


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=options.RUNS_DIR, help="where run directories are")


def add_submissions_dir(
    parser: argparse.ArgumentParser, help: str = "submission CSVs and the leaderboard"
) -> None:
    parser.add_argument("--submissions-dir", type=Path, default=options.SUBMISSIONS_DIR, help=help)


def add_competition(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--competition", default=DEFAULT_COMPETITION, help="competition under competition/<name>/"
    )


# The sweep's database URL may hold a password: Make passes STORAGE in this variable, which no
# command line echoes and `ps` does not show (`--storage` is for a URL without one).
STORAGE_VARIABLE = "PETALS_STORAGE"


def add_storage(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--storage",
        default=os.environ.get(STORAGE_VARIABLE) or None,
        help=f"{help} (default: ${STORAGE_VARIABLE}, else SQLite in runs/sweeps/)",
    )


def fold_list(text: str) -> tuple[int, ...]:
    """`0,1` -> (0, 1): the folds a process (or a kernel) trains."""
    try:
        folds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: fold numbers separated by commas, e.g. 0,1") from None
    if len(set(folds)) != len(folds):
        raise argparse.ArgumentTypeError(f"{text!r}: a fold is listed twice")
    return folds


def add_tta(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tta", type=int, default=options.TTA, help="test-time augmentation passes (1: the image as it is)"
    )


def add_track(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--track",
        choices=options.TRACKS,
        default=options.TRACK,
        help="mlflow: also track the run in MLflow ($MLFLOW_TRACKING_URI, else SQLite in the runs dir)",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """How the stages that work on a finished run find it: by id or path, or the way `train` names it."""
    from pipeline.core import device
    from pipeline.tasks import recipe_config

    add_data_dir(parser)
    add_runs_dir(parser)
    parser.add_argument(
        "--run",
        dest="run_id",
        default=None,
        help="run id or run dir (default: the run `train` makes of the same --recipe and --set)",
    )
    device.add_arguments(parser, tpu=False)
    add_track(parser)
    recipe_config.add_config_arguments(parser)


def named_run(opts, platform, resolved=None):
    """The finished run the run arguments name and its competition, resolved once for the stage:
    `--run`'s (the competition its config names), else the one `train` makes of the same --recipe,
    --set and data (the competition they name: `resolved`, where the caller resolved it)."""
    from pipeline.core import rundir
    from pipeline.modeling.inference import find_run
    from pipeline.tasks import recipe_config
    from pipeline.tasks.competitions import load_competition

    if opts.run_id:
        run = rundir.finished_run(opts.runs_dir, opts.run_id)
        return run, load_competition(run.competition())
    config = recipe_config.config_from_args(opts, platform.device)
    competition = resolved or load_competition(config.competition)
    return find_run(opts, config, competition), competition
