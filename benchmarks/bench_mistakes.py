"""What evaluate's mistakes and the steps' progress cost the main job (pipeline/tasks/mistakes.py,
pipeline/core/progress.py).

1. Progress: one update (`advance`) as the feature cache's pass, prediction and each epoch make
   it once a batch, timed over many calls for a log (lines) and disabled; times the main job's
   updates (its batches, counted from the data and the CPU recipe).
2. Mistakes: `mistakes.write` over the data dir's val split as the CPU recipe reads it (ids and
   labels from the split; predictions drawn so that about one row in twenty is wrong, as the
   main job's 0.96), into a temporary folder: the val shards scanned for the ids, the images
   decoded, the 6 x 6 grid drawn and saved.
3. Figures: the 104-class confusion matrix evaluate draws (`plot_confusion`, the flowers' classes,
   the val split's size, one row in ten wrong) and the learning curves train draws (12 epochs),
   CPU seconds a figure, in this process.

Usage: python benchmarks/bench_mistakes.py [--data-dir data-flowers] [--repeats 3]
(`make bench-mistakes`; the data dir is the main job's: `make fetch` draws it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def progress_seconds(calls: int = 200_000) -> dict:
    """Seconds per `advance` of a step logged by lines (nothing written: the step is short), and of
    a disabled one."""
    from pipeline.core.progress import Progress

    found = {}
    for name, enabled in (("lines", True), ("disabled", False)):
        step = Progress("bench", calls, "img", enabled=enabled, report=lambda line: None)
        started = time.perf_counter()
        for _ in range(calls):
            step.advance()
        found[name] = (time.perf_counter() - started) / calls
        step.close()
    return found


def main_job_updates(config, train_images: int, val_images: int, test_images: int) -> int:
    """The progress updates the main job makes: a batch each in the cache pass (train's views, val)
    and the test pass, and a step each of every epoch."""
    from pipeline.modeling import feature_pass, policy

    batch = feature_pass.EXTRACT_BATCH
    views = config.train.feature_views or 1
    passes = -(-train_images * views // batch) + -(-val_images // batch) + -(-test_images // batch)
    steps = policy.steps_per_epoch(config.train, train_images * views, config.data.batch_size)
    return passes + steps * config.train.epochs


def mistakes_seconds(data_dir: Path, repeats: int) -> tuple[list[float], dict]:
    from competition import load_spec
    from pipeline.data import splits
    from pipeline.data.manifest import locate_data
    from pipeline.modeling.inference import Predictions
    from pipeline.tasks import mistakes
    from pipeline.tasks.recipe_config import load_config

    config = load_config("cpu")
    spec = load_spec(config.competition)
    val = splits.train_and_val(locate_data(data_dir), spec, config)[1]
    batches = val.eval_dataset(config, 256, labeled=True, with_ids=True).map(lambda x, y, i: (y, i))
    labels, ids = (np.concatenate(c) for c in zip(*batches.as_numpy_iterator(), strict=True))
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(spec.num_classes) * 0.1, len(labels)).astype(np.float32)
    right = rng.random(len(labels)) > 0.05
    probabilities[right, labels[right]] += 2.0
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    predictions = Predictions(ids.astype(str), probabilities, labels)
    seconds, entry = [], {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            entry = mistakes.write(Path(folder), data_dir, config, spec, predictions)
            seconds.append(time.perf_counter() - started)
    return seconds, entry


def figure_seconds(repeats: int) -> dict[str, list[float]]:
    """CPU seconds to draw and save the flowers' confusion matrix, a 12-epoch run's learning curves
    and TensorBoard's per-class bars of 104 classes, once for each repeat (after one untimed call
    each that loads matplotlib and its fonts)."""
    import pandas as pd

    from competition import load_spec
    from pipeline.runs.tensorboard import per_class_png
    from pipeline.stages.train import plot_curves
    from pipeline.tasks.recipe_config import load_config
    from pipeline.tasks.targets.single_label_report import plot_confusion

    classes = load_spec(load_config("cpu").competition).classes
    rng = np.random.default_rng(0)
    labels = rng.integers(0, len(classes), 3712)
    predicted = np.where(rng.random(len(labels)) < 0.9, labels, rng.integers(0, len(classes), len(labels)))
    epochs = np.arange(1, 13)
    history = pd.DataFrame(
        {"epoch": epochs, "loss": 2 / epochs, "val_loss": 2.2 / epochs, "accuracy": 1 - 0.8 / epochs}
        | {"val_accuracy": 1 - 0.9 / epochs, "val_macro_f1": 1 - 0.95 / epochs}
    )
    scores = {name: rng.random(len(classes)) for name in ("precision", "recall", "f1")}
    per_class = pd.DataFrame({"class": classes, **scores})
    draws = {
        "confusion": lambda path: plot_confusion(labels, predicted, tuple(classes), path),
        "curves": lambda path: plot_curves(history, path),
        "per_class": lambda path: path.write_bytes(per_class_png(per_class)),
    }
    seconds: dict[str, list[float]] = {name: [] for name in draws}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats + 1):
            for name, draw in draws.items():  # alternated: the machine's speed drifts
                started = time.process_time()
                draw(Path(folder) / f"{name}.png")
                seconds[name].append(time.process_time() - started)
    return {name: found[1:] for name, found in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO / "data-flowers")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from pipeline.core.git import git_commit
    from pipeline.data.manifest import read_manifest
    from pipeline.tasks.recipe_config import load_config

    config = load_config("cpu")
    sizes = (read_manifest(args.data_dir) or {}).get("sizes", {}).get(str(config.data.image_size), {})
    counts = [sizes.get(split, {}).get("images", 0) for split in ("train", "val", "test")]
    per_call = progress_seconds()
    updates = main_job_updates(config, *counts)
    seconds, entry = mistakes_seconds(args.data_dir, args.repeats)
    figures = figure_seconds(args.repeats)
    print(
        json.dumps(
            {
                "commit": git_commit(),
                "progress_us_per_update": {k: round(v * 1e6, 3) for k, v in per_call.items()},
                "main_job_updates": updates,
                "main_job_progress_ms": round(updates * per_call["lines"] * 1e3, 2),
                "mistakes_seconds": [round(s, 2) for s in seconds],
                "mistakes_median_seconds": round(statistics.median(seconds), 2),
                "mistakes": entry,
                **{f"{name}_cpu_seconds": [round(s, 2) for s in found] for name, found in figures.items()},
                **{f"{k}_median_cpu_seconds": round(statistics.median(f), 2) for k, f in figures.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
