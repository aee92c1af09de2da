"""Transfer on a CPU: what never trains runs once, and the rest trains on its cached outputs.

Kaggle competitors on weak hardware fine-tune a pretrained network this way. With the
backbone's lower layers frozen (and BatchNorm frozen), everything up to the first layer that
trains is a fixed function of the image: `cut` splits the classifier there, into `bottom`
(pixels -> activations) and `top` (activations -> class probabilities, the same layer objects as
the classifier's, so training `top` trains the classifier). `cache_splits` runs `bottom` once
per training example and view (the example, its mirror, then random views under the recipe's
augmentation) and once per val example, keeps the outputs in the run dir (float16), and gives
splits of them that the trainer reads like any other: each epoch shows every example through
one of its views, drawn at random. The val probabilities of the epoch kept as best are saved, and
evaluate reads them at TTA 1; predict runs the whole classifier on images.
The pass is saved in pieces a preempted run keeps; a cross-validation group's folds share one
pooled cache beside their runs, each fold taking its rows by id (pipeline/modeling/feature_cache.py).

On two CPU cores this is the difference between an epoch of EfficientNet-Lite0 on 9,600 photos
at 192 px in minutes and in seconds (`make bench-transfer`, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.data import passes, targets
from pipeline.modeling import feature_cache, feature_pass
from pipeline.modeling.network_cut import Cut

if TYPE_CHECKING:
    from pipeline.data.splits import Split

log = logging.getLogger(__name__)

FOLDER = RunDir.FEATURES  # inside the run dir: removed once the run is finished


# ----------------------------------------------------------------------------- the cached splits


@dataclass(frozen=True)
class FeatureSplit:
    """Cached activations of one split, [views, examples, ...] (float16), read like a `Split`."""

    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    seed: int = 0
    ids: np.ndarray | None = field(default=None, compare=False, repr=False)  # str, the rows' examples
    # An image_table's rows' numbers [examples, columns], beside the activations (`with_row_columns`).
    columns: np.ndarray | None = field(default=None, compare=False, repr=False)
    # Each new iterator (fit's second phase, a resumed run) draws its own orders and views: from
    # `seed` alone every phase would replay the first epoch's.
    draws: itertools.count = field(default_factory=itertools.count, compare=False, repr=False)

    @property
    def count(self) -> int:
        return self.features.shape[1]

    def class_counts(self, config: Config) -> np.ndarray:
        return targets.class_counts(self.labels, self.num_classes)

    def naming_bad(self, labeled: bool):
        return contextlib.nullcontext()  # read once already, when cached

    def train_dataset(self, config: Config, batch_size: int, input_context=None) -> tf.data.Dataset:
        """Endless batches of exactly `batch_size`: every example once an epoch, each through one
        of its views drawn at random, in a new order every epoch."""
        rows = np.arange(self.count)
        if input_context is not None:  # this input pipeline's share
            rows = rows[input_context.input_pipeline_id :: input_context.num_input_pipelines]
        if len(rows) < batch_size:
            raise PetalsError(
                f"train: {len(rows)} cached training examples per input pipeline, fewer than a batch of "
                f"{batch_size}: lower data.batch_size"
            )
        views, features, labels = len(self.features), self.features, targets.stored(self.labels)
        shape = features.shape[2:]

        def batches():
            rng = np.random.default_rng([self.seed, next(self.draws)])
            while True:
                order = rng.permutation(rows)
                drawn = rng.integers(views, size=len(order))
                for start in range(0, len(order) - batch_size + 1, batch_size):
                    pick = slice(start, start + batch_size)
                    inputs = feature_cache.as_float32(features[drawn[pick], order[pick]])
                    yield feature_cache.beside(inputs, self.columns, order[pick]), labels[order[pick]]

        signature = (
            feature_cache.beside(tf.TensorSpec((batch_size, *shape), tf.float32), self.columns),
            tf.TensorSpec(
                (batch_size, *labels.shape[1:]), labels.dtype
            ),  # a class id, a row of labels or numbers
        )
        return passes.untuned(tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2))

    def eval_dataset(
        self,
        config: Config,
        batch_size: int,
        labeled: bool,
        pad_to_batch: bool = False,
        with_ids: bool = False,
    ) -> tf.data.Dataset:
        """The first view (the examples themselves) in order, with their labels; padding rows
        (label -1) fill the last batch with `pad_to_batch`."""
        if not labeled or with_ids:
            raise ValueError("cached features serve training and its val scores only")  # a caller's bug
        features, labels, columns = self.features[0], targets.stored(self.labels), self.columns
        if pad_to_batch and len(labels) % batch_size:
            extra = batch_size - len(labels) % batch_size
            features = np.concatenate([features, np.zeros((extra, *features.shape[1:]), features.dtype)])
            labels = np.concatenate([labels, targets.padding(labels, extra)])
            columns = (
                None if columns is None else np.concatenate([columns, np.zeros((extra, columns.shape[1]))])
            )
        return feature_cache.float32_batches(features, batch_size, labels, columns)


def _views(config: Config, num_classes: int) -> list:
    """One function per view, uint8 image batches -> float32 pixel batches: the images, their
    mirror when flips keep the label, then random views under the recipe's augmentation (none
    when it has nothing but flips: they would repeat the first two)."""
    from pipeline.core.config import TRANSFORMS
    from pipeline.data import augment
    from pipeline.data.datasets import shift_scale

    def plain(images):
        return tf.cast(images, tf.float32)

    views = [plain]
    if config.augment.flip:
        views.append(lambda images: tf.cast(images[:, :, ::-1], tf.float32))
    aug = replace(config.augment, cutmix=0.0, mixup=0.0)

    def augmented(images):
        labels = tf.zeros([tf.shape(images)[0]], tf.int32)  # augmentation without mixing keeps labels
        pixels = tf.cast(images, tf.float32)
        return augment.augment_batch(pixels, labels, aug, num_classes, shift_scale=shift_scale(config))[0]

    random = [name for name in TRANSFORMS if name not in ("flip", "cutmix", "mixup") and getattr(aug, name)]
    while random and len(views) < config.train.feature_views:
        views.append(augmented)
    if len(views) < config.train.feature_views:
        log.info("train: %d views of each training example: the recipe has no other transform", len(views))
    return views[: config.train.feature_views]


def view_count(config: Config, examples: int) -> int:
    """How many views of each of `examples` training examples to cache: `train.feature_views`, or one
    where they are more than `train.feature_views_up_to` (a fold counts its whole group's examples,
    so every fold of a group reads the same pooled cache)."""
    limit = config.train.feature_views_up_to
    if limit and examples > limit and config.train.feature_views > 1:
        log.info("train: one view of each of %d examples (more only up to %d: train.feature_views_up_to)",
                 examples, limit)  # fmt: skip
        return 1
    return config.train.feature_views


def _part_ids(split) -> np.ndarray:
    """The ids of a fold's part: a RecordSplit's `only`, pseudo records' `ids`, a FileSplit's examples'."""
    only = getattr(split, "only", getattr(split, "ids", None))
    return np.asarray(only if only is not None else split.examples.ids).astype(str)


def _part_labels(split) -> np.ndarray:
    only = getattr(split, "only_labels", getattr(split, "labels", None))
    return np.asarray(only if only is not None else split.examples.labels)


def pooled(train: Split, val: Split) -> Split:
    """A fold's two parts as one split of every labelled example of the fold table, in id order:
    the same split whichever fold asks, so its random views are too."""
    from pipeline.formats.base import Examples

    ids = np.concatenate([_part_ids(train), _part_ids(val)])
    labels = np.concatenate([_part_labels(train), _part_labels(val)])
    order = np.argsort(ids, kind="stable")
    if getattr(train, "only", None) is not None:  # shards of every pooled split, read by id
        return replace(train, only=ids[order], only_labels=labels[order], pseudo=None)
    both = (train.examples, val.examples)
    inputs = tuple(np.concatenate(column) for column in zip(*(e.inputs for e in both), strict=True))
    return replace(train, examples=Examples(ids, inputs, labels).take(order), pseudo=None)


def _fold_part(pool: feature_cache.Rows, part, views: int | None, skip_bad: bool) -> feature_cache.Rows:
    """The pooled rows of a fold's part, by id (the pool is in id order)."""
    ids = _part_ids(part)
    at = np.clip(np.searchsorted(pool.ids, ids), 0, len(pool.ids) - 1)
    present = pool.ids[at] == ids
    if not present.all():
        if not skip_bad:  # the pool read every example of the table: a caller's bug
            raise RuntimeError(f"the pooled feature cache lacks id {ids[~present][0]!r}")
        log.info("train: %d examples of the fold skipped (unreadable)", int((~present).sum()))
    return pool.take(at[present], views)


def _split_of(rows: feature_cache.Rows, num_classes: int, seed: int) -> FeatureSplit:
    labels = rows.labels if targets.numeric(rows.labels) else rows.labels.astype(np.int64)
    return FeatureSplit(rows.features, labels, num_classes, seed, rows.ids)


def _fold_splits(cut_: Cut, train, val, views: list, config: Config, run_dir: Path, platform, source: str,
                 stop) -> tuple[FeatureSplit, FeatureSplit]:  # fmt: skip
    """A fold's (train, val) from its group's pooled cache beside the runs (computed once, by the
    first fold to need it): train is the rows of the folds kept in every view, val the held-out
    fold's in the first; no id is in both."""
    pool_split = pooled(train, val)
    digest = feature_cache.examples_digest(_part_ids(pool_split), _part_labels(pool_split))
    signature = feature_cache.signature(cut_, config, pool_split, source, pooled=digest)
    folder = feature_cache.shared_folder(run_dir.parent, digest, signature)
    with feature_cache.computing(folder, stop):
        pool = feature_pass.rows_of(
            "pooled",
            pool_split,
            views,
            cut_.bottom,
            config,
            folder,
            platform,
            signature,
            stop,
            by_id=True,
            hold=True,
        )
        feature_cache.add_user(folder, group_key(config))
    skip_bad = config.data.skip_bad_records
    kept, held = _fold_part(pool, train, None, skip_bad), _fold_part(pool, val, 1, skip_bad)
    if np.intersect1d(kept.ids, held.ids).size:
        raise RuntimeError("a fold's held-out examples are among its training rows")  # never train on val
    log.info("train: fold %d: %d training and %d val examples of %s", config.train.fold, len(kept.ids),
             len(held.ids), folder)  # fmt: skip
    classes, seed = train.spec.num_classes, config.seed
    return _split_of(kept, classes, seed), _split_of(held, classes, seed)


@contextlib.contextmanager
def _between_pieces(stop):
    """A signal during the pass is noted, not raised at once: the pass stops after its piece."""
    if stop is None:
        yield
        return
    before, stop.deferring = stop.deferring, True
    try:
        yield
    finally:
        stop.deferring = before


def cache_splits(cut_: Cut, train, val, config: Config, run_dir: Path, platform, source: str = "", stop=None):
    """(train, val) as cached features: train in `view_count` views, val in one. A fold
    (`train.folds`) reads its group's pooled cache beside the runs, any other run its own in
    `run_dir`. `source` is the data's fingerprint (the manifest's); `stop` (preemption.StopRequest)
    is asked between the pass's pieces."""
    views = _views(config, train.spec.num_classes)
    examples = pooled(train, val).count if config.train.folds and val is not None else train.count
    views = views[: view_count(config, examples)]
    with _between_pieces(stop):
        if config.train.folds and val is not None:
            kept, held = _fold_splits(cut_, train, val, views, config, run_dir, platform, source, stop)
            cached = _with_pseudo(
                kept, held, cut_, train, views, config, run_dir / FOLDER, platform, source, stop
            )
        else:
            cached = _own_splits(cut_, train, val, views, config, run_dir / FOLDER, platform, source, stop)
        feature_cache.stop_if_asked(stop, "after the feature cache's pass (saved)")
    return with_row_columns(cached, train, val)


def with_row_columns(cached: tuple, train, val) -> tuple:
    """The cached splits with each row's feature columns beside (an image_table's: they are read
    again, not cached), looked up by id in `train` (its pseudo rows too) and `val`."""
    parts = [getattr(s, "training_examples", None) for s in (train, val) if s is not None]
    if not parts or parts[0] is None or len(parts[0].inputs) != 2 or not train.images:
        return cached  # shards, or an image alone
    by_id = {key: row for e in parts for key, row in zip(e.ids.astype(str), e.inputs[1], strict=True)}
    return tuple(
        s if s is None else replace(s, columns=np.stack([by_id[key] for key in s.ids.astype(str)]))
        for s in cached
    )


def _with_pseudo(kept: FeatureSplit, held: FeatureSplit, cut_: Cut, train, views: list, config: Config,
                 folder: Path, platform, source: str, stop) -> tuple[FeatureSplit, FeatureSplit]:  # fmt: skip
    """(train, val) with the fold's pseudo-labelled test examples (pipeline/cv/pseudo.py) appended
    to train in every view, cached in the run's own folder: the pooled cache is labelled rows only."""
    part = train.pseudo_part() if hasattr(train, "pseudo_part") else None
    if part is None:
        return kept, held
    ids, labels = _part_ids(part), _part_labels(part)
    pooled_ = feature_cache.examples_digest(ids, labels)  # which examples, with which labels
    signature = feature_cache.signature(cut_, config, part, source, pooled=pooled_)
    rows = feature_pass.rows_of(
        "pseudo", part, views, cut_.bottom, config, folder, platform, signature, stop, by_id=True
    )
    if np.intersect1d(rows.ids, held.ids).size:
        raise RuntimeError("a pseudo-labelled example is a val example of the fold")  # never train on val
    both = np.concatenate([kept.features, rows.features], axis=1)
    labels = np.concatenate([kept.labels, rows.labels.astype(np.int64)])
    ids = np.concatenate([kept.ids, rows.ids])
    return replace(kept, features=both, labels=labels, ids=ids), held


def _own_splits(cut_: Cut, train, val, views: list, config: Config, folder: Path, platform, source: str,
                stop) -> tuple[FeatureSplit, FeatureSplit | None]:  # fmt: skip
    """A run's (train, val) cached in its own run dir: train in every view, val in the first."""
    num_classes, seed = train.spec.num_classes, config.seed

    def one(name: str, split, its_views: list) -> FeatureSplit:
        signature = feature_cache.signature(cut_, config, split, source)
        rows = feature_pass.rows_of(
            name, split, its_views, cut_.bottom, config, folder, platform, signature, stop
        )
        return _split_of(rows, num_classes, seed)

    return one("train", train, views), None if val is None else one("val", val, views[:1])


def remove_cache(run_dir: Path) -> None:
    """A finished run's cache goes: it is only for training, and large."""
    folder = run_dir / FOLDER
    if folder.is_dir():
        shutil.rmtree(folder)


def group_key(config: Config) -> str:
    """The CV group a fold's config belongs to: its config with the fold left out."""
    described = replace(config, train=replace(config.train, fold=0)).to_dict()
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def remove_shared(runs_dir: Path, table, config: Config) -> list[Path]:
    """The group of `config` has finished every fold (`table`: its FoldTable): its pooled caches
    under `runs_dir` go unless another group still marks them. The folders removed."""
    return feature_cache.remove_shared(runs_dir, table.ids, table.labels, group_key(config))
