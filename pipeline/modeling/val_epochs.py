"""Each scored epoch's val probabilities, kept in a single run's folder.

A single run keeps the epoch that scored best on its val rows, so the score of those weights on
those rows was chosen on them. Evaluate scores the choice itself instead (`pipeline.cv.crossfit`):
each part of val at the epoch the other parts chose, which needs every scored epoch's predictions.
A CV fold keeps its schedule's end, chooses nothing, and keeps none.

`val_epochs/labels.npy` and `val_epochs/epoch-<n>.npy`, in the order training scored val (the order
evaluate predicts it in: the same split, read the same way). A run folder may come back from a
kernel's output, so each file's shape is read from its header and checked before it is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.rundir import RunDir
from pipeline.data import targets

LABELS = "labels.npy"
# An epoch's probabilities past this many values (64 MiB of float32; the real flowers' val holds
# 0.4 M) are not kept: a run folder holds one file an epoch, and its choice is then scored on the
# rows that made it, as the summary says.
MAX_VALUES = 1 << 24


def _epoch_file(folder: Path, epoch: int) -> Path:
    return folder / f"epoch-{epoch}.npy"


def _save(path: Path, array: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object, so numpy adds no `.npy` to the temporary name
            np.save(f, array, allow_pickle=False)

    write_atomically(path, write)


def keep(run: RunDir, epoch: int, probabilities: np.ndarray, labels: np.ndarray) -> None:
    """Epoch `epoch`'s (1-based) val probabilities, padding dropped; a rerun of the epoch (a resume)
    writes it again. Nothing past MAX_VALUES."""
    if np.size(probabilities) > MAX_VALUES:
        return
    folder = run.file(RunDir.VAL_EPOCHS)
    folder.mkdir(exist_ok=True)
    if epoch == 1 or not (folder / LABELS).is_file():
        _save(folder / LABELS, targets.stored(np.asarray(labels)))
    _save(_epoch_file(folder, epoch), np.asarray(probabilities, np.float32))


def choice(
    run: RunDir, labels: np.ndarray, kept: np.ndarray, key: str
) -> tuple[list[int], list[np.ndarray]] | None:
    """Where a single run kept the epoch that scored best on its val rows (by `key`) out of several
    scored: those epochs and each one's val probabilities, the kept epoch's being `kept` (what
    evaluate or a blend predicted with the kept weights, TTA and all). None where nothing was
    chosen: a CV fold (its schedule's end), one scored epoch, a run trained before its epochs' val
    predictions were kept."""
    history = run.read_history() if run.history_file.is_file() else None
    if history is None or key not in history or "epoch" not in history:
        return None
    epochs = [int(e) for e in history.dropna(subset=[key])["epoch"]]
    best = run.metrics().get("best_epoch")
    if len(epochs) < 2 or best not in epochs:
        return None
    found = read(run, epochs, labels, np.shape(kept))
    if found is None:
        return None
    found[best] = np.asarray(kept)
    return epochs, [found[e] for e in epochs]


def read(run: RunDir, epochs: list[int], labels: np.ndarray, shape: tuple) -> dict[int, np.ndarray] | None:
    """The probabilities (rows of `shape`) of each of `epochs` (None where the run kept none: one
    trained before 2026-12-02, a fold, one without val), checked against evaluate's val `labels`:
    the same rows, the same labels, in the same order."""
    folder = run.file(RunDir.VAL_EPOCHS)
    if not folder.is_dir() or not all(_epoch_file(folder, e).is_file() for e in epochs):
        return None
    kept = _load(folder / LABELS, None)
    if kept.shape != np.shape(labels) or not np.array_equal(kept, targets.stored(np.asarray(labels))):
        raise PetalsError(
            f"{folder / LABELS}: not the val rows evaluate reads ({len(kept)} rows, {len(labels)} in val); "
            "the run's data changed: retrain it (RETRAIN=1)"
        )
    return {e: _load(_epoch_file(folder, e), tuple(shape)) for e in epochs}


def _load(path: Path, shape: tuple[int, int] | None) -> np.ndarray:
    """An array from a kept file, its header's shape checked first (a small file may declare
    gigabytes): `shape` where given, else one dimension or two."""
    try:
        found = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise PetalsError(f"{path}: not a saved array ({error})") from None
    wrong = found.shape != shape if shape is not None else found.ndim not in (1, 2)
    if wrong or found.dtype.kind not in "biuf":
        expected = shape or "rows"
        raise PetalsError(f"{path}: shape {found.shape} of {found.dtype}, expected {expected} of numbers")
    return np.array(found)
