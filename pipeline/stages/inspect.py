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

import pandas as pd

from competition import CompetitionSpec
from pipeline.core import device
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.foreign import EACH, safe_cells, text
from pipeline.stages import arguments
from pipeline.tasks import recipe_config

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=Path("runs/inspect"), help="folder for the PNG and CSV")
    parser.add_argument("--images", type=int, default=20, help="images in the grid (one batch)")
    device.add_arguments(parser, tpu=False)
    recipe_config.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from pipeline.data import augment

    if args.images <= 0:
        raise PetalsError(f"--images {args.images}: must be positive")
    platform = device.pick_from_args(args)  # the recipe and where augmentation runs follow the device
    config = recipe_config.config_from_args(args, platform.device)
    where = augment.placement(config.augment.where, platform.backend, platform.device)
    inspect(config, args.data_dir, args.out, args.images, where)


def inspect(config: Config, data_dir: Path, out: Path, images: int, where: str = "host") -> dict[str, Path]:
    """Write what the competition's task shows of one training batch (images: `batch.png`, a grid;
    texts: `batch.csv`) and the class-count table; return their paths.

    `where` (host or device) only labels the grid: the batch is augmented here either way.
    """
    import tensorflow as tf

    from pipeline.data import splits
    from pipeline.data.manifest import locate_data
    from pipeline.data.readers import reader_for
    from pipeline.tasks.competitions import load_competition

    competition = load_competition(config.competition)
    spec = competition.spec
    root = locate_data(data_dir)
    train, val = splits.train_and_val(root, spec, config, splits.fold_table(data_dir, spec, config))
    labeled = {"train": train, **({"val": val} if val is not None else {})}
    tf.random.set_seed(config.seed)
    out.mkdir(parents=True, exist_ok=True)

    counts = class_counts(labeled, spec, config)
    counts_path = out / "class_counts.csv"
    write_atomically(counts_path, lambda tmp: safe_cells(counts).to_csv(tmp, index_label="class"))
    _print_counts(counts, spec)

    batch_path = competition.task.show_batch(train, spec, config, out, images, where)
    log.info("inspect: wrote %s and %s", batch_path, counts_path)

    if config.data.skip_bad_records:
        for line in reader_for(spec).skipped_report(root, spec, config):
            log.warning("inspect: %s", line)
    return {"batch": batch_path, "counts": counts_path}


# ----------------------------------------------------------------------------- counts


def class_counts(labeled: dict, spec: CompetitionSpec, config: Config) -> pd.DataFrame:
    """Examples per class in each labelled split (labels read, images not decoded), plus names."""
    table = pd.DataFrame({"name": spec.classes})
    for split, examples in labeled.items():
        table[split] = examples.class_counts(config)
    return table


def _print_counts(counts: pd.DataFrame, spec: CompetitionSpec) -> None:
    splits = [c for c in counts.columns if c != "name"]
    lines = [f"{'split':<8}{'examples':>9}{'classes':>9}{'min':>6}{'median':>8}{'max':>6}"]
    for split in splits:
        column = counts[split]
        lines.append(
            f"{split:<8}{column.sum():>9}{(column > 0).sum():>9}{column.min():>6}"
            f"{column.median():>8.0f}{column.max():>6}"
        )
    rarest = counts.nsmallest(5, "train")
    lines.append(
        "rarest in train: "
        + ", ".join(f"{text(row['name'], EACH)} ({row['train']})" for _, row in rarest.iterrows())
    )
    for split in splits:
        absent = counts.index[counts[split] == 0].tolist()
        if absent:
            lines.append(f"warning: {len(absent)} classes have no {split} images: {absent[:10]}")
    print("\n".join(lines))
