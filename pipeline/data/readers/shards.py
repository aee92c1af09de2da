"""TFRecord shards, read where they lie at one of the resolutions Kaggle ships (the flower
competitions): checked and fingerprinted by pipeline/data/layout.py, streamed by
pipeline/data/datasets.py. A pool's part is the pooled shards read for its ids only.

TensorFlow is imported where shards are read (files.py says why)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.data import targets
from pipeline.data.readers.base import Got, Pool, Reader, Taken, register
from pipeline.formats.records import records_of

if TYPE_CHECKING:
    import tensorflow as tf

    from pipeline.data.pseudo_records import PseudoRecords

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordSplit:
    """TFRecord shards at one resolution."""

    files: list[str]
    spec: CompetitionSpec
    image_size: int
    # A part of pooled shards: the ids it reads (the rest are skipped) and their labels.
    only: np.ndarray | None = field(default=None, compare=False)
    only_labels: np.ndarray | None = field(default=None, compare=False)
    pseudo: PseudoRecords | None = field(default=None, compare=False)  # test records trained on too

    @cached_property
    def count(self) -> int:
        from pipeline.data import records

        labelled = records.count_images(self.files) if self.only is None else len(self.only)
        return labelled + (self.pseudo.count if self.pseudo is not None else 0)

    def pseudo_part(self) -> PseudoRecords | None:
        return self.pseudo

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        from pipeline.data import datasets

        return datasets.train_dataset(
            self.files, self.spec, config, batch_size, input_context, self.only, self.pseudo
        )

    def eval_dataset(
        self,
        config: Config,
        batch_size: int,
        labeled: bool,
        pad_to_batch: bool = False,
        with_ids: bool = False,
    ) -> tf.data.Dataset:
        from pipeline.data import datasets

        return datasets.eval_dataset(
            self.files, self.spec, config, batch_size, labeled, pad_to_batch, with_ids, self.only
        )

    def class_counts(self, config: Config) -> np.ndarray:
        from pipeline.data import datasets

        extra = self.pseudo.class_counts(config) if self.pseudo is not None else 0
        if self.only_labels is not None:
            return targets.class_counts(self.only_labels, self.spec.num_classes) + extra
        size, skip_bad = self.image_size, config.data.skip_bad_records
        return datasets.class_counts(self.files, self.spec, size, skip_bad) + extra

    def naming_bad(self, labeled: bool):
        from pipeline.data import datasets

        return datasets.naming_bad_records(self.files, self.spec, self.image_size, labeled)


@dataclass(frozen=True)
class ShardPool(Pool):
    """The shards of some splits at the config's resolution."""

    files: list[str]
    spec: CompetitionSpec
    image_size: int

    def ids_and_labels(self) -> tuple[np.ndarray, np.ndarray]:
        from pipeline.data import records

        return records.ids_and_labels(self.files, records_of(self.spec).schema)

    def whole(self) -> RecordSplit:
        return RecordSplit(self.files, self.spec, self.image_size)

    def part(self, ids: np.ndarray, labels: np.ndarray) -> RecordSplit:
        return RecordSplit(self.files, self.spec, self.image_size, only=ids, only_labels=labels)

    def as_pseudo(self, ids: np.ndarray, labels: np.ndarray, whose: str) -> PseudoRecords:
        from pipeline.data.pseudo_records import PseudoRecords

        return PseudoRecords(self.files, self.spec, self.image_size, ids, labels)


def _note_unusual_counts(counts: dict, spec: CompetitionSpec) -> None:
    for size, splits in counts.items():
        for split, c in splits.items():
            if spec.split_counts.get(split) not in (None, c["images"]):
                log.warning(
                    "note: %s at %dpx has %d images, the spec expects %d (another version of the data?)",
                    split,
                    size,
                    c["images"],
                    spec.split_counts[split],
                )


@register
class Shards(Reader):
    name = "shards"

    def take_in(self, got: Got, staging: Path, spec: CompetitionSpec, drawn: bool) -> Taken:
        from pipeline.data import layout

        counts = layout.verify_layout(got.root, spec, got.sizes)
        if not drawn:  # an embedded dataset's counts are its own
            _note_unusual_counts(counts, spec)
        root = got.root
        digest, labelled = layout.fingerprints(root, spec, list(counts))
        counted = {"sizes": {str(size): splits for size, splits in counts.items()}}
        return Taken(root, counted, counts, digest, labelled)

    def markers(self, spec: CompetitionSpec) -> str:
        return f"{spec.sample_submission} and {records_of(spec).record_dir_pattern.format(size='<size>')}/"

    def holds_competition(self, spec: CompetitionSpec) -> Callable[[Path], bool]:
        def holds(folder: Path) -> bool:
            if not (folder / spec.sample_submission).is_file():
                return False
            return any(records_of(spec).size_from_record_dir(p.name) for p in folder.iterdir() if p.is_dir())

        return holds

    def pool(self, root: str, spec: CompetitionSpec, config: Config, splits: Sequence[str]) -> ShardPool:
        from pipeline.data import datasets

        size = config.data.image_size
        files = [f for split in splits for f in datasets.shard_files(root, spec, size, split)]
        return ShardPool(files, spec, size)

    def skipped_report(self, root: str, spec: CompetitionSpec, config: Config) -> list[str]:
        from pipeline.data import datasets

        size = config.data.image_size
        reports = [
            report
            for split in spec.splits
            for report in datasets.scan_shards(
                datasets.shard_files(root, spec, size, split), spec, size, spec.is_labeled(split)
            )
        ]
        return datasets.skipped_summary(reports) or ["no unreadable records"]
