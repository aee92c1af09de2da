"""What the checks on untrusted input and the score's interval cost, against the work they guard.

- the TFRecord header scan (`records.check_record_lengths`) over a fetched data dir's shards,
  against TensorFlow counting the same shards (what fetch's verification already did);
- the streaming CSV pass (`csv_bounds.check_csv`) before pandas reads a label CSV and a text table
  of Kaggle's sizes (drawn here: cassava's 21,397 label rows, 25,000 reviews of ~1.3 kB), against
  pandas reading them;
- the 95% bootstrap interval (`Metric.interval`, 200 draws) of macro-F1 over 2,797 rows of 104
  classes (the embedded flowers' val split), against scoring them once.

Each figure is the minimum of `--repeats` timings, in seconds. Usage:
    python benchmarks/bench_bounds.py [--data-dir data-flowers] [--repeats 5]
"""

from __future__ import annotations

import argparse
import glob
import sys
import tempfile
import timeit
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def best(fn, repeats: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def shards(data_dir: Path, repeats: int) -> None:
    from pipeline.data import records
    from pipeline.data.manifest import locate_data

    files = sorted(glob.glob(f"{locate_data(data_dir)}/tfrecords-jpeg-*/*/*.tfrec"))
    if not files:
        print(f"shards: none under {data_dir} (make fetch first)")
        return
    scan = best(lambda: [records.check_record_lengths(f) for f in files], repeats)
    count = best(lambda: [records.count_records(f) for f in files], 1)  # the scan and TensorFlow's read
    counted = count - scan
    print(f"shards: {len(files)} files, header scan {scan:.3f} s; TensorFlow counting them {counted:.3f} s")


def tables(repeats: int) -> None:
    import pandas as pd

    from pipeline.core.csv_bounds import LABEL_CSV, TEXT_TABLE, check_csv

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        labels = Path(folder, "train.csv")
        labels.write_text("image_id,label\n" + "".join(f"{i}.jpg,{i % 5}\n" for i in range(21_397)))
        reviews = Path(folder, "reviews.csv")
        words = np.array(["film", "good", "bad", "plot", "actor", "scene", "story", "long", "great", "dull"])
        rows = (f'{i},"{" ".join(rng.choice(words, 220))}",{i % 2}\n' for i in range(25_000))
        reviews.write_text("id,review,sentiment\n" + "".join(rows))
        for path, bounds, rows_declared in ((labels, LABEL_CSV, 21_397), (reviews, TEXT_TABLE, 25_000)):
            checked = best(lambda p=path, b=bounds, n=rows_declared: check_csv(p, b.declaring(n)), repeats)
            read = best(lambda p=path: pd.read_csv(p, dtype=str, keep_default_na=False), repeats)
            size = path.stat().st_size / 2**20
            print(f"csv: {path.name} ({size:.1f} MiB) pass {checked:.3f} s; pandas reading it {read:.3f} s")


def interval(repeats: int) -> None:
    from competition.metric import get_metric

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 104, 2797)
    probabilities = rng.random((2797, 104))
    probabilities[np.arange(2797), labels] += rng.random(2797) < 0.95  # about 0.95 right
    metric = get_metric("macro_f1")
    once = best(lambda: metric.score(labels, probabilities), repeats)
    drawn = best(lambda: metric.interval(labels, probabilities), repeats)
    print(f"interval: 200 draws {drawn:.3f} s; the score once {once:.4f} s")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--data-dir", type=Path, default=REPO / "data-flowers")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    shards(args.data_dir, args.repeats)
    tables(args.repeats)
    interval(args.repeats)


if __name__ == "__main__":
    main()
