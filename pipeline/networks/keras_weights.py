"""The ImageNet weights file a keras.applications backbone downloads, found in Keras's cache here.

keras.applications fetches its weights with `keras.utils.get_file(name, url, cache_subdir="models",
file_hash=...)` while it builds: a kernel without internet cannot. The file's name and Keras's own
hash are not kept in one public table (each application module names its files its own way:
`convnext_tiny_notop.h5`, `densenet201_weights_tf_dim_ordering_tf_kernels_notop.h5`, ...), so they
are asked of the application itself: it is built with its download intercepted, which records what
it asked for and stops it. Any registry entry built by keras.applications (ConvNeXt, EfficientNet and
V2, DenseNet201, Xception, ResNet50) answers the same way; one built otherwise asks for nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from pipeline.core.errors import PetalsError
from pipeline.core.paths import check_name

MAX_WEIGHTS_BYTES = 4 << 30  # ConvNeXt-XLarge's no-top file is about 1.4 GB; nothing larger is weights


@dataclass(frozen=True)
class KerasFile:
    """A weights file keras.applications downloads: its cache name and Keras's hash (md5 or sha256)."""

    name: str
    file_hash: str | None
    subdir: str = "models"  # get_file's cache_subdir: where under Keras's home it keeps the file


class _Asked(Exception):
    """Raised by the stand-in for `get_file`: the build got as far as its download, and stops."""


def imagenet_file(backbone) -> KerasFile | None:
    """The file `backbone` (a registry entry) downloads for `weights="imagenet"`; None when it downloads
    nothing through Keras (its weights come from a package, or it has none)."""
    from keras.src.utils import file_utils

    if "imagenet" not in backbone.weights or backbone.package is not None or backbone.imports:
        return None
    asked: dict = {}

    def record(fname=None, origin=None, **kwargs):
        asked.update(kwargs, name=fname)
        raise _Asked

    size = max(backbone.min_size, 32)
    with mock.patch.object(file_utils, "get_file", record), contextlib.suppress(_Asked):
        backbone.build((size, size, 3), "imagenet")
    if "name" not in asked:
        return None
    name = check_name(asked["name"], f"keras.applications' weights file for {backbone.name}")
    subdir = check_name(
        asked.get("cache_subdir", "models"), f"keras.applications' cache folder for {backbone.name}"
    )
    return KerasFile(name, asked.get("file_hash"), subdir)


def cache_folder(subdir: str = "models") -> Path:
    """Where `get_file` keeps what it downloaded: `$KERAS_HOME/models` (~/.keras/models by default)."""
    from keras.src.backend import config

    return Path(config.keras_home()) / subdir


def cached(backbone) -> Path | None:
    """The ImageNet weights file of `backbone` in Keras's cache here, size-bounded and checked against
    Keras's hash; None where keras.applications does not build it or the file is not there. One line
    with the way out where the file there is not Keras's."""
    from keras.src.utils import file_utils

    wanted = imagenet_file(backbone)
    path = cache_folder(wanted.subdir) / wanted.name if wanted is not None else None
    if path is None or not path.is_file():
        return None
    check_size(path)
    if wanted.file_hash and not file_utils.validate_file(str(path), wanted.file_hash):
        raise PetalsError(
            f"{path}: not the file keras.applications publishes for {backbone.name} (its hash differs: a "
            "broken download?); delete it and build once with internet, or pass a file with model.weights="
        )
    return path


def check_size(path: Path, expected: int | None = None) -> int:
    """The size of a weights file, refused before it is read when it is no plain file, is larger than
    any weights file, or differs from `expected`."""
    if not path.is_file():
        raise PetalsError(f"{path}: not a weights file (no such plain file)")
    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise PetalsError(f"{path}: {size} bytes, over the {MAX_WEIGHTS_BYTES} a weights file may have")
    if expected is not None and size != expected:
        raise PetalsError(f"{path}: {size} bytes where {expected} were shipped; not the file petals shipped")
    return size
