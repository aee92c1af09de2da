"""petals as a Python library: the chain fetch -> train -> evaluate -> predict -> submit.

Each function takes typed options and does what the stage of the same name does: the command line
(`python -m pipeline <stage>`, which the Make targets run) parses its arguments into these options
and calls the same function, and so does the Kaggle kernel `make kernel` writes. So a notebook can
run the chain without a shell:

    from pipeline import api
    api.fetch("flowers", api.FetchOptions(data_dir=Path("data-flowers")))
    run = api.TrainOptions(data_dir=Path("data-flowers"), overrides=("competition=flowers",))
    api.train(run)
    api.evaluate(api.ScoreOptions(data_dir=run.data_dir, overrides=run.overrides))
    api.predict(api.ScoreOptions(data_dir=run.data_dir, overrides=run.overrides))
    api.submit(api.SubmitOptions(competition="flowers", data_dir=run.data_dir))

Cross-validation is the same chain over a CV group (`api.cv_train`, `api.cv_evaluate`,
`api.cv_predict` with `api.CVOptions(folds=5, ...)`), `api.ensemble` blends runs or groups, and
`api.sweep` searches a recipe's space with Optuna.

A run is found the way `train` names it (recipe, overrides, data), so the scoring steps take the
training's recipe and overrides, or its `run_id`. Errors a user can fix raise
`pipeline.core.errors.PetalsError` with one line; a run stopped on a signal or its time limit
raises `Preempted` after its checkpoint, and the same call again resumes it. The device is picked
in each call, before Keras is imported (it fixes the backend), and once per process.

Stage modules are imported inside each function: importing this module imports neither
TensorFlow nor JAX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.core.options import (
    ConfigOptions,
    CVOptions,
    DeviceOptions,
    EnsembleOptions,
    FetchOptions,
    KernelOptions,
    ScoreOptions,
    SubmitOptions,
    SweepOptions,
    TrainOptions,
)

__all__ = [
    "CVOptions",
    "ConfigOptions",
    "DeviceOptions",
    "EnsembleOptions",
    "FetchOptions",
    "KernelOptions",
    "ScoreOptions",
    "SubmitOptions",
    "SweepOptions",
    "TrainOptions",
    "cv_evaluate",
    "cv_predict",
    "cv_train",
    "ensemble",
    "evaluate",
    "fetch",
    "kernel",
    "predict",
    "submit",
    "sweep",
    "train",
]


def fetch(competition: str = DEFAULT_COMPETITION, options: FetchOptions | None = None) -> dict[str, Any]:
    """The competition's data into `options.data_dir` (Kaggle, gs://, /kaggle/input, a local copy or
    the embedded dataset); its manifest. A complete data dir is left as it is unless `force`."""
    from pipeline.stages import fetch as stage

    return stage.fetch_competition(competition, options or FetchOptions())


def train(options: TrainOptions) -> dict | None:
    """Train (or resume) the run the options name; its metrics, or None if it was finished before."""
    from pipeline.stages import train as stage

    return stage.train(options)


def evaluate(options: ScoreOptions) -> dict:
    """Score a finished run on its val split: report files in the run dir, a leaderboard row."""
    from pipeline.stages import evaluate as stage

    return stage.evaluate_run(options)


def predict(options: ScoreOptions) -> Path:
    """A finished run's test predictions and its submission CSV, whose path is returned."""
    from pipeline.stages import predict as stage

    return stage.predict(options)


def cv_train(options: CVOptions) -> dict | None:
    """Train a recipe's K folds (`options.fold_list`: a share of them), each a resumable run; the CV
    group's metrics once every fold is finished, else None. `options.choose`: every candidate's
    folds, then CV's choice (the record `choice.json` holds)."""
    from pipeline.stages import cv as stage

    return stage.train(options)


def cv_evaluate(options: CVOptions) -> dict:
    """The CV group assembled from its finished folds: out-of-fold scores, a leaderboard row."""
    from pipeline.stages import cv as stage

    return stage.evaluate(options)


def cv_predict(options: CVOptions) -> Path:
    """The CV group's submission: the folds' mean, or with `options.refit` one model on all the
    labelled data trained to CV's epoch; its path."""
    from pipeline.stages import cv as stage

    return stage.predict(options)


def sweep(options: SweepOptions) -> dict:
    """This process's share of an Optuna study's trials over a recipe's search space (each a run, or
    a CV group with `options.folds`); the study's counts, plots and best trial."""
    from pipeline.stages import sweep as stage

    return stage.sweep(options)


def ensemble(options: EnsembleOptions) -> Path:
    """Blend runs (on val) or CV groups (judged out of fold) into one submission; its path."""
    from pipeline.stages import ensemble as stage

    return stage.ensemble(options)


def kernel(action: str, options: KernelOptions) -> Any:
    """A Kaggle kernel of a recipe (`pipeline.kernels`): "generate" writes and checks
    `kernels/<name>/` and "check" checks it again (each returns its folder), "push" uploads it,
    "status" returns how its run stands (a line), "output" downloads what it wrote and records the
    run on the offline leaderboard (a FOLDS kernel's fold runs join their CV group); "fanout" pushes
    one kernel per fold of `options.folds`, follows them and collects each into its CV group."""
    from pipeline.stages import kernel as stage

    return stage.kernel(action, options)


def submit(options: SubmitOptions) -> None:
    """Check the competition's newest submission (or `options.file`) and send it: the CSV, or in a
    code competition the kernel's version and its output. A dry run without Kaggle credentials."""
    from pipeline.stages import submit as stage

    stage.submit(options)
