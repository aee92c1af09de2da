"""Transfer on a CPU: what never trains runs once, and the rest trains on its cached outputs.

Kaggle competitors on weak hardware fine-tune a pretrained network this way. With the
backbone's lower layers frozen (and BatchNorm frozen), everything up to the first layer that
trains is a fixed function of the image: `cut` splits the classifier there, into `bottom`
(pixels -> activations) and `top` (activations -> class probabilities, the same layer objects as
the classifier's, so training `top` trains the classifier). `cache_splits` runs `bottom` once
per training example and view (the example, its mirror, then random views under the recipe's
augmentation) and once per val example, keeps the outputs in the run dir (float16), and gives
splits of them that the trainer reads like any other: each epoch shows every example through
one of its views, drawn at random. Evaluate and predict run the whole classifier on images.

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
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically

log = logging.getLogger(__name__)

FOLDER = "features"  # inside the run dir: removed once the run is finished
EXTRACT_BATCH = 128  # examples per predict call while caching


# ----------------------------------------------------------------------------- splitting the network


@dataclass
class Cut:
    """The classifier split where its trainable part begins."""

    bottom: keras.Model  # pixels -> the activations that cross the cut (never trains)
    top: keras.Model  # those activations -> class probabilities (shares the classifier's layers)
    layers: int  # how many of the backbone's last layers are in `top`
    at: str  # the first of them, or "head" when `top` is the head alone


def _tensors_in(layer: keras.layers.Layer) -> list:
    return keras.tree.flatten(layer.input)


def crossing_layers(backbone: keras.Model, wanted: int) -> int:
    """The fewest of the backbone's last layers, at least `wanted`, whose inputs from below are a
    single tensor (a block boundary): the place the network can be cut and cached."""
    body = [layer for layer in backbone.layers if not isinstance(layer, keras.layers.InputLayer)]
    for count in range(max(wanted, 1), len(body) + 1):
        upper = body[-count:]
        names = {layer.name for layer in upper}
        crossing = {
            id(tensor)
            for layer in upper
            for tensor in _tensors_in(layer)
            if tensor._keras_history.operation.name not in names
        }
        if len(crossing) == 1:
            return count
    return len(body)


def cut(net: keras.Model, unfrozen_layers: int, train_backbone: bool) -> Cut:
    """Split `net` (registry.build_classifier's shape: ... -> backbone -> head layers) below the
    backbone's last `unfrozen_layers` layers, or below the head when the backbone never trains."""
    backbone = net.get_layer("backbone")
    where = net.layers.index(backbone)
    into_backbone = net.input
    for layer in net.layers[1:where]:  # the input's cast and the backbone's preprocessing: a chain
        into_backbone = layer(into_backbone)
    head = net.layers[where + 1 :]
    if train_backbone:
        count = crossing_layers(backbone, unfrozen_layers)
        body = [layer for layer in backbone.layers if not isinstance(layer, keras.layers.InputLayer)]
        first = body[-count]
        inner = _tensors_in(first)[0]
        lower = keras.Model(backbone.input, inner, name="backbone_below_cut")
        upper = keras.Model(inner, backbone.output, name="backbone_above_cut")
        bottom = keras.Model(net.input, lower(into_backbone), name="bottom")
        at = first.name
    else:
        count, at, upper = 0, "head", None
        bottom = keras.Model(net.input, backbone(into_backbone), name="bottom")
    activations = keras.Input(bottom.output.shape[1:], name="activations")
    x = upper(activations) if upper is not None else activations
    for layer in head:
        x = layer(x)
    return Cut(bottom=bottom, top=keras.Model(activations, x, name="top"), layers=count, at=at)


# ----------------------------------------------------------------------------- the cached splits


@dataclass(frozen=True)
class FeatureSplit:
    """Cached activations of one split, [views, examples, ...] (float16), read like a `Split`."""

    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    seed: int = 0
    # Each new iterator (fit's second phase, a resumed run) draws its own orders and views: from
    # `seed` alone every phase would replay the first epoch's.
    draws: itertools.count = field(default_factory=itertools.count, compare=False, repr=False)

    @property
    def count(self) -> int:
        return self.features.shape[1]

    def class_counts(self, config: Config) -> np.ndarray:
        return np.bincount(self.labels, minlength=self.num_classes)

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
        views, features, labels = len(self.features), self.features, self.labels.astype(np.int32)
        shape = features.shape[2:]

        def batches():
            rng = np.random.default_rng([self.seed, next(self.draws)])
            while True:
                order = rng.permutation(rows)
                drawn = rng.integers(views, size=len(order))
                for start in range(0, len(order) - batch_size + 1, batch_size):
                    pick = slice(start, start + batch_size)
                    yield features[drawn[pick], order[pick]], labels[order[pick]]

        signature = (
            tf.TensorSpec((batch_size, *shape), tf.float16),
            tf.TensorSpec((batch_size,), tf.int32),
        )
        return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)

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
        from pipeline.data.datasets import PAD_LABEL

        if not labeled or with_ids:
            raise ValueError("cached features serve training and its val scores only")  # a caller's bug
        features, labels = self.features[0], self.labels.astype(np.int32)
        if pad_to_batch and len(labels) % batch_size:
            extra = batch_size - len(labels) % batch_size
            features = np.concatenate([features, np.zeros((extra, *features.shape[1:]), features.dtype)])
            labels = np.concatenate([labels, np.full(extra, PAD_LABEL, np.int32)])
        return tf.data.Dataset.from_tensor_slices((features, labels)).batch(batch_size)


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


def _extract(bottom: keras.Model, batches: tf.data.Dataset, platform) -> tuple[np.ndarray, np.ndarray]:
    """`bottom`'s outputs (float16) and the labels of every example of `batches`, in order."""
    from pipeline.modeling.inference import predict_batches

    outputs, labels = [], []
    for images, tags in batches.as_numpy_iterator():
        one = tf.data.Dataset.from_tensors(images)
        outputs.append(predict_batches(bottom, one, platform).astype(np.float16))
        labels.append(tags)
    return np.concatenate(outputs), np.concatenate(labels)


def _signature(cut_: Cut, config: Config, split, source: str) -> dict:
    """What a split's cached activations depend on: the network below the cut and what it reads
    (data, augmentation and model settings, the seed of the random views), which examples the split
    holds (the fold, val merged or not) and the data itself (its fingerprint). A run dir reused with
    any of them changed (`--run NAME`) computes its cache again instead of training on stale rows."""
    reads = {
        **{key: value for key, value in config.to_dict().items() if key != "train"},
        "split": [config.train.merge_val, config.train.folds, config.train.fold],
        "source": source,
    }
    return {
        "cut": cut_.at,
        "layers": cut_.layers,
        "views": config.train.feature_views,
        "examples": split.count,
        "reads": hashlib.sha256(json.dumps(reads, sort_keys=True).encode()).hexdigest(),
    }


def _cached(path: Path, signature: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The features and labels saved at `path` if their signature is `signature`."""
    if not path.is_file():
        return None
    with np.load(path) as saved:
        if "signature" not in saved.files or json.loads(str(saved["signature"])) != signature:
            return None
        return saved["features"], saved["labels"]


def _save(path: Path, features: np.ndarray, labels: np.ndarray, signature: dict) -> None:
    """One file holds the rows and what they were computed from, renamed into place whole."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as out:
            np.savez(out, features=features, labels=labels, signature=np.asarray(json.dumps(signature)))

    write_atomically(path, write)


def _every_process_has(platform, here: bool) -> bool:
    """Whether every process found its cache (each one asks, always: a process that computes
    waits in the shared predicting for the others; the scratch run dir of a process other than 0
    holds none)."""
    from pipeline.modeling.host_predict import allgather

    return bool(np.min(allgather(platform, np.asarray([int(here)]))))


def _cache_split(
    name: str, split, views: list, cut_: Cut, config: Config, folder: Path, platform, source: str
) -> FeatureSplit:
    """The cached views of one split, computed and saved unless the folder already holds them."""
    from pipeline.data import datasets

    path = folder / f"{name}.npz"
    signature = _signature(cut_, config, split, source)
    saved = _cached(path, signature)
    if platform.hosts.several and not _every_process_has(platform, saved is not None):
        saved = None  # the processes predict the pass together: all of them, or none, compute it
    if saved is not None:
        features, labels = saved
        log.info("train: %s features cached already (%s)", name, path)
    else:
        started = time.perf_counter()
        per_view, labels = [], None
        for k, view in enumerate(views):
            tf.random.set_seed(config.seed * 1000 + k)  # each random view the same on a rerun
            batches = split.eval_dataset(config, EXTRACT_BATCH, labeled=True)
            batches = batches.map(lambda images, tags, view=view: (view(images), tags))
            with split.naming_bad(labeled=True):
                output, view_labels = _extract(cut_.bottom, batches.prefetch(datasets.AUTOTUNE), platform)
            if labels is not None and not np.array_equal(labels, view_labels):
                raise RuntimeError(f"{name}: views came in different orders")  # a reader's bug
            per_view.append(output)
            labels = view_labels
        features = np.stack(per_view)
        folder.mkdir(parents=True, exist_ok=True)
        _save(path, features, labels, signature)
        seconds = time.perf_counter() - started
        examples = features.shape[0] * features.shape[1]
        log.info(
            "train: cached %s features: %d views x %d examples -> %s, %.0f s (%.0f examples/s)",
            name,
            len(per_view),
            features.shape[1],
            "x".join(map(str, features.shape[2:])),
            seconds,
            examples / seconds,
        )
    return FeatureSplit(features, labels.astype(np.int64), split.spec.num_classes, config.seed)


def cache_splits(cut_: Cut, train, val, config: Config, run_dir: Path, platform, source: str = ""):
    """(train, val) as cached features in `run_dir`: train in `train.feature_views` views, val in one.
    `source` is the data's fingerprint (the manifest's)."""
    folder = run_dir / FOLDER
    views = _views(config, train.spec.num_classes)
    cached_train = _cache_split("train", train, views, cut_, config, folder, platform, source)
    cached_val = (
        None if val is None else _cache_split("val", val, views[:1], cut_, config, folder, platform, source)
    )
    return cached_train, cached_val


def remove_cache(run_dir: Path) -> None:
    """A finished run's cache goes: it is only for training, and large."""
    folder = run_dir / FOLDER
    if folder.is_dir():
        shutil.rmtree(folder)
