"""A fetched data dir's `manifest.json`: where its records are, what source they came from, their
counts and content fingerprint. Read by every stage after fetch, so it imports no TensorFlow:
a stage that only reads the manifest (submit) starts in a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import json_object

MANIFEST = "manifest.json"


def read_manifest(data_dir: Path) -> dict[str, Any] | None:
    """The data dir's manifest, or None if there is none."""
    path = data_dir / MANIFEST
    if not path.is_file():
        return None
    try:  # a data dir may be shared (DATA=): read by the rule for foreign files
        return json_object(path, "data manifest")
    except PetalsError as err:
        raise PetalsError(f"{err}: delete it and fetch again") from None


def data_root(data_dir: Path, manifest: dict[str, Any]) -> str:
    """Where a fetched data dir's data lives: the data dir itself, a local path or a gs:// URL."""
    root = manifest.get("root")
    if not isinstance(root, str) or not root:
        raise PetalsError(f"{data_dir / MANIFEST}: its 'root' is not a path: delete it and fetch again")
    return str(data_dir.resolve()) if root == "." else root


def locate_data(data_dir: Path) -> str:
    """The data root of a fetched data dir (TFRecords, image folders or tables), or a PetalsError
    saying to fetch first."""
    manifest = read_manifest(data_dir)
    if manifest is None:
        raise PetalsError(f"{data_dir}: no {MANIFEST}; run `make fetch` (or pass the fetched --data-dir)")
    return data_root(data_dir, manifest)
