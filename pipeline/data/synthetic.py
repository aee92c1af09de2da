"""The embedded offline dataset: procedurally drawn flowers in the competition's exact layout.

The drawing is `pipeline.data.synthetic_flowers`; this module plans each split (long-tailed
class counts, Kaggle-like ids), draws the images (in worker processes, unless they are few and
small) and writes them as the competition's TFRecord shards with a sample submission. Everything
is deterministic from one seed.

Only `write_dataset` imports TensorFlow, so rendering workers start fast.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import hashlib
import io
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from competition import CompetitionSpec
from pipeline.core.children import die_with_parent
from pipeline.core.progress import Progress
from pipeline.data.synthetic_flowers import (
    background,  # noqa: F401  synthetic_pets draws it from here
    class_traits,
    render_image,
)
from pipeline.formats.records import records_of


@dataclass(frozen=True)
class SplitPlan:
    """Which class each image of a split shows, and its id, in record order."""

    split: str
    labels: tuple[int, ...]
    ids: tuple[str, ...]


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- dataset plan

# Images per class at scale 1.0, before the long-tailed class weights (0.25..1): the real
# data is imbalanced too, and macro-F1 rewards getting the rare classes right.
BASE_PER_CLASS = {"train": 48, "val": 14, "test": 18}
# The embedded dataset's size: 9,607 train, 2,797 val and 3,605 test images at seed 0, about three
# quarters of the real train and val (12,753 and 3,712 images, ~120 per class) and half the test,
# drawn in about two minutes on two cores. At scale 1 (23 train images per class) a network
# trained from scratch is starved of examples of the one-trait differences between sister species.
DEFAULT_SCALE = 4.0


def class_weights(num_classes: int, seed: int) -> np.ndarray:
    """Long-tailed class frequencies in (0.25, 1]."""
    rng = np.random.default_rng([seed, 0xC0DE])
    return 0.25 + 0.75 * rng.random(num_classes) ** 2


def plan_split(split: str, split_index: int, num_classes: int, seed: int, scale: float) -> SplitPlan:
    """Labels in shuffled record order and unique Kaggle-like 9-hex-digit ids."""
    weights = class_weights(num_classes, seed)
    per_class = np.maximum(1, np.round(BASE_PER_CLASS[split] * scale * weights)).astype(int)
    labels = np.repeat(np.arange(num_classes), per_class)
    labels = np.random.default_rng([seed, split_index, 0x0DE5]).permutation(labels)
    ids = tuple(
        hashlib.sha1(f"petals-{seed}-{split}-{i}".encode()).hexdigest()[:9] for i in range(len(labels))
    )
    return SplitPlan(split=split, labels=tuple(int(v) for v in labels), ids=ids)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> None:
    """Let this process reuse freed image-sized arrays instead of handing them back to the kernel.

    glibc serves allocations over 128 KiB (one 192 px float image is 432 KiB) with mmap, or
    trims them off the heap once freed, so each of the ~100 temporary arrays of an image costs
    fresh zeroed pages: a fifth of the drawing time went to the kernel (sys), 14-16 ms an image
    against 11-12 ms with the thresholds raised. The images are the same bytes either way. A
    worker initializer: drawing processes only. Nothing to do where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20)
    libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)


def start_worker(parent: int) -> None:
    """A drawing worker's initializer: bound to its stage's life, glibc tuned for image arrays."""
    die_with_parent(parent)
    keep_freed_memory()


def render_batch(task: tuple) -> list[bytes]:
    """Worker entry point: JPEG bytes for a run of images of one split.

    `task` is (seed, split_index, first_index, labels, size, num_classes); each image's
    randomness comes from its own (seed, split, index) stream, so output does not
    depend on how the work is divided between processes.
    """
    seed, split_index, first, labels, size, num_classes = task
    traits = class_traits(num_classes, seed)
    return [
        encode_jpeg(render_image(traits[label], np.random.default_rng([seed, split_index, first + i]), size))
        for i, label in enumerate(labels)
    ]


# ----------------------------------------------------------------------------- writing


def write_dataset(
    out_dir: Path,
    spec: CompetitionSpec,
    *,
    size: int = 192,
    seed: int = 0,
    scale: float = DEFAULT_SCALE,
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, int]:
    """Write the synthetic dataset in the competition's exact layout under `out_dir`.

    Shards carry their counts in their names, test records carry no class, and
    `sample_submission.csv` lists the test ids. Returns images per split.
    """
    from pipeline.data import records  # TensorFlow, needed only in the writing process

    if size < 16:
        raise ValueError(f"synthetic image size {size} is too small (at least 16 px)")
    if not scale > 0:
        raise ValueError(f"synthetic scale {scale} must be positive")
    workers = workers or min(os.cpu_count() or 1, 8)
    plans = [plan_split(split, i, spec.num_classes, seed, scale) for i, split in enumerate(spec.splits)]
    total = sum(len(p.labels) for p in plans)
    for plan in plans:
        if len(plan.labels) < records_of(spec).shards_per_split:
            raise ValueError(
                f"synthetic scale {scale} gives {len(plan.labels)} {plan.split} images, "
                f"fewer than {records_of(spec).shards_per_split} shards"
            )
    counts: dict[str, int] = {}
    with (
        _drawers(workers, total, size) as pool,
        Progress(f"drawing {size}px flowers", total, "img", enabled=progress) as bar,
    ):
        for split_index, plan in enumerate(plans):
            split_dir = out_dir / records_of(spec).record_dir(size) / plan.split
            split_dir.mkdir(parents=True, exist_ok=True)
            labeled = spec.is_labeled(plan.split)
            bounds = np.array_split(np.arange(len(plan.labels)), records_of(spec).shards_per_split)
            tasks = [
                (seed, split_index, int(start), plan.labels[start : start + n], size, spec.num_classes)
                for shard in bounds
                for start, n in _chunks(int(shard[0]), len(shard), 32)
            ]
            jpegs: list[bytes] = []
            for batch in pool.map(render_batch, tasks):
                jpegs.extend(batch)
                bar.advance(len(batch))
            for index, shard in enumerate(bounds):
                serialized = [
                    records.serialize_example(
                        records_of(spec).schema, jpegs[i], plan.ids[i], plan.labels[i] if labeled else None
                    )
                    for i in shard
                ]
                name = records_of(spec).shard_name(index, size, len(serialized))
                records.write_shard(str(split_dir / name), serialized)
            counts[plan.split] = len(plan.labels)
    test = next(p for p in plans if not spec.is_labeled(p.split))
    pd.DataFrame({spec.id_column: test.ids, spec.label_column: 0}).to_csv(
        out_dir / spec.sample_submission, index=False
    )
    return counts


# Drawing an image takes about 1 ms at 64 px and 7 ms at 192 px here; starting a worker process costs
# about 1.2 CPU-seconds (its imports). Below this much drawing, this process draws alone.
POOL_FROM_SECONDS = 4.0


@contextlib.contextmanager
def _drawers(workers: int, total: int, size: int):
    """What draws the images (`.map`): worker processes, or this one when there is one worker or
    less drawing than starting them costs. The images are the same either way (`render_batch`)."""
    seconds = total * (0.001 + 0.006 * (size / 192) ** 2)
    if workers == 1 or seconds < POOL_FROM_SECONDS:
        yield builtins
        return
    context = multiprocessing.get_context("spawn")  # never fork a process that has loaded TensorFlow
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(),)
    ) as pool:
        yield pool


def _chunks(first: int, n: int, step: int) -> list[tuple[int, int]]:
    return [(first + k, min(step, n - k)) for k in range(0, n, step)]
