"""What each step of the chain takes, typed: the options of `pipeline.api`'s functions.

The command line's arguments carry the same names and take their defaults from here
(pipeline/stages/arguments.py and each stage's `add_arguments`: every default is written once,
below or in the config), and `from_args` turns a parsed command line into options, so
`python -m pipeline train ...`, `make train` and a Kaggle kernel's `api.train(TrainOptions(...))`
run the same function with the same values. Importing this module imports no TensorFlow: a
caller sets the backend up first.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pipeline.core.config import AUTO_RECIPE, DEFAULT_COMPETITION, DataConfig

T = TypeVar("T")

# Defaults several options share, each written once.
DATA_DIR = Path("data")  # the fetched data
RUNS_DIR = Path("runs")  # run dirs and CV groups
SUBMISSIONS_DIR = Path("submissions")  # submission CSVs and the offline leaderboard
KERNELS_DIR = Path("kernels")  # generated Kaggle kernels
TTA = 1  # test-time augmentation passes (1: the input as it is)
RETRIES = 3  # attempts on Kaggle's server errors and timeouts
# Where runs are tracked besides their TensorBoard events (pipeline.runs.tracking); none by default.
TRACKS = ("none", "mlflow")
TRACK = "none"


@dataclass(frozen=True)
class FetchOptions:
    """Where a competition's data comes from and where it goes (`pipeline.data.sources`)."""

    source: str = "auto"
    data_dir: Path = DATA_DIR
    slug: str | None = None  # None: the spec's default slug
    data_from: Path | None = None  # source dir: the competition's zip or an unpacked folder
    gcs_path: str | None = None
    gcs_in_place: bool = False
    kaggle_input: Path = Path("/kaggle/input")
    sizes: tuple[int, ...] | None = None  # resolutions to keep and verify; None: all present
    synthetic_size: int = DataConfig.image_size  # the embedded data, drawn at the recipes' size
    seed: int = 0
    scale: float | None = None  # None: the embedded dataset's default
    workers: int | None = None
    retries: int = RETRIES
    force: bool = False
    progress: bool = True


@dataclass(frozen=True)
class DeviceOptions:
    """Where a model runs: `pipeline.core.device.pick`'s knobs."""

    backend: str = "auto"  # auto | tensorflow | jax
    strategy: str = "auto"  # auto | tpu | gpu | cpu | ...: device.STRATEGIES
    cpu_replicas: int = 0  # split the CPU into N replicas (multi-replica code without accelerators)
    tpu: str | None = None  # a TPU's name or gRPC address; None: the TPU VM's own


@dataclass(frozen=True)
class ConfigOptions:
    """Which config: a recipe and `--set KEY=VALUE` overrides (`competition=<name>` among them)."""

    recipe: str = AUTO_RECIPE  # auto: tpu, gpu or cpu by the device
    overrides: tuple[str, ...] = ()
    print_config: bool = False  # print the resolved config and exit (the command line's)


@dataclass(frozen=True)
class TrainOptions(ConfigOptions, DeviceOptions):
    data_dir: Path = DATA_DIR
    runs_dir: Path = RUNS_DIR
    run_id: str | None = None  # None: recipe, backbone, size and a hash of the config and data
    checkpoint_dir: str | None = None  # None: the run dir; or gs://bucket/folder
    force: bool = False  # train again over a finished run
    time_limit: float | None = None  # seconds: stop with a checkpoint once reached; a rerun resumes
    keep_checkpoints: int = 2
    progress: bool = True  # each epoch's steps: a bar on a terminal, a line every tenth in a log
    track: str = TRACK


@dataclass(frozen=True)
class ScoreOptions(ConfigOptions, DeviceOptions):
    """A finished run, named by id or found the way `train` names it, scored or predicted."""

    data_dir: Path = DATA_DIR
    runs_dir: Path = RUNS_DIR
    run_id: str | None = None  # an id or a run dir; None: the run `train` makes of the same config
    tta: int = TTA
    submissions_dir: Path = SUBMISSIONS_DIR
    track: str = TRACK


@dataclass(frozen=True)
class CVOptions(TrainOptions):
    """K-fold cross-validation of one recipe (`pipeline.cv.experiment`): the folds to train, and
    how the test set is predicted."""

    folds: int = 5
    fold_list: tuple[int, ...] = ()  # the folds this process trains; (): all of them
    refit: bool = False  # predict with one model refit on all the labelled data, not the fold mean
    choose: str | None = None  # "1": the recipe's candidates (pipeline.cv.choose), else a file's path
    tta: int = TTA
    submissions_dir: Path = SUBMISSIONS_DIR


@dataclass(frozen=True)
class SweepOptions(CVOptions):
    """A search over a recipe (`pipeline.stages.sweep`): each trial a run, or with `folds` a CV group."""

    folds: int = 0  # 0: each trial is one run judged on val; K: a CV group judged out of fold
    space: str = "1"  # "1": the recipe's search space (recipes/spaces/<recipe>.toml), else a file's path
    trials: int = 20  # the study's trials, however many processes share it
    timeout: float | None = None  # seconds: this process starts no trial past it
    storage: str | None = None  # a database URL; None: SQLite in runs/sweeps/
    pruner: str = "median"  # median | hyperband | none


@dataclass(frozen=True)
class EnsembleOptions(DeviceOptions):
    """Runs, or CV groups, blended into one submission (`pipeline.stages.ensemble`)."""

    runs: tuple[str, ...] = ()  # run ids, CV group ids or their dirs: at least two
    weights: tuple[float, ...] | None = None  # one per run; None: equal, or what the method fits
    method: str | None = None  # equal | search | stack (CV groups); None: equal
    search: bool = False  # method "search"
    name: str | None = None  # None: ensemble-<hash of runs and weights>
    tta: int = TTA
    data_dir: Path = DATA_DIR
    runs_dir: Path = RUNS_DIR
    submissions_dir: Path = SUBMISSIONS_DIR
    track: str = TRACK


@dataclass(frozen=True)
class KernelOptions(ConfigOptions):
    """A Kaggle kernel of a recipe (`pipeline.kernels`): generated, checked, pushed, polled, collected."""

    name: str | None = None  # kernel folder and slug; None: petals-<competition>-<recipe>
    kernels_dir: Path = KERNELS_DIR
    owner: str | None = None  # None: the Kaggle credentials' user
    accelerator: str | None = None  # None: the default, or a code competition's
    resume_from: tuple[str, ...] = ()  # kernel outputs (owner/slug, or self) whose runs resume
    kernel_type: str = "script"  # script | notebook
    internet: str | None = None  # on | off; None: on, off for a code competition
    dataset: tuple[str, ...] = ()  # datasets attached (owner/slug)
    model: tuple[str, ...] = ()  # Kaggle models attached (owner/model/framework/variation/version)
    slug: str | None = None  # None: the competition's first
    tta: int = TTA
    folds: int | None = None  # None: one run; K: folds of the recipe's K-fold CV group
    fold_list: tuple[int, ...] = ()  # with folds: only these; (): all of them
    data_dir: Path = DATA_DIR  # output: the data whose CV group the kernel's folds join
    runs_dir: Path = RUNS_DIR
    timeout: int | None = None  # the kernel's longest run, seconds; None: Kaggle's session limit
    submissions_dir: Path = SUBMISSIONS_DIR
    track: str = TRACK  # output, fanout: where the fold runs collected (and their group) are tracked
    # A fan-out (one kernel per fold): kernels at once (None: Kaggle's limit for the accelerator),
    # seconds between status rounds, and how long this command follows them before it stops.
    concurrent: int | None = None
    poll_seconds: float = 60.0
    wait_seconds: float = 13 * 3600.0
    # A fan-out of a study's trials (None: of folds): trials in all, trials per kernel, the search
    # space and the study's database, as `make sweep` takes them.
    trials: int | None = None
    trials_per_kernel: int = 1
    space: str = "1"
    storage: str | None = None
    # What one kernel of such a fan-out runs: (trial number, its overrides) for each of its trials.
    trial_values: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class SubmitOptions:
    competition: str = DEFAULT_COMPETITION
    file: Path | None = None  # None: the newest of the competition's CSVs in submissions_dir
    message: str | None = None  # None: the entry and its val score
    data_dir: Path = DATA_DIR  # the fetched data (its sample submission)
    submissions_dir: Path = SUBMISSIONS_DIR
    slug: str | None = None  # None: the data's, else the competition's first
    retries: int = RETRIES
    force: bool = False  # send again what was already sent
    # A code competition: the kernel `make kernel` generated is pushed, run and submitted.
    kernels_dir: Path = KERNELS_DIR
    kernel: str | None = None  # None: petals-<competition>-<recipe>
    recipe: str = AUTO_RECIPE  # the kernel's recipe, for its default name
    accelerator: str | None = None  # resolves recipe auto; None: the competition's default
    poll_seconds: float = 60.0
    wait_seconds: float = 13 * 3600.0


def from_args(cls: type[T], args: argparse.Namespace, **given) -> T:
    """Options of type `cls` from a parsed command line: every field the command line has, the
    rest from `given` or the field's default."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in given:
            values[field.name] = given[field.name]
        elif hasattr(args, field.name):
            value = getattr(args, field.name)
            values[field.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)
