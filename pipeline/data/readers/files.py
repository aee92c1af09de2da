"""Image folders and tables, unpacked into the data dir (pipeline/data/competition_files.py) and
read as examples (pipeline/data/file_examples.py): a pool is its splits' examples joined, a part
the examples of its ids.

TensorFlow is imported where examples are read, not here: what fetch asks of a reader first (does
this folder hold the competition, unpack and check it) needs none, so a fetch that refuses its
input or finds its data already there says so in a second, not after TensorFlow's start-up."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.data import competition_files, targets
from pipeline.data.readers.base import Got, Pool, Reader, Taken, register
from pipeline.formats.base import format_of

if TYPE_CHECKING:
    import tensorflow as tf

    from pipeline.data.file_examples import Examples


@dataclass(frozen=True)
class FileSplit:
    """The examples of an image folder or a table; texts become model inputs through `encode`."""

    examples: Examples
    spec: CompetitionSpec
    encode: Callable[[tf.Tensor], tf.Tensor] | None = None
    pseudo: Examples | None = None  # test examples with pseudo labels, trained on too

    @property
    def count(self) -> int:
        return len(self.training_examples)

    @property
    def training_examples(self) -> Examples:
        from pipeline.data.file_examples import joined

        return self.examples if self.pseudo is None else joined(self.examples, self.pseudo)

    def pseudo_part(self) -> FileSplit | None:
        return None if self.pseudo is None else replace(self, examples=self.pseudo, pseudo=None)

    def with_encoder(self, encode: Callable[[tf.Tensor], tf.Tensor]) -> FileSplit:
        return replace(self, encode=encode)

    @property
    def images(self) -> bool:
        """Whether the examples are image files (decoded, resized, augmented) or a table's texts."""
        return format_of(self.spec).holds == "image"

    def _image_size(self, config: Config) -> int | None:
        return config.data.image_size if self.images else None

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        """Endless shuffled batches of exactly `batch_size`, augmented as the records' are."""
        from pipeline.data import datasets, file_examples

        examples = self.training_examples
        if input_context is not None:  # this input pipeline's share: every n-th example
            rows = np.arange(
                input_context.input_pipeline_id, len(examples), input_context.num_input_pipelines
            )
            examples = examples.take(rows)
        batches = file_examples.file_dataset(
            examples,
            batch_size,
            training=True,
            image_size=self._image_size(config),
            encode=self.encode,
            skip_bad=config.data.skip_bad_records,
            cache=config.data.cache,
            shuffle_buffer=config.data.shuffle_buffer,
            seed=config.seed,
        )
        if not self.images:
            return batches
        return datasets.augmented(batches, self.spec, config)

    def eval_dataset(
        self,
        config: Config,
        batch_size: int,
        labeled: bool,
        pad_to_batch: bool = False,
        with_ids: bool = False,
    ) -> tf.data.Dataset:
        from pipeline.data import datasets, file_examples

        examples = self.examples if labeled else replace(self.examples, labels=None)
        batches = file_examples.file_dataset(
            examples,
            batch_size,
            training=False,
            image_size=self._image_size(config),
            encode=self.encode,
            pad_to_batch=pad_to_batch,
            with_ids=with_ids,
            skip_bad=config.data.skip_bad_records,
            cache=config.data.cache,
        )
        return datasets.resized(batches, config) if self.images else batches

    def class_counts(self, config: Config) -> np.ndarray:
        return targets.class_counts(self.training_examples.labels, self.spec.num_classes)

    @contextmanager
    def naming_bad(self, labeled: bool) -> Iterator[None]:
        """tf.data's anonymous decode error as one line naming the photo (tables were read whole
        and checked at fetch)."""
        import tensorflow as tf

        from pipeline.data import datasets, file_examples

        images = self.images
        try:
            yield
        except (tf.errors.NotFoundError, FileNotFoundError) as err:
            if images:
                datasets.raise_if_vanished(list(self.training_examples.inputs[0]), err)
            raise
        except tf.errors.InvalidArgumentError as err:
            if not images:
                raise
            found = file_examples.first_unreadable_image(self.training_examples.inputs[0])
            if found is None:
                raise  # not a bad photo: a real bug, keep its traceback
            raise PetalsError(f"{found[0]}: does not decode ({found[1]}); {datasets.SKIP_HINT}") from err


@dataclass(frozen=True)
class FilePool(Pool):
    """The examples of some splits, joined in the order of the splits."""

    examples: Examples
    spec: CompetitionSpec
    where: str  # the data dir, as a missing id's refusal names it

    def ids_and_labels(self) -> tuple[np.ndarray, np.ndarray]:
        return self.examples.ids.astype(str), self.examples.labels

    def whole(self) -> FileSplit:
        return FileSplit(self.examples, self.spec)

    def _rows(self, ids: np.ndarray, whose: str) -> np.ndarray:
        pooled = self.examples.ids.astype(str)
        position = {key: i for i, key in enumerate(pooled)}
        if len(position) < len(pooled):  # a part by id would be ambiguous
            twice = next(key for i, key in enumerate(pooled) if position[key] != i)
            raise PetalsError(f"{self.where}: example id {twice!r} is there twice")
        absent = [key for key in ids if key not in position]
        if absent:
            raise PetalsError(f"{self.where}: example {absent[0]!r} of {whose} is not here")
        return np.array([position[key] for key in ids], np.int64)

    def part(self, ids: np.ndarray, labels: np.ndarray) -> FileSplit:
        return FileSplit(self.examples.take(self._rows(ids, "the fold table")), self.spec)

    def as_pseudo(self, ids: np.ndarray, labels: np.ndarray, whose: str) -> Examples:
        return replace(self.examples.take(self._rows(ids, whose)), labels=labels)


@register
class Files(Reader):
    name = "files"

    def take_in(self, got: Got, staging: Path, spec: CompetitionSpec, drawn: bool) -> Taken:
        try:
            competition_files.unpack_into(Path(got.root), staging, spec)
            counted = {"splits": competition_files.verify(staging, spec)}
        except PetalsError as err:  # name the file where it came from: staging goes with the error
            raise PetalsError(str(err).replace(str(staging), got.origin.rstrip("/"))) from None
        digest, labelled = competition_files.fingerprints(staging, spec)
        return Taken(str(staging), counted, {}, digest, labelled)

    def markers(self, spec: CompetitionSpec) -> str:
        return competition_files.markers(spec)

    def holds_competition(self, spec: CompetitionSpec) -> Callable[[Path], bool]:
        return competition_files.holds_competition(spec)

    def pool(self, root: str, spec: CompetitionSpec, config: Config, splits: Sequence[str]) -> FilePool:
        from pipeline.data import file_examples
        from pipeline.data.file_examples import joined

        found = joined(*(file_examples.examples(Path(root), spec, split) for split in splits))
        return FilePool(found, spec, root)
