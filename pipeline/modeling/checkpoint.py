"""Checkpoints that resume on either backend: weights, optimizer state, epoch and best score.

One `.npz` per completed epoch (`ckpt-<epoch>.npz`: every variable by name, in the order the
model and optimizer create them; `ckpt-<epoch>-step<n>.npz` when a preemption stopped the next
epoch at step n), then `latest.json` listing the last K with their sha256, then older ones
deleted: a checkpoint is complete before anything points at it, so `kill -9` at any moment
leaves the previous one usable, and a damaged newest one (a cut copy) falls back to the one
before it. Written by numpy, it does not care which backend wrote or reads it (a
run interrupted on a TPU under JAX resumes on TensorFlow, and the other way round). The
folder may be local or any `tf.io.gfile` path (`gs://...`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import posixpath
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.files import naming

log = logging.getLogger(__name__)

LATEST = "latest.json"
SHA256 = r"[0-9a-f]{64}"


@dataclass
class Saved:
    """What a checkpoint restores besides the variables."""

    epoch: int  # epochs completed
    best_score: float
    path: str
    step: int = 0  # steps done of the next epoch (a checkpoint taken mid-epoch, at a preemption)
    partial: dict = field(default_factory=dict)  # that epoch's running sums so far


def _is_local(path: str) -> bool:
    return "://" not in path


def _join(directory: str, name: str) -> str:
    return os.path.join(directory, name) if _is_local(directory) else posixpath.join(directory, name)


def _write_bytes(path: str, payload: bytes) -> None:
    """`payload` at `path`, all or nothing: written beside it, then renamed over it."""
    partial = path + ".partial"
    if _is_local(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        try:
            with naming(path), open(partial, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        finally:  # a full disk leaves no half checkpoint behind
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
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


def _list(directory: str) -> list[str]:
    if _is_local(directory):
        return os.listdir(directory) if os.path.isdir(directory) else []
    import tensorflow as tf

    return tf.io.gfile.listdir(directory) if tf.io.gfile.isdir(directory) else []


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
    """The last `keep` checkpoints of a run's variables, in `directory`, each with its sha256."""

    def __init__(self, directory: str, groups: dict[str, Sequence], keep: int, writes: bool = True):
        """`groups`: named lists of Keras variables, e.g. {"net": net.weights, "optimizer": opt.variables}.
        `writes=False` (every process of a multi-host run but the first) restores, never saves."""
        if keep < 1:
            raise PetalsError(f"train.keep_checkpoints={keep}: keep at least 1")
        self.directory = str(directory)
        self.groups = {name: list(variables) for name, variables in groups.items()}
        self.keep = keep
        self.writes = writes

    @property
    def latest(self) -> str | None:
        """The newest checkpoint's path (not yet verified), or None."""
        entries = self._entries()
        return _join(self.directory, entries[-1]["name"]) if entries else None

    def _entries(self) -> list[dict]:
        """The index's checkpoints, oldest first. An index that cannot be read (a truncated copy)
        gives the checkpoint files found, unchecked: restore still verifies that each one loads."""
        pointer = _join(self.directory, LATEST)
        if not _exists(pointer):
            if _exists(_join(self.directory, "checkpoint")):  # TensorFlow's index: an older petals
                raise PetalsError(
                    f"{self.directory}: a checkpoint of an older petals (TensorFlow's format); "
                    "--force trains the run again from scratch"
                )
            return self._found()
        try:
            index = json.loads(_read_bytes(pointer))
        except (OSError, ValueError, RecursionError) as err:
            log.warning("%s: unreadable (%s); looking for checkpoint files instead", pointer, err)
            return self._found()
        entries = _listed(index)
        if entries is None:
            log.warning(
                "%s: not a checkpoint index petals wrote; looking for checkpoint files instead", pointer
            )
            return self._found()
        return entries

    def _found(self) -> list[dict]:
        names = _list(self.directory)
        found = [_parse_name(n) for n in names]
        return sorted((f for f in found if f), key=lambda f: (f["epoch"], f["step"]))

    def save(self, epoch: int, best_score: float, step: int = 0, partial: dict | None = None) -> str:
        """Write a checkpoint after `epoch` completed epochs and `step` steps of the next one
        (`partial`: that epoch's running sums), list it in the index with its sha256, then delete
        what is past the last `keep`."""
        name = f"ckpt-{epoch}.npz" if not step else f"ckpt-{epoch}-step{step}.npz"
        if not self.writes:  # process 0 writes this same checkpoint
            return _join(self.directory, name)
        entries = [e for e in self._entries() if (e["epoch"], e["step"]) != (epoch, step)]
        arrays: dict[str, np.ndarray] = {
            "epoch": np.asarray(epoch), "best_score": np.asarray(best_score), "step": np.asarray(step),
        }  # fmt: skip
        for key, value in (partial or {}).items():
            arrays[f"partial:{key}"] = np.asarray(value)
        for group, variables in self.groups.items():
            arrays[f"{group}:names"] = np.asarray([v.path for v in variables])
            for i, variable in enumerate(variables):
                arrays[f"{group}:{i}"] = np.asarray(variable.numpy())
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        payload = buffer.getvalue()
        path = _join(self.directory, name)
        _write_bytes(path, payload)
        entry = {"name": name, "epoch": epoch, "step": step, "bytes": len(payload),
                 "sha256": hashlib.sha256(payload).hexdigest()}  # fmt: skip
        kept = [*entries, entry][-self.keep :]
        index = {"latest": name, "epoch": epoch, "step": step, "checkpoints": kept}
        _write_bytes(_join(self.directory, LATEST), json.dumps(index, indent=1).encode())
        for old in {e["name"] for e in entries} - {e["name"] for e in kept}:
            _remove(_join(self.directory, old))
        return path

    def restore(self) -> Saved | None:
        """Load the newest good checkpoint into the variables; None when there is none.

        A damaged one (its checksum or its zip wrong: a cut copy, a full disk) is skipped with a
        line for the one before it; with none good, a PetalsError names them. A checkpoint another
        model wrote (other variables, other shapes) is a PetalsError naming it, raised before any
        variable is changed.
        """
        entries = self._entries()
        if not entries:
            return None
        damaged = []
        for entry in reversed(entries):
            path = _join(self.directory, entry["name"])
            try:
                saved = _load(path, entry.get("sha256"))
            except _Damaged as err:
                damaged.append(f"{entry['name']}: {err}")
                log.warning("train: checkpoint %s is damaged (%s)%s", path, err,
                            "; trying the one before it" if entry is not entries[0] else "")  # fmt: skip
                continue
            with saved:
                return self._assign(saved, path)
        raise PetalsError(
            f"{self.directory}: no usable checkpoint ({'; '.join(damaged)}); "
            "--force (RETRAIN=1) trains the run again from scratch"
        )

    def _assign(self, saved, path: str) -> Saved:
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
        partial = {k.split(":", 1)[1]: float(saved[k]) for k in saved.files if k.startswith("partial:")}
        result = Saved(
            epoch=int(saved["epoch"]),
            best_score=float(saved["best_score"]),
            path=path,
            step=int(saved["step"]) if "step" in saved.files else 0,
            partial=partial,
        )
        for variable, value in values.values():
            variable.assign(value)
        return result


class _Damaged(Exception):
    """A checkpoint file that is missing, cut short or not what the index recorded."""


def _load(path: str, sha: str | None):
    """The checkpoint's arrays (an open NpzFile), checked against its recorded sha256."""
    try:
        payload = _read_bytes(path)
    except OSError as err:
        raise _Damaged(os.strerror(err.errno) if err.errno else str(err)) from None
    if sha is not None and hashlib.sha256(payload).hexdigest() != sha:
        raise _Damaged(f"sha256 differs from the one recorded, {len(payload)} bytes")
    try:
        saved = np.load(io.BytesIO(payload), allow_pickle=False)
        saved["epoch"]  # a cut zip fails here at the latest
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as err:
        raise _Damaged(f"unreadable: {err}") from None
    return saved


def _listed(index) -> list[dict] | None:
    """An index's checkpoints, each named as petals names them (`_parse_name`), its epoch and step
    read from the name; None for an index petals did not write. Its names are read and deleted in
    this folder: a runs folder can be shared (a Kaggle dataset restored into a kernel), and an
    index naming `../x` or `/home/u/x` would delete that file on the next save."""
    if not isinstance(index, dict):
        return None
    listed = index.get("checkpoints", [{"name": index.get("latest")}])  # before: the latest alone
    if not isinstance(listed, list):
        return None
    entries = []
    for entry in listed:
        name = entry.get("name") if isinstance(entry, dict) else None
        parsed = _parse_name(name) if isinstance(name, str) else None
        digest = entry.get("sha256") if parsed is not None else None
        if parsed is None or not (
            digest is None or (isinstance(digest, str) and re.fullmatch(SHA256, digest))
        ):
            return None
        entries.append(parsed if digest is None else {**parsed, "sha256": digest})
    return entries


def _parse_name(name: str) -> dict | None:
    """`ckpt-4.npz` -> epoch 4, step 0; `ckpt-4-step30.npz` -> epoch 4, step 30; else None."""
    match = re.fullmatch(r"ckpt-(\d+)(?:-step(\d+))?\.npz", name)
    if not match:
        return None
    return {"name": name, "epoch": int(match[1]), "step": int(match[2] or 0)}
