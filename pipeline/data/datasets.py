"""The input pipeline: shard lists -> tf.data datasets for training, validation and test.

Each step is a small function: `read_examples` (interleaved reads, parse, decode, static
shape), then `train_dataset` (cache, repeat, shuffle, batch with a static batch size,
resize, host augmentation, prefetch) or `eval_dataset` (deterministic order, ids or labels
kept, the last batch optionally padded to a static size). Paths may be local or `gs://`.

Unreadable records (a corrupt JPEG, a truncated shard) stop the run with the file named
(`naming_bad_records`), or, with `data.skip_bad_records`, are skipped and reported per file
(`scan_shards`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError, first_line
from pipeline.data import augment, image_inputs, records, targets
from pipeline.formats.records import records_of

log = logging.getLogger(__name__)


class MixedIn(Protocol):  # pseudo-labelled test records (pseudo_records.py), trained on beside these
    def mixed_into(self, labelled: tf.data.Dataset, config: Config, labelled_count: int, input_context): ...


AUTOTUNE = tf.data.AUTOTUNE
CYCLE_LENGTH = 16  # shards read at once; Kaggle ships 16 per split
PAD_LABEL = targets.PAD_LABEL  # label of the padding examples `eval_dataset(pad_to_batch=True)` appends
PAD_ID = b""  # id of those padding examples


def global_batch_size(per_replica: int, replicas: int) -> int:
    """The batch tf.data builds: per-replica batch x replicas in sync."""
    if per_replica <= 0 or replicas <= 0:
        raise PetalsError(
            f"batch size {per_replica} per replica x {replicas} replicas: both must be positive"
        )
    return per_replica * replicas


def shard_files(root: str, spec: CompetitionSpec, size: int, split: str) -> list[str]:
    """A split's shards at one resolution, or a PetalsError that says what the data dir has."""
    files = records.list_shards(root, spec, size, split)
    if not files:
        from pipeline.data.layout import found_sizes

        present = found_sizes(root, spec) if tf.io.gfile.isdir(root) else []
        raise PetalsError(
            f"{root}: no {records_of(spec).record_dir(size)}/{split} shards "
            f"(resolutions present: {present or 'none'}); "
            f"fetch that resolution or set data.image_size to one of them"
        )
    records.check_local_shards(files)  # one put in the data dir since fetch checked them
    return files


# ----------------------------------------------------------------------------- reading


def file_records(path: tf.Tensor, skip_bad: bool) -> tf.data.Dataset:
    """One shard's serialized records."""
    records_of_file = tf.data.TFRecordDataset(path)
    # Per file, so a truncated shard ends only its own records (and never loops on its error).
    return records_of_file.ignore_errors() if skip_bad else records_of_file


def read_examples(
    files: Sequence[str],
    spec: CompetitionSpec,
    size: int,
    labeled: bool,
    ordered: bool,
    skip_bad: bool = False,
    with_ids: bool = False,
    only: np.ndarray | None = None,
) -> tf.data.Dataset:
    """Examples `(uint8 image [size, size, 3], label int32 | id string)` from shards
    (`(image, label, id)` for labeled records `with_ids`); `only`: the ids to keep (a fold's part).

    Reads up to 16 shards at once; `ordered=False` lets tf.data hand out whichever record is
    ready first (training), `ordered=True` fixes the order run to run (validation, test).
    """
    dataset = tf.data.Dataset.from_tensor_slices(list(files))
    dataset = dataset.interleave(
        partial(file_records, skip_bad=skip_bad),
        cycle_length=min(CYCLE_LENGTH, len(files)),
        num_parallel_calls=AUTOTUNE,
        deterministic=ordered,
    )
    if only is not None:
        dataset = records.selected(dataset, records_of(spec).schema, only)
    parse = partial(
        records.read_record, schema=records_of(spec).schema, size=size, labeled=labeled, with_id=with_ids
    )
    dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE, deterministic=ordered)
    if skip_bad:
        dataset = dataset.ignore_errors()  # a record whose image does not decode
    options = tf.data.Options()
    options.deterministic = ordered
    return dataset.with_options(options)


def class_counts(
    files: Sequence[str], spec: CompetitionSpec, size: int, skip_bad: bool = False
) -> np.ndarray:
    """Images per class in labeled shards, read in parallel without decoding one image."""
    feature = {records_of(spec).schema.label: tf.io.FixedLenFeature([], tf.int64)}

    def labels_of(path):
        batches = file_records(path, skip_bad).batch(4096)
        return batches.map(
            lambda records: (tf.io.parse_example(records, feature)[records_of(spec).schema.label], path)
        )

    files = list(files)
    reads = tf.data.Dataset.from_tensor_slices(files)
    dataset = reads.interleave(labels_of, cycle_length=CYCLE_LENGTH, num_parallel_calls=AUTOTUNE)
    counts = np.zeros(spec.num_classes, np.int64)
    with naming_bad_records(files, spec, size, labeled=True):
        for labels, path in dataset.as_numpy_iterator():
            outside = labels[(labels < 0) | (labels >= spec.num_classes)]
            if outside.size:
                raise PetalsError(
                    f"{path.decode()}: label {outside[0]} is not a class (0..{spec.num_classes - 1})"
                )
            counts += np.bincount(labels, minlength=spec.num_classes)
    return counts


def resize_batch(images: tf.Tensor, size: int) -> tf.Tensor:
    """Resize a batch to the model's input size (a no-op, keeping uint8, when it already is)."""
    if images.shape[1] == size and images.shape[2] == size:
        return images
    return tf.image.resize(tf.cast(images, tf.float32), [size, size], antialias=True)


def input_size(config: Config) -> int:
    return config.data.input_size or config.data.image_size


def shift_scale(config: Config) -> float:
    """Model pixels per record pixel: `augment.shift` is in record pixels."""
    return input_size(config) / config.data.image_size


# ----------------------------------------------------------------------------- datasets


def files_for_pipeline(files: Sequence[str], context: tf.distribute.InputContext) -> list[str]:
    """This input pipeline's share of the shards (every n-th), so pipelines never read the same record."""
    share = list(files)[context.input_pipeline_id :: context.num_input_pipelines]
    if not share:
        raise PetalsError(f"{len(files)} shards cannot feed {context.num_input_pipelines} input pipelines")
    return share


def train_dataset(
    files: Sequence[str],
    spec: CompetitionSpec,
    config: Config,
    batch_size: int,
    input_context: tf.distribute.InputContext | None = None,
    only: np.ndarray | None = None,
    pseudo: MixedIn | None = None,
) -> tf.data.Dataset:
    """Endless shuffled training batches of exactly `batch_size` (static shapes for TPUs);
    `pseudo`: pseudo-labelled test records mixed in by their share (pipeline/data/pseudo_records.py).

    `batch_size` is the global batch, or this input pipeline's when an `input_context` shards the
    files between pipelines: a replica's (`distribute_datasets_from_function`) or a host's
    (`hosts.input_share`).
    With `augment.where == "host"` the batches leave augmented (float32, maybe soft labels);
    with `"device"` they leave as uint8 and the train step augments them.
    """
    if config.augment.where not in ("host", "device"):
        raise ValueError(f"augment.where={config.augment.where!r}: resolve it first (augment.placement)")
    data = config.data
    if input_context is not None:
        files = files_for_pipeline(files, input_context)
    dataset = read_examples(
        files, spec, data.image_size, labeled=True, ordered=False, skip_bad=data.skip_bad_records, only=only
    )
    if data.cache:
        dataset = dataset.cache()
    dataset = dataset.repeat()
    if pseudo is not None:  # only a fold's part has them: `only` counts its labelled records
        dataset = pseudo.mixed_into(dataset, config, len(only), input_context)
    dataset = dataset.shuffle(data.shuffle_buffer)
    dataset = dataset.batch(batch_size, drop_remainder=True, num_parallel_calls=AUTOTUNE, deterministic=False)
    return augmented(dataset, spec, config)


def augmented(batches: tf.data.Dataset, spec: CompetitionSpec, config: Config) -> tf.data.Dataset:
    """Training batches of uint8 images at the model's input size, augmented here with
    `augment.where == "host"` (float32, maybe soft labels), left to the train step otherwise."""
    dataset = resized(batches, config)
    if config.augment.where == "host":
        # XLA fuses the whole augmentation into a few loops: 2.5x the plain graph on CPU.
        augment_on_host = tf.function(
            partial(
                augment.augment_inputs,
                aug=config.augment,
                num_classes=spec.num_classes,
                xla=True,
                shift_scale=shift_scale(config),
            ),
            jit_compile=True,
        )
        dataset = dataset.map(augment_on_host, num_parallel_calls=AUTOTUNE, deterministic=False)
    return dataset.prefetch(AUTOTUNE)


def resized(batches: tf.data.Dataset, config: Config) -> tf.data.Dataset:
    """Batches at the model's input size; no extra stage when the records already are."""
    size = input_size(config)
    if size == config.data.image_size:
        return batches
    return batches.map(image_inputs.on_image(partial(resize_batch, size=size)), num_parallel_calls=AUTOTUNE)


def eval_dataset(
    files: Sequence[str],
    spec: CompetitionSpec,
    config: Config,
    batch_size: int,
    labeled: bool,
    pad_to_batch: bool = False,
    with_ids: bool = False,
    only: np.ndarray | None = None,
) -> tf.data.Dataset:
    """Validation (`labeled`: image, label) or test (image, id) batches in a fixed order, unaugmented;
    `with_ids` gives labeled batches as (image, label, id).

    `pad_to_batch` appends padding examples (label -1, id "") so that every batch is full,
    which static-shape devices need; drop them after predicting with `is_padding`.
    """
    data = config.data
    dataset = read_examples(
        files,
        spec,
        data.image_size,
        labeled=labeled,
        ordered=True,
        skip_bad=data.skip_bad_records,
        with_ids=with_ids and labeled,
        only=only,
    )
    if data.cache:
        dataset = dataset.cache()
    if pad_to_batch:
        blank = tf.zeros([data.image_size, data.image_size, 3], tf.uint8)
        tags = (tf.constant(PAD_LABEL, tf.int32),) if labeled else ()
        if with_ids or not labeled:
            tags += (tf.constant(PAD_ID),)
        padding = tf.data.Dataset.from_tensors((blank, *tags)).repeat(batch_size - 1)
        dataset = dataset.concatenate(padding)
    dataset = dataset.batch(batch_size, drop_remainder=pad_to_batch)
    dataset = resized(dataset, config)
    return dataset.prefetch(AUTOTUNE)


def is_padding(tags: tf.Tensor) -> tf.Tensor:
    """True for the padding examples of `eval_dataset(pad_to_batch=True)`: label -1 (NaN) or empty id."""
    return tf.equal(tags, PAD_ID) if tags.dtype == tf.string else targets.padded_tf(tags)


# ----------------------------------------------------------------------------- bad records


@dataclass
class ShardReport:
    """What a scan found in one shard."""

    path: str
    records: int  # records read (up to a truncation)
    expected: int | None  # records its name promises
    bad: list[int] = field(default_factory=list)  # indexes of records whose image did not decode
    decode_error: str = ""  # why the first of them did not
    truncation_error: str = ""  # set when the shard ends early

    @property
    def truncated(self) -> bool:
        return bool(self.truncation_error)

    @property
    def skipped(self) -> int:
        """Records lost: undecodable ones plus those missing after a truncation."""
        missing = max(0, (self.expected or self.records) - self.records)
        return len(self.bad) + missing

    def describe(self) -> str:
        """One line: the shard and what is wrong with it."""
        parts = []
        if self.bad:
            parts.append(
                f"{len(self.bad)} unreadable record(s), first record {self.bad[0]} ({self.decode_error})"
            )
        if self.truncated:
            parts.append(
                f"truncated after {self.records} of {self.expected or '?'} records ({self.truncation_error})"
            )
        return f"{self.path}: {'; '.join(parts)}"


def scan_shard(path: str, spec: CompetitionSpec, size: int, labeled: bool) -> ShardReport:
    """Read and decode every record of one shard; report what cannot be read."""
    report = ShardReport(path=path, records=0, expected=records.count_from_name(path))
    try:
        report.records = records.count_records(path)
    except tf.errors.DataLossError as err:
        report.truncation_error = first_line(err)
        readable = tf.data.TFRecordDataset(path).ignore_errors()
        report.records = int(readable.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
    parse = partial(records.read_record, schema=records_of(spec).schema, size=size, labeled=labeled)
    # The sum forces the decode; an index missing from the output is a record that failed.
    decoded = (
        tf.data.TFRecordDataset(path)
        .ignore_errors()
        .enumerate()
        .map(lambda i, r: (i, tf.reduce_sum(tf.cast(parse(r)[0], tf.int32))), num_parallel_calls=AUTOTUNE)
        .ignore_errors()
    )
    good = {int(i) for i, _ in decoded.as_numpy_iterator()}
    report.bad = sorted(set(range(report.records)) - good)
    if report.bad:
        serialized = next(iter(tf.data.TFRecordDataset(path).skip(report.bad[0]).take(1)))
        try:
            parse(serialized)
            report.decode_error = "does not decode"
        except (tf.errors.InvalidArgumentError, ValueError) as err:
            report.decode_error = first_line(err)
    return report


def scan_shards(
    files: Sequence[str], spec: CompetitionSpec, size: int, labeled: bool, stop_at_first: bool = False
) -> list[ShardReport]:
    """Reports for the shards with unreadable records (all shards read; or up to the first bad one)."""
    found = []
    for path in files:
        report = scan_shard(path, spec, size, labeled)
        if report.skipped:
            found.append(report)
            if stop_at_first:
                break
    return found


def skipped_summary(reports: Sequence[ShardReport]) -> list[str]:
    """One line per shard with skipped records, and a total."""
    if not reports:
        return []
    total = sum(r.skipped for r in reports)
    return [f"skipped {total} unreadable record(s) in {len(reports)} shard(s):"] + [
        f"  {r.path}: {r.skipped} skipped" + (" (truncated)" if r.truncated else "") for r in reports
    ]


SKIP_HINT = "pass --set data.skip_bad_records=true to skip unreadable records and report them"


def raise_if_vanished(files: Sequence[str], err: BaseException) -> None:
    """A PetalsError naming the first of `files` that is gone (deleted or unmounted while a stage
    read it: tf.data says only "not found"), raised from `err`; nothing when all are there."""
    gone = [f for f in files if not tf.io.gfile.exists(f)]
    if gone:
        more = f" and {len(gone) - 1} more of the {len(files)}" if len(gone) > 1 else ""
        raise PetalsError(
            f"{gone[0]}{more}: gone while the stage read it; fetch the data again "
            "(make fetch FORCE=1) and rerun: training resumes from its last checkpoint"
        ) from err


@contextmanager
def naming_bad_records(
    files: Sequence[str], spec: CompetitionSpec, size: int, labeled: bool
) -> Iterator[None]:
    """Turn tf.data's anonymous read/decode errors into a PetalsError naming the shard and record."""
    try:
        yield
    except (tf.errors.NotFoundError, FileNotFoundError) as err:
        raise_if_vanished(files, err)
        raise
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        found = scan_shards(files, spec, size, labeled, stop_at_first=True)
        if not found:
            raise  # not a bad record: a real bug, keep its traceback
        raise PetalsError(f"{found[0].describe()}; {SKIP_HINT}") from err
