"""The Reader interface and its registry: how the data layer reads one way of storing a
competition's files, so no stage asks which way it is.

A format names its reader (`Format.read_by`): TFRecord shards are read where they lie, at one of
the resolutions Kaggle ships (shards.py); image folders and tables are unpacked into the data dir
and read as examples (files.py). A reader takes a fetched copy in (verified, counted,
fingerprinted), says what a folder holding the competition looks like, and pools splits into a
`Pool`: their ids and labels, and the `Split`s the stages train on and predict (the whole pool, a
part of it by id, or test examples trained on with pseudo labels). A new way of storing data is a
new module here, decorated `@register`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.kaggle_input import folders
from pipeline.core.named import Registry
from pipeline.formats.base import format_of


class Got(Protocol):
    """What a fetch's source got (pipeline/data/sources/base.py): where the files are, where they
    came from in words, the resolutions asked for (None: all found)."""

    root: str
    origin: str
    sizes: tuple[int, ...] | None


@dataclass(frozen=True)
class Taken:
    """A fetched copy, checked: where the data dir reads it from (`root`: staging once unpacked
    into it, or where the files lie), what the manifest counts, the counts per resolution (empty
    where there are none) and the fingerprints of every file and of the labelled splits."""

    root: str
    counted: dict[str, Any]
    sizes: dict[int, dict[str, dict[str, int]]]
    fingerprint: str
    labelled_fingerprint: str


class Pool(ABC):
    """Some splits of a data dir read as one, in a fixed order (every split's examples in turn)."""

    @abstractmethod
    def ids_and_labels(self) -> tuple[np.ndarray, np.ndarray]:
        """Every example's id and target, in the pool's order (labelled splits only)."""

    @abstractmethod
    def whole(self) -> Any:
        """The pool as one `Split`."""

    @abstractmethod
    def part(self, ids: np.ndarray, labels: np.ndarray) -> Any:
        """The `Split` of the examples `ids` (their targets `labels`), in the order given."""

    @abstractmethod
    def as_pseudo(self, ids: np.ndarray, labels: np.ndarray, whose: str) -> Any:
        """The examples `ids` trained on with the targets `labels` (a training split's `pseudo`);
        `whose` names the predictions they come from when an id is not in the pool."""


class Reader(ABC):
    name: ClassVar[str]

    @abstractmethod
    def take_in(self, got: Got, staging: Path, spec: CompetitionSpec, drawn: bool) -> Taken:
        """Check what a source got (`drawn`: the embedded dataset), bringing it into `staging` where
        the data dir reads it; a PetalsError naming the file of a defect, where it came from."""

    @abstractmethod
    def markers(self, spec: CompetitionSpec) -> str:
        """What a folder holding the competition has, in words."""

    @abstractmethod
    def holds_competition(self, spec: CompetitionSpec) -> Callable[[Path], bool]:
        """A test of whether a folder holds the competition's files."""

    @abstractmethod
    def pool(self, root: str, spec: CompetitionSpec, config: Config, splits: Sequence[str]) -> Pool:
        """The splits `splits` of the data dir at `root`, read as one."""

    def skipped_report(self, root: str, spec: CompetitionSpec, config: Config) -> list[str]:
        """Lines on what `data.skip_bad_records` skips in the data dir (none where a fetch's check
        already read every file)."""
        return []

    def find_in_copy(self, folder: Path, spec: CompetitionSpec) -> Path | None:
        """Where a copy of the competition keeps its files: the folder itself or a folder inside it
        (an archive unpacked into a folder of its own name, say)."""
        holds = self.holds_competition(spec)
        return next((f for f in [folder, *folders(folder, depth=2)] if holds(f)), None)


READERS = Registry("data reader")
register = READERS.register  # class decorator: make a reader known by its `name`


def reader_for(spec: CompetitionSpec) -> Reader:
    """The reader of the competition's format."""
    return READERS.named(format_of(spec).read_by)
