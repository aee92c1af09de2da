"""Where the feature cache's rows live: what they depend on, their files, their float32 batches, and
one pass per fold group (`feature_pass` computes them).

Rows go to the network as float32 batches, converted in numpy.

Cross-validation: the activations do not depend on the fold, so a group's folds share one pooled
cache of every labelled example in id order (`shared_folder`), computed by whichever fold gets
there first under a lock (the other waits, then reads it); each fold takes its rows by id.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipeline.core import lock as _lock
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError, Preempted
from pipeline.core.files import write_atomically
from pipeline.data import passes

log = logging.getLogger(__name__)

SHARED_PREFIX = "features-"  # <runs dir>/features-<examples digest>-<signature digest>/: a fold group's
LOCK_NAME = "computing.lock"
LOCK_POLL_SECONDS = 2.0  # how often a fold waiting for another's pass looks again
LOCK_WAIT_SECONDS = 6 * 3600.0  # then the lock's own one-line refusal


@dataclass(frozen=True)
class Rows:
    """A split's cached activations [views, examples, ...] (float16), labels and ids, in one order."""

    features: np.ndarray
    labels: np.ndarray
    ids: np.ndarray  # str

    def take(self, rows: np.ndarray, views: int | None = None) -> Rows:
        return Rows(self.features[:views, rows], self.labels[rows], self.ids[rows])


# ----------------------------------------------------------------------------- what rows depend on


def signature(cut_, config: Config, split, source: str, pooled: str = "") -> dict:
    """What a split's cached activations depend on: the network below the cut and what it reads
    (data, augmentation and model settings, the seed of the random views), which examples the split
    holds and the data itself (its fingerprint). A fold's own cache names its fold; a group's pooled
    cache (`pooled`: the digest of its examples) holds every fold's, so it names none."""
    split_keys = [config.train.merge_val, config.train.folds] + ([] if pooled else [config.train.fold])
    reads = {
        **{key: value for key, value in config.to_dict().items() if key != "train"},
        "split": split_keys,
        "source": source,
        **({"pooled": pooled} if pooled else {}),
    }
    return {
        "cut": re.sub(r"_\d+$", "", cut_.at),  # Keras numbers a layer's name in each new model of a process
        "layers": cut_.layers,
        "views": [config.train.feature_views, config.train.feature_views_up_to],
        "examples": split.count,
        "reads": hashlib.sha256(json.dumps(reads, sort_keys=True).encode()).hexdigest(),
    }


def examples_digest(ids: np.ndarray, labels: np.ndarray) -> str:
    """The labelled examples a pooled cache holds (ids and labels, in id order), as a short hash:
    the same for a fold's two parts together as for the fold table itself."""
    ids = np.asarray(ids).astype(str)
    order = np.argsort(ids, kind="stable")
    text = "\n".join(f"{i},{label}" for i, label in zip(ids[order], np.asarray(labels)[order], strict=True))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shared_folder(runs_dir: Path, digest: str, signature_: dict) -> Path:
    """The folder a fold group's pooled cache lives in, beside its fold runs."""
    named = hashlib.sha256(json.dumps(signature_, sort_keys=True).encode()).hexdigest()[:12]
    return Path(runs_dir) / f"{SHARED_PREFIX}{digest}-{named}"


USERS = "users"  # in a shared folder: one empty file per CV group that trains on it


def add_user(folder: Path, group: str) -> None:
    """Mark `folder` as used by `group` (a key of its config less the fold): it stays while any
    group that marked it has not finished."""
    (folder / USERS).mkdir(parents=True, exist_ok=True)
    (folder / USERS / group).touch()


def remove_shared(runs_dir: Path, ids: np.ndarray, labels: np.ndarray, group: str) -> list[Path]:
    """`group` is done with the pooled caches of these examples under `runs_dir`: its mark goes, and
    a folder no other group marked goes with it (one a live process is computing stays). Another
    recipe, K or seed on the same examples keeps the folder it still trains on. The folders removed."""
    removed = []
    release()
    for folder in sorted(Path(runs_dir).glob(f"{SHARED_PREFIX}{examples_digest(ids, labels)}-*")):
        (folder / USERS / group).unlink(missing_ok=True)
        users = folder / USERS
        if users.is_dir() and any(users.iterdir()):
            continue
        try:
            with _lock.holding(folder / LOCK_NAME, "remove the feature cache"):
                shutil.rmtree(folder)
        except PetalsError as err:
            log.info("cv: %s kept: %s", folder, err)
            continue
        removed.append(folder)
    return removed


# ----------------------------------------------------------------------------- batches


def as_float32(rows: np.ndarray) -> np.ndarray:
    """Cached rows as the network's float32, converted here: a float16 cast inside TensorFlow logs
    oneDNN's "supports DT_HALF only on platforms with AVX-512" error line on this CPU (the values are
    the same either way: float16 -> float32 is exact)."""
    return rows.astype(np.float32)


def beside(activations, columns: np.ndarray | None, rows=None):
    """What the part above the cut reads: the activations alone, or beside the `rows` of an
    image_table's `columns` (pipeline/networks/columns.py) by name; a TensorSpec of a batch of
    activations (no `rows`) gives the inputs' signature."""
    if columns is None:
        return activations
    if rows is None:
        return {
            "image": activations,
            "columns": tf.TensorSpec((activations.shape[0], columns.shape[1]), tf.float32),
        }
    return {"image": activations, "columns": np.asarray(columns[rows], np.float32)}


def float32_batches(
    features: np.ndarray, batch_size: int, labels: np.ndarray | None = None, columns: np.ndarray | None = None
) -> tf.data.Dataset:
    """Cached rows in order, `batch_size` at a time (the last may be short), as float32, with their
    labels when given (and an image_table's `columns` beside, `beside`)."""
    shape = features.shape[1:]
    spec = beside(tf.TensorSpec((None, *shape), tf.float32), columns)

    def batches():
        for start in range(0, len(features), batch_size):
            rows = beside(
                as_float32(features[start : start + batch_size]), columns, slice(start, start + batch_size)
            )
            yield rows if labels is None else (rows, labels[start : start + batch_size])

    signature = spec if labels is None else (spec, tf.TensorSpec((None, *labels.shape[1:]), labels.dtype))
    return passes.untuned(tf.data.Dataset.from_generator(batches, output_signature=signature))


# ----------------------------------------------------------------------------- files


# A CV group's pooled rows, once read or written in this process: its folds train one after another
# on them, read once (1-2 s a fold on the embedded flowers' 330 MB). Read-only: a fold takes copies.
_HELD: dict = {}


def _held_key(path: Path, signature_: dict) -> tuple:
    stat = path.stat()
    where = (str(path.resolve()), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return (*where, json.dumps(signature_, sort_keys=True))


def keep_held(path: Path, signature_: dict, rows: Rows) -> None:
    """Keep `rows` (saved at `path`) in this process for `cached`'s next caller: a group's folds."""
    for array in (rows.features, rows.labels, rows.ids):
        array.setflags(write=False)  # a fold that wrote into them would change the next fold's rows
    _HELD.clear()
    _HELD[_held_key(path, signature_)] = rows


def release() -> None:
    """Let go of the held pooled rows (the group is done with them)."""
    _HELD.clear()


def cached(path: Path, signature_: dict) -> Rows | None:
    """The rows saved at `path` if their signature is `signature_`."""
    if not path.is_file():
        return None
    held = _HELD.get(_held_key(path, signature_))
    if held is not None:
        return held
    try:
        with np.load(path, allow_pickle=False) as saved:
            if "signature" not in saved.files or json.loads(str(saved["signature"])) != signature_:
                return None
            if "ids" not in saved.files:
                return None  # saved before rows carried their ids
            return Rows(saved["features"], saved["labels"], saved["ids"].astype(str))
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        # A cut file (a power cut before the disk had it) is a cache miss: computed again, not a
        # traceback on every rerun.
        log.warning("features: %s is damaged (%s); computing its rows again", path, type(err).__name__)
        path.unlink(missing_ok=True)
        return None


def save(path: Path, rows: Rows, signature_: dict) -> None:
    """One file holds the rows and what they were computed from, renamed into place whole."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as out:
            np.savez(
                out,
                features=rows.features,
                labels=rows.labels,
                ids=rows.ids.astype(str),
                signature=np.asarray(json.dumps(signature_)),
            )

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, write)


# ----------------------------------------------------------------------------- one pass per group


def stop_if_asked(stop, where: str) -> None:
    """End the stage between pieces when asked (a signal noted, the time limit): nothing is lost."""
    if stop is not None and stop():
        raise Preempted(f"stopped by {stop.reason} {where}; rerun the same command to go on from there")


@contextlib.contextmanager
def computing(folder: Path, stop=None) -> Iterator[None]:
    """Hold the shared folder's lock while the block runs; while another live process holds it
    (another fold computing the same rows), wait for it, so this one then reads what it saved."""
    with contextlib.ExitStack() as held:
        deadline, told = time.monotonic() + LOCK_WAIT_SECONDS, False
        while True:
            try:
                held.enter_context(_lock.holding(folder / LOCK_NAME, "train (feature cache)"))
                break
            except PetalsError:
                if time.monotonic() > deadline:
                    raise
                if not told:
                    log.info("train: %s: another process computes these features; waiting for it", folder)
                    told = True
                stop_if_asked(stop, f"waiting for {folder}")
                time.sleep(LOCK_POLL_SECONDS)
        yield
