"""Pseudo-labelled test records: unlabelled shards read as labelled examples of a fold's training part.

Test shards carry no label. `PseudoRecords` names the test records a teacher labelled (by id, with
the label it gave each, pipeline/cv/pseudo.py); `relabelled` gives each record read its pseudo
label through a lookup table, and `mixed_into` samples them into the endless labelled training
stream by their share before it is shuffled, so every batch can hold both. `eval_dataset` reads
them in a fixed order for the feature cache's pass; nothing here ever touches a val part.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.data import targets


@dataclass(frozen=True)
class PseudoRecords:
    """The test records `ids` (of `files`), each trained on with its pseudo label."""

    files: list[str]
    spec: CompetitionSpec
    image_size: int
    ids: np.ndarray = field(compare=False)  # str
    labels: np.ndarray = field(compare=False)  # int64

    @property
    def count(self) -> int:
        return len(self.ids)

    def class_counts(self, config: Config) -> np.ndarray:
        return targets.class_counts(self.labels, self.spec.num_classes)

    def naming_bad(self, labeled: bool) -> AbstractContextManager:
        from pipeline.data.datasets import naming_bad_records

        return naming_bad_records(self.files, self.spec, self.image_size, labeled=False)

    def read(self, config: Config, ordered: bool, files: list[str] | None = None) -> tf.data.Dataset:
        """(image, label, id) of the records `ids`, labelled by the teacher; no other record is decoded."""
        from pipeline.data.datasets import read_examples

        unlabelled = read_examples(
            self.files if files is None else files,
            self.spec,
            config.data.image_size,
            labeled=False,
            ordered=ordered,
            skip_bad=config.data.skip_bad_records,
            only=self.ids,
        )
        return relabelled(unlabelled, self.ids, self.labels)

    def eval_dataset(
        self,
        config: Config,
        batch_size: int,
        labeled: bool,
        pad_to_batch: bool = False,
        with_ids: bool = False,
    ) -> tf.data.Dataset:
        """Batches in a fixed order, (image, label[, id]): what the feature cache's pass reads."""
        from pipeline.data.datasets import resized

        if not labeled or pad_to_batch:
            raise ValueError("pseudo-labelled records serve training only")  # a caller's bug
        examples = self.read(config, ordered=True)
        if not with_ids:
            examples = examples.map(lambda image, label, _: (image, label))
        return resized(examples.batch(batch_size), config).prefetch(tf.data.AUTOTUNE)

    def mixed_into(
        self,
        labelled: tf.data.Dataset,
        config: Config,
        labelled_count: int,
        input_context: tf.distribute.InputContext | None = None,
    ) -> tf.data.Dataset:
        """The endless `(image, label)` stream `labelled` with these records sampled into it by
        their share of the training examples (each stream repeats on its own)."""
        from pipeline.data.datasets import files_for_pipeline

        files = self.files if input_context is None else files_for_pipeline(self.files, input_context)
        extra = self.read(config, ordered=False, files=files).map(lambda image, label, _: (image, label))
        if config.data.cache:
            extra = extra.cache()
        share = self.count / (self.count + labelled_count)
        return tf.data.Dataset.sample_from_datasets(
            [labelled, extra.repeat()], weights=[1.0 - share, share], seed=config.seed
        )


def relabelled(examples: tf.data.Dataset, ids: np.ndarray, labels: np.ndarray) -> tf.data.Dataset:
    """Unlabelled `(image, id)` examples -> `(image, label, id)`, the label looked up by id."""
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(np.asarray(ids).astype(str)), tf.constant(np.asarray(labels), tf.int32)
        ),
        default_value=-1,  # never met: the reader keeps only the ids the table holds
    )
    return examples.map(
        lambda image, key: (image, table.lookup(key), key), num_parallel_calls=tf.data.AUTOTUNE
    )
