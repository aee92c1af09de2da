"""Inspect stage: a PNG grid of one augmented training batch and per-class counts of every split.

Look before training: the grid shows what the model will see under the recipe's
augmentation (whether it runs on the host or the device), titled with class names (the
two largest shares for CutMix/MixUp soft labels); the table shows the class balance.
Writes `batch.png` and `class_counts.csv` to --out.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from competition import CompetitionSpec, load_spec
from pipeline.core import config as config_module
from pipeline.core import device
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import pyplot, save_figure, write_atomically

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="fetched data dir")
    parser.add_argument("--out", type=Path, default=Path("runs/inspect"), help="folder for the PNG and CSV")
    parser.add_argument("--images", type=int, default=20, help="images in the grid (one batch)")
    device.add_arguments(parser, tpu=False)
    config_module.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from pipeline.data import augment

    if args.images <= 0:
        raise PetalsError(f"--images {args.images}: must be positive")
    platform = device.pick_from_args(args)  # the recipe and where augmentation runs follow the device
    config = config_module.config_from_args(args, platform.device)
    where = augment.placement(config.augment.where, platform.backend, platform.device)
    inspect(config, args.data_dir, args.out, args.images, where)


def inspect(config: Config, data_dir: Path, out: Path, images: int, where: str = "host") -> dict[str, Path]:
    """Write the batch grid and the class-count table; return their paths.

    `where` (host or device) only labels the grid: the batch is augmented here either way.
    """
    import tensorflow as tf

    from pipeline.data import datasets
    from pipeline.data.manifest import locate_data

    spec = load_spec(config.competition)
    root = locate_data(data_dir)
    size = config.data.image_size
    files = {split: datasets.shard_files(root, spec, size, split) for split in spec.splits}
    tf.random.set_seed(config.seed)
    out.mkdir(parents=True, exist_ok=True)

    counts = class_counts(files, spec, size, config.data.skip_bad_records)
    counts_path = out / "class_counts.csv"
    write_atomically(counts_path, lambda tmp: counts.to_csv(tmp, index_label="class"))
    _print_counts(counts, spec)

    train = files["train"]
    with datasets.naming_bad_records(train, spec, size, labeled=True):
        batch_images, batch_labels = _one_augmented_batch(train, spec, config, images)
    grid_path = out / "batch.png"
    save_figure(_grid(batch_images, batch_labels, spec, config, where), grid_path, dpi=80)
    log.info("inspect: wrote %s and %s", grid_path, counts_path)

    if config.data.skip_bad_records:
        reports = [
            r
            for split in spec.splits
            for r in datasets.scan_shards(files[split], spec, size, spec.is_labeled(split))
        ]
        for line in datasets.skipped_summary(reports) or ["no unreadable records"]:
            log.warning("inspect: %s", line)
    return {"grid": grid_path, "counts": counts_path}


# ----------------------------------------------------------------------------- counts


def class_counts(
    files: dict[str, list[str]], spec: CompetitionSpec, size: int, skip_bad: bool
) -> pd.DataFrame:
    """Images per class in each labeled split (labels parsed, images not decoded), plus names."""
    from pipeline.data import datasets

    table = pd.DataFrame({"name": spec.classes})
    for split in spec.labeled_splits:
        table[split] = datasets.class_counts(files[split], spec, size, skip_bad)
    return table


def _print_counts(counts: pd.DataFrame, spec: CompetitionSpec) -> None:
    lines = [f"{'split':<8}{'images':>8}{'classes':>9}{'min':>6}{'median':>8}{'max':>6}"]
    for split in spec.labeled_splits:
        column = counts[split]
        lines.append(
            f"{split:<8}{column.sum():>8}{(column > 0).sum():>9}{column.min():>6}"
            f"{column.median():>8.0f}{column.max():>6}"
        )
    rarest = counts.nsmallest(5, spec.labeled_splits[0])
    lines.append(
        f"rarest in {spec.labeled_splits[0]}: "
        + ", ".join(f"{row['name']} ({row[spec.labeled_splits[0]]})" for _, row in rarest.iterrows())
    )
    for split in spec.labeled_splits:
        absent = counts.index[counts[split] == 0].tolist()
        if absent:
            lines.append(f"warning: {len(absent)} classes have no {split} images: {absent[:10]}")
    print("\n".join(lines))


# ----------------------------------------------------------------------------- the grid


def _one_augmented_batch(files: list[str], spec: CompetitionSpec, config: Config, images: int):
    """One training batch augmented as the model would see it, wherever the recipe runs augmentation."""
    import dataclasses

    from pipeline.data import datasets

    on_host = dataclasses.replace(config, augment=dataclasses.replace(config.augment, where="host"))
    batch = next(iter(datasets.train_dataset(files, spec, on_host, images)))
    return batch[0].numpy(), batch[1].numpy()


def _title(label: np.ndarray, spec: CompetitionSpec) -> str:
    if label.ndim == 0:
        return spec.classes[int(label)]
    top = np.argsort(label)[::-1][:2]
    parts = [f"{spec.classes[i]} {label[i]:.0%}" for i in top if label[i] > 0.005]
    return "\n".join(parts)


def _grid(images: np.ndarray, labels: np.ndarray, spec: CompetitionSpec, config: Config, where: str):
    """The batch as a grid of images, each titled with its class (or its two largest shares)."""
    plt = pyplot()

    n = len(images)
    cols = min(n, 5)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 2.6, rows * 2.9), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, label in zip(axes.flat, images, labels, strict=False):
        ax.imshow(np.clip(image / 255.0, 0.0, 1.0))
        ax.set_title(_title(label, spec), fontsize=8)
    fig.suptitle(
        f"one training batch, recipe {config.recipe}, {images.shape[1]} px, augmentation on the {where}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig
