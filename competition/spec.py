"""The competition spec: one frozen dataclass loaded from `competition/<name>.toml`.

Pipeline code reads everything competition-specific from here, so a competition
of a known kind of data needs only a new TOML file and class list.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from competition.layouts import (
    KINDS,
    DataLayout,
    ImageFolderLayout,
    RecordLayout,
    TableFilesLayout,
    layout_from,
)
from competition.metric import Metric, get_metric

SPEC_DIR = Path(__file__).resolve().parent
DEFAULT_COMPETITION = "flowers"
SUBMISSION_VALUES = ("class", "probability")  # a class id per row, or the probability of class 1


@dataclass(frozen=True)
class CompetitionSpec:
    name: str
    title: str
    slugs: tuple[str, ...]
    classes: tuple[str, ...]
    metric: Metric
    kind: str  # one of layouts.KINDS
    layout: DataLayout = field(hash=False)
    splits: tuple[str, ...]
    labeled_splits: tuple[str, ...]
    sample_submission: str
    split_counts: dict[str, int] = field(hash=False)
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

    @property
    def modality(self) -> str:
        """What a model reads: "image" (records, image folders) or "text" (tables)."""
        return "text" if self.kind == "table" else "image"

    @property
    def score_key(self) -> str:
        """The history column and metrics key of the competition's metric on val: `val_macro_f1`."""
        return f"val_{self.metric.name}"

    @property
    def records(self) -> RecordLayout:
        """The TFRecord layout; ValueError for a competition of another kind."""
        return self._layout(RecordLayout)

    @property
    def image_folder(self) -> ImageFolderLayout:
        return self._layout(ImageFolderLayout)

    @property
    def tables(self) -> TableFilesLayout:
        return self._layout(TableFilesLayout)

    def _layout(self, kind: type):
        if not isinstance(self.layout, kind):
            raise ValueError(f"competition {self.name} has {self.kind} data, not {kind.__name__}")
        return self.layout


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
    kind = data["kind"]
    if kind not in KINDS:
        raise ValueError(f"{path}: data kind {kind!r} is not one of {', '.join(KINDS)}")
    splits, labeled = tuple(data["splits"]), tuple(data["labeled_splits"])
    try:
        layout = layout_from(kind, data[kind], splits, labeled)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return CompetitionSpec(
        name=raw["name"],
        title=raw["title"],
        slugs=tuple(raw["slugs"]),
        classes=_read_classes(path.parent / raw["classes_file"]),
        metric=metric,
        kind=kind,
        layout=layout,
        splits=splits,
        labeled_splits=labeled,
        sample_submission=data["sample_submission"],
        split_counts={k: int(v) for k, v in data["counts"].items()},
        id_column=submission["id_column"],
        label_column=submission["label_column"],
        submission_value=value,
        keeps_label=frozenset(raw.get("augment", {}).get("keeps_label", ())),
    )
