"""The competition spec: one frozen dataclass loaded from `competition/<name>.toml`.

Pipeline code reads everything competition-specific from here, so a competition
of the same shape needs only a new TOML file and class list.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from competition.metric import Metric, get_metric

SPEC_DIR = Path(__file__).resolve().parent
DEFAULT_COMPETITION = "flowers"
SUBMISSION_VALUES = ("class", "probability")  # a class id per row, or the probability of class 1


@dataclass(frozen=True)
class RecordSchema:
    """Feature keys of the tf.train.Example records."""

    image: str
    label: str
    id: str


@dataclass(frozen=True)
class CompetitionSpec:
    name: str
    title: str
    slugs: tuple[str, ...]
    classes: tuple[str, ...]
    metric: Metric
    resolutions: tuple[int, ...]
    record_dir_pattern: str
    shard_name_pattern: str
    shards_per_split: int
    splits: tuple[str, ...]
    labeled_splits: tuple[str, ...]
    sample_submission: str
    split_counts: dict[str, int] = field(hash=False)
    schema: RecordSchema
    id_column: str
    label_column: str
    submission_value: str  # one of SUBMISSION_VALUES
    # Training transforms (AugmentConfig's names) after which an example keeps its label: a
    # mirrored flower is the same flower, a mirrored digit or sentence may not be.
    keeps_label: frozenset[str]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def default_slug(self) -> str:
        return self.slugs[0]

    def is_labeled(self, split: str) -> bool:
        return split in self.labeled_splits

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


def _read_classes(path: Path) -> tuple[str, ...]:
    names = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: class names are not unique")
    return names


@cache
def load_spec(name: str = DEFAULT_COMPETITION) -> CompetitionSpec:
    """Load `competition/<name>.toml` (or a path to a TOML file) into a CompetitionSpec."""
    path = Path(name) if name.endswith(".toml") else SPEC_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPEC_DIR.glob("*.toml")))
        raise ValueError(f"unknown competition {name!r}: no {path} (known: {known})")
    try:
        raw = tomllib.loads(path.read_text())
        spec = _spec_from(raw, path)
    except (KeyError, TypeError, OSError, tomllib.TOMLDecodeError) as err:
        key = f"key {err}" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"{path}: not a competition file ({key})") from None
    unknown = set(spec.labeled_splits) - set(spec.splits)
    if unknown:
        raise ValueError(f"{path}: labeled_splits {sorted(unknown)} are not among splits")
    return spec


def _spec_from(raw: dict, path: Path) -> CompetitionSpec:
    data, submission = raw["data"], raw["submission"]
    try:
        metric = get_metric(raw["metric"])
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    value = submission.get("value", "class")
    if value not in SUBMISSION_VALUES:
        raise ValueError(f"{path}: submission value {value!r} is not one of {', '.join(SUBMISSION_VALUES)}")
    return CompetitionSpec(
        name=raw["name"],
        title=raw["title"],
        slugs=tuple(raw["slugs"]),
        classes=_read_classes(path.parent / raw["classes_file"]),
        metric=metric,
        resolutions=tuple(int(s) for s in data["resolutions"]),
        record_dir_pattern=data["record_dir"],
        shard_name_pattern=data["shard_name"],
        shards_per_split=int(data["shards_per_split"]),
        splits=tuple(data["splits"]),
        labeled_splits=tuple(data["labeled_splits"]),
        sample_submission=data["sample_submission"],
        split_counts={k: int(v) for k, v in data["counts"].items()},
        schema=RecordSchema(**data["schema"]),
        id_column=submission["id_column"],
        label_column=submission["label_column"],
        submission_value=value,
        keeps_label=frozenset(raw.get("augment", {}).get("keeps_label", ())),
    )
