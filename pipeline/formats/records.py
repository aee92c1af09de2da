"""TFRecord shards: JPEG `tf.train.Example`s per resolution and split (the flower competitions).

`[data.records]` names the resolutions, the folder and shard name patterns and the feature keys.
Reading them is pipeline/data/readers/shards.py's: shards are listed per resolution, scanned and
streamed, never unpacked.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from pipeline.core.paths import NAME, shown
from pipeline.formats.base import Format, layout_of, register

# What a folder or shard name pattern may hold, and a format spec as `{index:02d}` writes it
# (a wider one would be a way to make petals build names of any length).
_PATTERN_FIELDS = {"record_dir": {"size"}, "shard_name": {"index", "size", "count"}}
_FORMAT_SPEC = re.compile(r"0?\d?d?")


@dataclass(frozen=True)
class RecordSchema:
    """Feature keys of the tf.train.Example records."""

    image: str
    label: str
    id: str


@dataclass(frozen=True)
class RecordLayout:
    """JPEG TFRecord shards: `<record_dir>/<split>/<shard_name>` at each resolution."""

    resolutions: tuple[int, ...]
    record_dir_pattern: str
    shard_name_pattern: str
    shards_per_split: int
    schema: RecordSchema

    def record_dir(self, size: int) -> str:
        """Folder of one resolution's shards, e.g. `tfrecords-jpeg-192x192`."""
        return self.record_dir_pattern.format(size=size)

    def shard_name(self, index: int, size: int, count: int) -> str:
        """Kaggle's shard file name, which carries the record count: `00-192x192-798.tfrec`."""
        return self.shard_name_pattern.format(index=index, size=size, count=count)

    def size_from_record_dir(self, name: str) -> int | None:
        """Inverse of `record_dir`: the resolution a folder name stands for, or None."""
        pattern = re.escape(self.record_dir_pattern).replace(r"\{size\}", r"(\d+)")
        match = re.fullmatch(pattern, name)
        if not match or len(set(match.groups())) != 1:
            return None
        return int(match.group(1))


def records_of(spec) -> RecordLayout:
    """The competition's TFRecord layout; ValueError for a competition of another kind."""
    return layout_of(spec, RecordLayout)


def _whole(value: object, field: str, most: int) -> int:
    """A whole number from 1 to `most` (TOML's inf, nan, 1.5 and -5 refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"[data.records] {field} {shown(value)} is not a whole number from 1 to {most}")
    return value


def _pattern(raw: dict[str, Any], key: str) -> str:
    """A folder or shard name pattern: only its own fields in braces, and one plain name (no `/`,
    no `..`) once they are filled in."""
    pattern, allowed = raw[key], _PATTERN_FIELDS[key]
    field = f"[data.records] {key}"
    try:
        parts = list(string.Formatter().parse(pattern)) if isinstance(pattern, str) else None
    except ValueError:
        parts = None
    if parts is None or any(
        name is not None and (name not in allowed or conversion or not _FORMAT_SPEC.fullmatch(spec))
        for _, name, spec, conversion in parts
    ):
        fields = ", ".join("{" + name + "}" for name in sorted(allowed))
        raise ValueError(f"{field} {shown(pattern)}: only {fields} may stand in braces")
    if not NAME.fullmatch(pattern.format(index=0, size=192, count=1)):
        raise ValueError(f"{field} {shown(pattern)} does not make a plain name (no '/', no '..')")
    return pattern


def _records(raw: dict[str, Any]) -> RecordLayout:
    resolutions = raw["resolutions"]
    if not isinstance(resolutions, list) or not resolutions:
        raise ValueError(f"[data.records] resolutions {shown(resolutions)} is not a list of sizes")
    return RecordLayout(
        resolutions=tuple(_whole(s, "resolutions", 8192) for s in resolutions),
        record_dir_pattern=_pattern(raw, "record_dir"),
        shard_name_pattern=_pattern(raw, "shard_name"),
        shards_per_split=_whole(raw["shards_per_split"], "shards_per_split", 10_000),
        schema=RecordSchema(**raw["schema"]),
    )


@register
class Records(Format):
    name = "records"
    read_by = "shards"

    def layout(self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> RecordLayout:
        return _records(raw)

    def resolutions(self, layout: RecordLayout) -> tuple[int, ...]:
        return layout.resolutions
