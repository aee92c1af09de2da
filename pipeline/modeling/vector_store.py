"""A frozen sentence encoder's vectors kept beside the runs, so a text is encoded once a runs dir,
not once a process.

The encoder's pass is the cost of a sentence-encoder run (`make bench-encoder`: 60-110 texts a
second on 2 cores, so 20,000 texts take 3-5.5 minutes), and `probe.sentence_vectors` keeps what
it computed only in its process. Train, evaluate and predict are processes of their own: evaluate
encoded every val text again, a rerun (another penalty, a run resumed after a stop, a kernel's
next version) every text, and a CV group's folds trained in processes of their own (`CONCURRENT`,
kernels) each their own share. Here each batch of new vectors is a file in
`<runs dir>/vectors-<encoder digest>/`, named by what it holds and written whole (renamed into
place), so processes side by side each add their own and a reader sees whole files only.

A vector is a function of the encoder's weights and the text's ids and nothing else: the folder is
the weights' (an encoder that trained has its own), a row is keyed by the sha256 of its ids. A
file that is not what this module writes (cut, edited, of another width) is said in one line,
removed, and its rows computed again. The folder stops growing at `MAX_ROWS`.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.foreign_files import read_small_bytes

log = logging.getLogger(__name__)

PREFIX = "vectors-"  # <runs dir>/vectors-<the encoder's digest>/<the keys' digest>.npy
KEY_BYTES = 32  # a row's key: the sha256 of its ids
OWN_NAME = re.compile(r"[0-9a-f]{24}\.npy")  # a file's name: the digest of its rows
MAX_ROWS = 200_000  # 384 float32s and a key a row: ~320 MB a folder at most; past it, nothing added


class Store:
    """The vectors one encoder (`digest`: its weights and shapes) computed under `runs_dir`."""

    def __init__(self, runs_dir: Path, digest: str, width: int):
        self.folder = Path(runs_dir) / f"{PREFIX}{digest[:16]}"
        self.width = width
        self._read: set[str] = set()  # the files this process has read
        self.rows = 0  # of the files read

    def new_rows(self) -> dict[bytes, np.ndarray]:
        """The vectors of the files written since the last call (by any process), by key."""
        found: dict[bytes, np.ndarray] = {}
        if not self.folder.is_dir():
            return found
        for path in sorted(self.folder.glob("*.npy")):
            if path.name in self._read or not OWN_NAME.fullmatch(path.name):  # not a name `add` gives
                continue
            rows = self._load(path)
            self._read.add(path.name)
            if rows is None:
                continue
            self.rows += len(rows)
            vectors = np.ascontiguousarray(rows[:, KEY_BYTES:]).view("<f4")
            for row, key in enumerate(rows[:, :KEY_BYTES]):
                found[key.tobytes()] = vectors[row]
        return found

    def add(self, keys: list[bytes], vectors: np.ndarray) -> None:
        """Keep `vectors` [n, width] (float32, exact) under their `keys`: one new file."""
        if not keys or self.rows + len(keys) > MAX_ROWS:
            return
        rows = np.concatenate(
            [np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), KEY_BYTES),
             np.ascontiguousarray(vectors, dtype="<f4").view(np.uint8)], axis=1,
        )  # fmt: skip
        path = self.folder / f"{hashlib.sha256(rows.tobytes()).hexdigest()[:24]}.npy"  # named by its rows
        self._read.add(path.name)
        if os.path.lexists(path):  # these rows kept already (or the name taken: see `_load`)
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda tmp: _save(tmp, rows))
        self.rows += len(keys)

    def _load(self, path: Path) -> np.ndarray | None:
        """The rows of `path` [n, KEY_BYTES + 4 x width] (uint8), or None (said, and removed) where it
        is not a file this module wrote for this width, read no further than its size allows."""
        row_bytes = KEY_BYTES + 4 * self.width
        limit = MAX_ROWS * row_bytes + 4096  # the header's 128 bytes, some spare
        try:
            if path.is_symlink():  # the store writes none, even to a file of its own
                raise ValueError("a link")
            data = read_small_bytes(self.folder, path.name, "the file", limit=limit)  # regular, bounded
            rows = np.load(io.BytesIO(data), allow_pickle=False)
            if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != row_bytes:
                raise ValueError(f"rows of {rows.dtype} {rows.shape}, not {row_bytes} bytes each")
            if not np.isfinite(np.ascontiguousarray(rows[:, KEY_BYTES:]).view("<f4")).all():
                raise ValueError("a vector that is not finite")
            return rows
        except (PetalsError, OSError, ValueError, EOFError) as err:
            log.warning("vectors: %s is not a file of this encoder's vectors (%s); computing its rows again",
                        path, err)  # fmt: skip
            if path.is_symlink() or path.is_file():  # a link goes, not what it names
                path.unlink(missing_ok=True)
            return None


_STORES: dict[tuple[Path, str], Store] = {}  # one a folder in the process: each file read once


def store(runs_dir: Path, digest: str, width: int) -> Store:
    """This process's `Store` of the encoder `digest` under `runs_dir`."""
    key = (Path(runs_dir).resolve(), digest)
    if key not in _STORES:
        _STORES[key] = Store(runs_dir, digest, width)
    return _STORES[key]


def _save(tmp: Path, rows: np.ndarray) -> None:
    with tmp.open("wb") as out:
        np.save(out, rows, allow_pickle=False)


def row_keys(inputs: dict[str, np.ndarray]) -> list[bytes]:
    """Each row's key: the sha256 of its ids under every input name, in name order."""
    names = sorted(inputs)
    arrays = [np.ascontiguousarray(inputs[name]) for name in names]
    return [
        hashlib.sha256(b"".join(array[row].tobytes() for array in arrays)).digest()
        for row in range(len(arrays[0]))
    ]


def encoder_digest(layer) -> str:
    """What the encoder's vectors depend on besides the ids: its class, its weights' shapes and bytes."""
    digest = hashlib.sha256(type(layer).__name__.encode())
    for weight in layer.get_weights():
        weight = np.ascontiguousarray(weight)
        digest.update(f"{weight.dtype}{weight.shape}".encode())
        digest.update(weight.tobytes())
    return digest.hexdigest()
