"""Checkpoints that resume on either backend: weights, optimizer state, epoch and best score.

One `.npz` per completed epoch (`ckpt-<epoch>.npz`: every variable by name, in the order the
model and optimizer create them), then `latest.json` naming it, then older ones deleted: a
checkpoint is complete before anything points at it, so `kill -9` at any moment leaves the
previous one usable. Written by numpy, it does not care which backend wrote or reads it (a
run interrupted on a TPU under JAX resumes on TensorFlow, and the other way round). The
folder may be local or any `tf.io.gfile` path (`gs://...`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.core.errors import PetalsError

log = logging.getLogger(__name__)

LATEST = "latest.json"


@dataclass
class Saved:
    """What a checkpoint restores besides the variables."""

    epoch: int
    best_score: float
    path: str


def _is_local(path: str) -> bool:
    return "://" not in path


def _join(directory: str, name: str) -> str:
    return os.path.join(directory, name) if _is_local(directory) else posixpath.join(directory, name)


def _write_bytes(path: str, payload: bytes) -> None:
    """`payload` at `path`, all or nothing: written beside it, then renamed over it."""
    partial = path + ".partial"
    if _is_local(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(partial, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
        return
    import tensorflow as tf

    tf.io.gfile.makedirs(posixpath.dirname(path))
    with tf.io.gfile.GFile(partial, "wb") as f:
        f.write(payload)
    tf.io.gfile.rename(partial, path, overwrite=True)


def _read_bytes(path: str) -> bytes:
    if _is_local(path):
        with open(path, "rb") as f:
            return f.read()
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def _exists(path: str) -> bool:
    if _is_local(path):
        return os.path.exists(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def _remove(path: str) -> None:
    if _is_local(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


class Checkpoint:
    """The newest checkpoint of a run's variables, in `directory`."""

    def __init__(self, directory: str, groups: dict[str, Sequence]):
        """`groups`: named lists of Keras variables, e.g. {"net": net.weights, "optimizer": opt.variables}."""
        self.directory = str(directory)
        self.groups = {name: list(variables) for name, variables in groups.items()}

    @property
    def latest(self) -> str | None:
        """The newest complete checkpoint's path, or None."""
        pointer = _join(self.directory, LATEST)
        if not _exists(pointer):
            if _exists(_join(self.directory, "checkpoint")):  # TensorFlow's index: an older petals
                raise PetalsError(
                    f"{self.directory}: a checkpoint of an older petals (TensorFlow's format); "
                    "--force trains the run again from scratch"
                )
            return None
        name = json.loads(_read_bytes(pointer))["latest"]
        return _join(self.directory, name)

    def save(self, epoch: int, best_score: float) -> str:
        """Write `ckpt-<epoch>.npz`, point `latest.json` at it, then delete the older one."""
        previous = self.latest
        arrays: dict[str, np.ndarray] = {"epoch": np.asarray(epoch), "best_score": np.asarray(best_score)}
        for group, variables in self.groups.items():
            arrays[f"{group}:names"] = np.asarray([v.path for v in variables])
            for i, variable in enumerate(variables):
                arrays[f"{group}:{i}"] = np.asarray(variable.numpy())
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        name = f"ckpt-{epoch}.npz"
        path = _join(self.directory, name)
        _write_bytes(path, buffer.getvalue())
        _write_bytes(_join(self.directory, LATEST), json.dumps({"latest": name, "epoch": epoch}).encode())
        if previous and previous != path:
            _remove(previous)
        return path

    def restore(self) -> Saved | None:
        """Load the newest checkpoint into the variables; None when there is none.

        A checkpoint another model wrote (other variables, other shapes) is a PetalsError naming
        it, raised before any variable is changed.
        """
        path = self.latest
        if path is None:
            return None
        try:
            saved = np.load(io.BytesIO(_read_bytes(path)), allow_pickle=False)
        except (OSError, ValueError) as err:
            raise PetalsError(
                f"{path}: unreadable checkpoint ({err}); --force trains the run again"
            ) from None
        with saved:
            values = {}
            for group, variables in self.groups.items():
                names = saved.get(f"{group}:names")
                if names is None or len(names) != len(variables):
                    count = "none" if names is None else len(names)
                    raise PetalsError(
                        f"{path}: does not fit this run's model ({group}: {count} saved variables, "
                        f"{len(variables)} here); --force trains the run again from scratch"
                    )
                for i, variable in enumerate(variables):
                    value = saved[f"{group}:{i}"]
                    if tuple(value.shape) != tuple(variable.shape):
                        raise PetalsError(
                            f"{path}: does not fit this run's model ({names[i]} has shape "
                            f"{tuple(value.shape)}, {variable.path} {tuple(variable.shape)} here); "
                            "--force trains the run again from scratch"
                        )
                    values[id(variable)] = (variable, value)
            epoch, best = int(saved["epoch"]), float(saved["best_score"])
        for variable, value in values.values():
            variable.assign(value)
        return Saved(epoch=epoch, best_score=best, path=path)
