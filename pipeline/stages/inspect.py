"""Inspect stage: a PNG grid of one augmented training batch and what the labels hold in every split.

Look before training: the grid shows what the model will see under the recipe's
augmentation (whether it runs on the host or the device), titled with class names (the
two largest shares for CutMix/MixUp soft labels); the table shows the class balance, or of
numbers each target column's statistics (the task's target part says which).
Writes `batch.png` and `class_counts.csv` (of numbers, `number_summary.csv`) to --out.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pipeline.core import device
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.foreign import safe_cells
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
    texts: `batch.csv`) and the target part's table of the labels; return their paths.

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

    summary = competition.task.labels_summary(labeled, spec, config)  # class counts, or numbers'
    counts_path = out / summary.file
    table = safe_cells(summary.table)
    write_atomically(
        counts_path,
        lambda tmp: table.to_csv(tmp, index=summary.index_label is not None, index_label=summary.index_label),
    )
    print("\n".join(summary.lines))

    batch_path = competition.task.show_batch(train, spec, config, out, images, where)
    log.info("inspect: wrote %s and %s", batch_path, counts_path)

    if config.data.skip_bad_records:
        for line in reader_for(spec).skipped_report(root, spec, config):
            log.warning("inspect: %s", line)
    return {"batch": batch_path, "counts": counts_path}
