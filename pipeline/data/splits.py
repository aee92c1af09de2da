"""A competition's splits as the stages read them, whatever its kind of data.

`train_and_val` and `split_for` give `Split`s: TFRecord shards (`RecordSplit`) or the examples
of an image folder or a table (`FileSplit`). Both make datasets of the same structure,
(inputs, labels) to train and (inputs, label[, id]) or (inputs, id) to predict, count their
examples and classes, and turn an unreadable file into one line that names it. Kaggle gives the
file competitions no val split: val is one of `VAL_FOLDS` stratified folds of train, the same on
every machine, or fold `train.fold` of `train.folds`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.data import datasets, file_examples, records

VAL_FOLDS = 10  # a file competition's val split: a tenth of train


@dataclass(frozen=True)
class RecordSplit:
    """TFRecord shards at one resolution."""

    files: list[str]
    spec: CompetitionSpec
    image_size: int

    @cached_property
    def count(self) -> int:
        return records.count_images(self.files)

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        return datasets.train_dataset(self.files, self.spec, config, batch_size, input_context)

    def eval_dataset(
        self,
        config: Config,
        batch_size: int,
        labeled: bool,
        pad_to_batch: bool = False,
        with_ids: bool = False,
    ) -> tf.data.Dataset:
        return datasets.eval_dataset(
            self.files, self.spec, config, batch_size, labeled, pad_to_batch, with_ids
        )

    def class_counts(self, config: Config) -> np.ndarray:
        return datasets.class_counts(self.files, self.spec, self.image_size, config.data.skip_bad_records)

    def naming_bad(self, labeled: bool):
        return datasets.naming_bad_records(self.files, self.spec, self.image_size, labeled)


@dataclass(frozen=True)
class FileSplit:
    """The examples of an image folder or a table; texts become model inputs through `encode`."""

    examples: file_examples.Examples
    spec: CompetitionSpec
    encode: Callable[[tf.Tensor], tf.Tensor] | None = None

    @property
    def count(self) -> int:
        return len(self.examples)

    def with_encoder(self, encode: Callable[[tf.Tensor], tf.Tensor]) -> FileSplit:
        return replace(self, encode=encode)

    def _image_size(self, config: Config) -> int | None:
        return config.data.image_size if self.spec.modality == "image" else None

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        """Endless shuffled batches of exactly `batch_size`, augmented as the records' are."""
        examples = self.examples
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
        if self.spec.modality != "image":
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
        return datasets.resized(batches, config) if self.spec.modality == "image" else batches

    def class_counts(self, config: Config) -> np.ndarray:
        return np.bincount(self.examples.labels, minlength=self.spec.num_classes)

    @contextmanager
    def naming_bad(self, labeled: bool) -> Iterator[None]:
        """tf.data's anonymous decode error as one line naming the photo (tables were read whole
        and checked at fetch)."""
        images = self.spec.modality == "image"
        try:
            yield
        except (tf.errors.NotFoundError, FileNotFoundError) as err:
            if images:
                datasets.raise_if_vanished(list(self.examples.inputs[0]), err)
            raise
        except tf.errors.InvalidArgumentError as err:
            if not images:
                raise
            found = file_examples.first_unreadable_image(self.examples.inputs[0])
            if found is None:
                raise  # not a bad photo: a real bug, keep its traceback
            raise PetalsError(f"{found[0]}: does not decode ({found[1]}); {datasets.SKIP_HINT}") from err


Split = RecordSplit | FileSplit


def _held_out(train: file_examples.Examples, config: Config) -> tuple:
    folds = config.train.folds or VAL_FOLDS
    return file_examples.fold_split(train, folds, config.train.fold if config.train.folds else 0)


def train_and_val(root: str, spec: CompetitionSpec, config: Config) -> tuple[Split, Split | None]:
    """The training split and the val split scored after epochs (None with `train.merge_val`)."""
    train = config.train
    if not spec.format.sharded:
        examples = file_examples.examples(Path(root), spec, "train")
        if train.merge_val:
            return FileSplit(examples, spec), None
        kept, held = _held_out(examples, config)
        return FileSplit(kept, spec), FileSplit(held, spec)
    size = config.data.image_size
    train_files = datasets.shard_files(root, spec, size, "train")
    val_files = datasets.shard_files(root, spec, size, "val")
    if train.merge_val:
        return RecordSplit(train_files + val_files, spec, size), None
    if train.folds:
        train_files, val_files = datasets.held_out(train_files + val_files, train.folds, train.fold)
    return RecordSplit(train_files, spec, size), RecordSplit(val_files, spec, size)


def split_for(root: str, spec: CompetitionSpec, config: Config, split: str) -> Split:
    """The split a trained run predicts: `val` as it was held out in training, or `test`."""
    if split == "val":
        val = train_and_val(root, spec, config)[1]
        if val is None:
            raise PetalsError("train.merge_val=true: the run trained on its val split, none is held out")
        return val
    if not spec.format.sharded:
        return FileSplit(file_examples.examples(Path(root), spec, split), spec)
    size = config.data.image_size
    return RecordSplit(datasets.shard_files(root, spec, size, split), spec, size)
