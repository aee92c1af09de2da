"""TFRecord shards: JPEG `tf.train.Example`s per resolution and split (the flower competitions).

`[data.records]` names the resolutions, the folder and shard name patterns and the feature keys.
Reading them is pipeline/data/layout.py's and pipeline/data/datasets.py's: shards are listed per
resolution, scanned and streamed, never unpacked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipeline.data.formats.base import Format, register


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


def _records(raw: dict[str, Any]) -> RecordLayout:
    return RecordLayout(
        resolutions=tuple(int(s) for s in raw["resolutions"]),
        record_dir_pattern=raw["record_dir"],
        shard_name_pattern=raw["shard_name"],
        shards_per_split=int(raw["shards_per_split"]),
        schema=RecordSchema(**raw["schema"]),
    )


@register
class Records(Format):
    name = "records"
    sharded = True

    def layout(self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> RecordLayout:
        return _records(raw)
