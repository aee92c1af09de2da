"""A run directory: its layout, its id, finding it again, and reading and writing its files.

`runs/<run-id>/` is where `train` puts one run and where evaluate, predict, ensemble, the
leaderboard and kernels find it. Every file name a run holds is spelled here and only here.
A run id is the recipe, backbone, input size and a hash of the resolved config and the labelled data
fingerprint, so the same command on the same data finds (and resumes) the same run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import write_json
from pipeline.core.foreign import text
from pipeline.core.foreign_files import load_json

# An epoch table is a row an epoch of a few numbers: 1,000 epochs (the bound on train.epochs) of
# 40 columns are under 1 MiB.
HISTORY_BYTES = 4 * 2**20
HISTORY_FIELD = 1024


class RunDir:
    """One run's folder and the names of everything in it."""

    CONFIG = "config.json"  # the resolved config
    DATA_MANIFEST = "data_manifest.json"  # the data dir's manifest at training time
    RUN_INFO = "run.json"  # git commit, backend, device, replicas, precision...
    HISTORY = "history.csv"  # one row per epoch
    BEST = "best.weights.h5"  # the best epoch's weights (the weight average with train.ema)
    LAST = "last.weights.h5"
    CURVES = "curves.png"
    METRICS = "metrics.json"  # written last by train: its presence means the run is finished
    CHECKPOINTS = "checkpoints"
    FEATURES = "features"  # the feature cache (pipeline/modeling/features.py), removed once finished
    VAL_EPOCHS = "val_epochs"  # a single run's val probabilities at each scored epoch (val_epochs.py)
    LOCK = "writer.lock"  # held while a `train` writes the run (pipeline.core.lock)
    PER_CLASS = "per_class.csv"
    CONFUSIONS = "confusions.csv"
    CONFUSION_PLOT = "confusion.png"
    MISTAKES_PLOT = "mistakes.png"  # the most confident wrong val images (pipeline/tasks/mistakes.py)
    MISTAKES = "mistakes.csv"  # the most confident wrong val texts
    PREDICTED_PLOT = (
        "predicted_vs_true.png"  # a regression's val numbers (pipeline/tasks/targets/regression_report.py)
    )
    VOCABULARY = "vocabulary.txt"  # a word-level text run's words, one a line: token id = line number + 2
    TOKENIZER = "tokenizer"  # a BERT run's tokenizer, a keras-hub preset folder
    BACKBONE = "backbone.json"  # a BERT run's backbone architecture (keras-hub's config)
    GROUP = "group.json"  # a CV group's folds, fold table and recipe (pipeline/cv/group.py)
    REFIT = "refit.json"  # a refit run's CV group: the evidence for its epochs
    PSEUDO_LABELS = "pseudo_labels.csv"  # a fold run's pseudo-labelled test examples (pipeline/cv/pseudo.py)
    TENSORBOARD = "tensorboard"  # event files, a folder per place (pipeline/runs/tensorboard.py)
    TAGS = "tags.json"  # its CV group and fold, its study and trial (pipeline/runs/tracking.py)
    # The small files worth keeping beside a submission (a kernel copies these to its output).
    SMALL_FILES = (CONFIG, DATA_MANIFEST, RUN_INFO, METRICS, HISTORY, CURVES, PER_CLASS, CONFUSIONS,
                   CONFUSION_PLOT, MISTAKES_PLOT, MISTAKES, PREDICTED_PLOT, VOCABULARY, BACKBONE, GROUP,
                   REFIT, PSEUDO_LABELS, TENSORBOARD, TAGS)  # fmt: skip

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    # ------------------------------------------------------------------ well-known files

    @property
    def config_file(self) -> Path:
        return self.path / self.CONFIG

    @property
    def metrics_file(self) -> Path:
        return self.path / self.METRICS

    @property
    def history_file(self) -> Path:
        return self.path / self.HISTORY

    @property
    def best_weights(self) -> Path:
        return self.path / self.BEST

    @property
    def last_weights(self) -> Path:
        return self.path / self.LAST

    @property
    def checkpoints(self) -> str:
        return str(self.path / self.CHECKPOINTS)

    def weights(self, which: str = "best") -> Path:
        """`best` or `last`: the weights file of that name."""
        return self.path / {"best": self.BEST, "last": self.LAST}[which]

    def predictions(self, split: str, tta: int = 1) -> Path:
        """`val_predictions.npz`, `test_predictions-tta4.npz`: one file per split and TTA setting."""
        return self.path / f"{split}_predictions{f'-tta{tta}' if tta > 1 else ''}.npz"

    # ------------------------------------------------------------------ state

    @property
    def exists(self) -> bool:
        return self.config_file.is_file()

    @property
    def finished(self) -> bool:
        return self.metrics_file.is_file()

    # ------------------------------------------------------------------ reading and writing

    def read_json(self, name: str, default: dict | None = None) -> dict[str, Any]:
        """A JSON file of the run; `default` when it is missing (an error naming it when no default)."""
        path = self.path / name
        if not path.is_file():
            if default is not None:
                return default
            raise PetalsError(f"{path}: missing; train the run first")
        # A run may come back in a kernel's downloaded output: read by the rule for foreign files
        # (inside the run, regular, bounded, not nested past reason), never a traceback.
        try:
            found = load_json(self.path, name, "run file")
        except PetalsError as err:
            raise PetalsError(f"{err}; train the run again (--force)") from None
        if not isinstance(found, dict):
            raise PetalsError(f"{path}: not a JSON object; train the run again (--force)")
        return found

    def read_history(self):
        """The run's epoch table (a pandas DataFrame). A run may come back in a kernel's output:
        its size and its fields are bounded before pandas reads it (a row an epoch: a few KiB)."""
        import pandas as pd

        from pipeline.core.csv_bounds import CsvBounds, check_csv

        check_csv(self.history_file, CsvBounds(HISTORY_BYTES, HISTORY_FIELD))
        try:
            return pd.read_csv(self.history_file)
        except (ValueError, pd.errors.ParserError) as err:
            raise PetalsError(f"{self.history_file}: not an epoch table ({first_line(err)})") from None

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        write_json(self.path / name, payload)

    def read_config(self):
        """The run's resolved config, every key checked again."""
        from pipeline.core.config import read_config

        if not self.config_file.is_file():
            raise PetalsError(f"{self.path}: not a run directory (no {self.CONFIG})")
        return read_config(self.config_file)

    def competition(self) -> str:
        return self.read_json(self.CONFIG)["competition"]

    def metrics(self) -> dict[str, Any]:
        return self.read_json(self.METRICS)

    def trained_on(self) -> dict[str, Any]:
        """The manifest of the data the run was trained on."""
        return self.read_json(self.DATA_MANIFEST)

    def check_same_data(self, manifest: dict[str, Any] | None, data_dir: Path) -> None:
        """A PetalsError unless `manifest` (of `data_dir`) holds the labelled data this run was trained
        on (its test set may be another: a code competition's hidden one)."""
        if manifest is None:
            raise PetalsError(
                f"{data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)"
            )
        trained_on = self.trained_on()
        if data_identity(trained_on) != data_identity(manifest):
            raise PetalsError(
                f"{self.name} was trained on {text(trained_on.get('origin'), 200)} "
                f"({text(data_identity(trained_on)[:15]) or '?'}…), but {data_dir} holds "
                f"{text(manifest.get('origin'), 200)} ({text(data_identity(manifest)[:15]) or '?'}…): "
                "pass the run's --data-dir"
            )

    @contextlib.contextmanager
    def writing(self, what: str = "train") -> Iterator[None]:
        """Hold the run's lock (a second writer is refused), first dropping what a writer killed
        mid-write left: `*.partial` files and Keras's `partial-*.weights.h5` (with the lock held no
        one else is writing them). The folders made only for the lock go again if nothing was
        written in them."""
        from pipeline.core import lock

        made = [p for p in (self.path, *self.path.parents) if not p.exists()]  # what the lock makes
        try:
            with lock.holding(self.file(self.LOCK), what):
                for path in [*self.path.glob("partial-*.weights.h5"), *self.path.rglob("*.partial")]:
                    if path.is_file():
                        path.unlink(missing_ok=True)
                yield
        finally:
            for folder in made:  # innermost first; a folder with anything in it stays
                if not folder.is_dir() or any(folder.iterdir()):
                    break
                folder.rmdir()


# ----------------------------------------------------------------------------- ids and finding runs


def data_identity(manifest: dict[str, Any]) -> str:
    """What a run trained on, from a data dir's manifest: its labelled splits' fingerprint, so
    another test set (a code competition's hidden one) is the same training data. A manifest
    written before petals kept that (2026-11-25) has its whole data's. A run's copy comes back in a
    kernel's output: a fingerprint that is not text is none."""
    found = manifest.get("labelled_fingerprint") or manifest.get("fingerprint", "")
    return found if isinstance(found, str) else ""


def run_id(config, fingerprint: str, size: int) -> str:
    """Same config and data -> same id, so rerunning a command finds (and resumes) its run.
    `size` is the one the competition's task reads: the image's side, or a text's tokens
    (`pipeline.tasks.competitions.size_of`)."""
    # A CV fold keeps its schedule's end since 2026-12-01, no longer its best epoch: one trained
    # before is not this run, and must not be found finished and reused.
    kept = ["the schedule's end"] if config.train.folds else []
    identity = [config.to_dict(), fingerprint, *kept]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return f"{config.recipe}-{config.model.backbone}-{size}-{digest[:8]}"


def locate(runs_dir: Path, name: str) -> RunDir:
    """A run named by its id (under `runs_dir`) or by its path."""
    given = RunDir(name)
    return given if given.exists else RunDir(Path(runs_dir) / name)


def finished_run(runs_dir: Path, name: str) -> RunDir:
    """A finished run by id or path, or a PetalsError that says what is missing."""
    run = locate(runs_dir, name)
    if not run.finished:
        hint = "train it first (make train)" if run.exists else "no such run; check the name"
        raise PetalsError(f"{run}: not a finished run: {hint}")
    return run
