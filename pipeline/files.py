"""Atomic writes: an output is either the old file or the complete new one, never half of it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_atomically(path: Path, write: Callable[[Path], None], tmp_name: str | None = None) -> None:
    """`write(tmp)` beside `path`, then rename over it; the temporary file never outlives a failure.

    `tmp_name` is for writers that insist on a file name ending (Keras wants `.weights.h5`).
    """
    tmp = path.with_name(tmp_name or path.name + ".partial")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text))
