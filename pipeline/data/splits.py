"""A competition's splits as the stages read them, whatever its kind of data.

`train_and_val` and `split_for` give `Split`s: TFRecord shards (`RecordSplit`) or the examples
of an image folder or a table (`FileSplit`). Both make datasets of the same structure,
(inputs, labels) to train and (inputs, label[, id]) or (inputs, id) to predict, count their
examples and classes, and turn an unreadable file into one line that names it. Kaggle gives the
file competitions no val split: val is one of `VAL_FOLDS` stratified folds of train, the same on
every machine. With `train.folds`, train and val are the two parts of one fold of the data's
fold table (pipeline/data/folds.py): every labelled example pooled, dealt by id. A fold's
training part may also hold pseudo-labelled test examples (`pseudo`, pipeline/cv/pseudo.py): they
are trained on, counted and cached, never part of a val split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.data import datasets, file_examples, folds, records, targets
from pipeline.data.folds import FoldTable
from pipeline.data.pseudo_records import PseudoRecords

VAL_FOLDS = 10  # a file competition's val split: a tenth of train


@dataclass(frozen=True)
class RecordSplit:
    """TFRecord shards at one resolution."""

    files: list[str]
    spec: CompetitionSpec
    image_size: int
    # A fold's part of pooled shards: the ids it reads (the rest are skipped) and their labels.
    only: np.ndarray | None = field(default=None, compare=False)
    only_labels: np.ndarray | None = field(default=None, compare=False)
    pseudo: PseudoRecords | None = field(default=None, compare=False)  # test records trained on too

    @cached_property
    def count(self) -> int:
        labelled = records.count_images(self.files) if self.only is None else len(self.only)
        return labelled + (self.pseudo.count if self.pseudo is not None else 0)

    def pseudo_part(self) -> PseudoRecords | None:
        return self.pseudo

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
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
        return datasets.eval_dataset(
            self.files, self.spec, config, batch_size, labeled, pad_to_batch, with_ids, self.only
        )

    def class_counts(self, config: Config) -> np.ndarray:
        extra = self.pseudo.class_counts(config) if self.pseudo is not None else 0
        if self.only_labels is not None:
            return targets.class_counts(self.only_labels, self.spec.num_classes) + extra
        size, skip_bad = self.image_size, config.data.skip_bad_records
        return datasets.class_counts(self.files, self.spec, size, skip_bad) + extra

    def naming_bad(self, labeled: bool):
        return datasets.naming_bad_records(self.files, self.spec, self.image_size, labeled)


@dataclass(frozen=True)
class FileSplit:
    """The examples of an image folder or a table; texts become model inputs through `encode`."""

    examples: file_examples.Examples
    spec: CompetitionSpec
    encode: Callable[[tf.Tensor], tf.Tensor] | None = None
    pseudo: file_examples.Examples | None = None  # test examples with pseudo labels, trained on too

    @property
    def count(self) -> int:
        return len(self.training_examples)

    @property
    def training_examples(self) -> file_examples.Examples:
        return self.examples if self.pseudo is None else joined(self.examples, self.pseudo)

    def pseudo_part(self) -> FileSplit | None:
        return None if self.pseudo is None else replace(self, examples=self.pseudo, pseudo=None)

    def with_encoder(self, encode: Callable[[tf.Tensor], tf.Tensor]) -> FileSplit:
        return replace(self, encode=encode)

    @property
    def images(self) -> bool:
        """Whether the examples are image files (decoded, resized, augmented) or a table's texts."""
        return self.spec.format.holds == "image"

    def _image_size(self, config: Config) -> int | None:
        return config.data.image_size if self.images else None

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        """Endless shuffled batches of exactly `batch_size`, augmented as the records' are."""
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


Split = RecordSplit | FileSplit


def joined(*parts: file_examples.Examples) -> file_examples.Examples:
    """Examples of several splits as one, in the order given (labelled parts only)."""
    return file_examples.Examples(
        ids=np.concatenate([e.ids.astype(str) for e in parts]),
        inputs=tuple(np.concatenate(column) for column in zip(*(e.inputs for e in parts), strict=True)),
        labels=np.concatenate([e.labels for e in parts]),
    )


def fold_table(data_dir: Path, spec: CompetitionSpec, config: Config) -> FoldTable | None:
    """The data's fold table when the config trains a fold (`train.folds`), else None."""
    return folds.fold_table(data_dir, spec, config) if config.train.folds else None


def _fold_parts(root: str, spec: CompetitionSpec, config: Config, table: FoldTable) -> tuple[Split, Split]:
    """(trained on, held out) for fold `train.fold` of the table: every labelled example is in
    exactly one of them, each part in id order."""
    kept, held = table.kept(config.train.fold), table.held_out(config.train.fold)
    names = folds.pooled_splits(spec, config)
    if spec.format.sharded:
        size = config.data.image_size
        files = [f for name in names for f in datasets.shard_files(root, spec, size, name)]
        return tuple(
            RecordSplit(files, spec, size, only=table.ids[rows], only_labels=table.labels[rows])
            for rows in (kept, held)
        )
    pooled = joined(*(file_examples.examples(Path(root), spec, name) for name in names))
    position = {key: i for i, key in enumerate(pooled.ids)}
    return tuple(
        FileSplit(pooled.take(np.array([position[key] for key in table.ids[rows]], np.int64)), spec)
        for rows in (kept, held)
    )


def train_and_val(
    root: str, spec: CompetitionSpec, config: Config, table: FoldTable | None = None
) -> tuple[Split, Split | None]:
    """The training split and the val split scored after epochs (None with `train.merge_val`);
    with `train.folds`, fold `train.fold` of `table` (`fold_table`)."""
    train = config.train
    if train.folds:
        if table is None or table.k != train.folds:
            raise ValueError("train.folds needs the data's fold table of as many folds")  # a caller's bug
        return _fold_parts(root, spec, config, table)
    if not spec.format.sharded:
        examples = file_examples.examples(Path(root), spec, "train")
        if train.merge_val:
            return FileSplit(examples, spec), None
        kept, held = file_examples.fold_split(examples, VAL_FOLDS, 0)
        return FileSplit(kept, spec), FileSplit(held, spec)
    size = config.data.image_size
    train_files = datasets.shard_files(root, spec, size, "train")
    val_files = datasets.shard_files(root, spec, size, "val")
    if train.merge_val:
        return RecordSplit(train_files + val_files, spec, size), None
    return RecordSplit(train_files, spec, size), RecordSplit(val_files, spec, size)


def split_for(
    root: str, spec: CompetitionSpec, config: Config, split: str, table: FoldTable | None = None
) -> Split:
    """The split a trained run predicts: `val` as it was held out in training, or `test`."""
    if split == "val":
        val = train_and_val(root, spec, config, table)[1]
        if val is None:
            raise PetalsError("train.merge_val=true: the run trained on its val split, none is held out")
        return val
    if not spec.format.sharded:
        return FileSplit(file_examples.examples(Path(root), spec, split), spec)
    size = config.data.image_size
    return RecordSplit(datasets.shard_files(root, spec, size, split), spec, size)
