"""Benchmark Pawpularity's 12 photo flags: its CPU recipe reading the photo and its flags
(`input = "image_table"`, the shipped file) against the photo alone, on the same embedded data.

The embedded dataset is fetched once; the photo-alone file is the shipped one with `input =
"image"` and the flags left undeclared, read from a temporary folder. Each reading trains the CPU
recipe (`python -m pipeline train --recipe cpu`, a fresh process) `--repeat` times, the two
alternating (this machine's speed swings within minutes). Reported per run: val RMSE, the train
command's wall time and training seconds.

Usage: python benchmarks/bench_columns.py [--repeat 1]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_competitions import fetch  # noqa: E402
from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure, spread, train  # noqa: E402

NAME = "petfinder-pawpularity"


def photo_alone(folder: Path) -> Path:
    """The shipped competition file reading the photo alone: `input = "image"`, no flags declared."""
    from competition.spec import competition_file

    text = competition_file(NAME).read_text()
    start = text.index("feature_columns = [")
    text = text[:start] + text[text.index("]", start) + 2 :]  # the list and its line's end
    text = re.sub(r"(?m)^table = .*\n", "", text.replace('input = "image_table"', 'input = "image"'))
    path = folder / NAME / "competition.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per reading, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        print(f"{NAME}: embedded dataset fetched in {fetch(NAME, data_dir):.1f} s", flush=True)
        readings = {"photo and flags": NAME, "photo alone": str(photo_alone(Path(tmp)))}
        runs: dict[str, list[dict]] = {reading: [] for reading in readings}
        for round_ in range(args.repeat):
            for reading, competition in readings.items():
                metrics, _, wall = train(data_dir, "cpu", [f"competition={competition}"], strategy="cpu")
                runs[reading].append(
                    {"rmse": metrics["val_rmse"], "wall": wall, "train": metrics["train_seconds"]}
                )
                print(
                    f"  round {round_ + 1} {reading:<16} val RMSE {metrics['val_rmse']:.4f}, training "
                    f"{metrics['train_seconds']:.0f} s, wall {wall:.0f} s",
                    flush=True,
                )
    figures = []
    for reading, found in runs.items():
        rmse, wall = [r["rmse"] for r in found], [r["wall"] for r in found]
        print(f"{reading:<16} val RMSE {spread(rmse)}, wall {spread(wall)} s over {len(found)} runs")
        settings = {
            "competition": NAME,
            "recipe": "cpu",
            "reading": reading,
            "runs": len(found),
            "machine": machine(),
        }
        key = reading.replace(" ", "_")
        figures += [
            figure(f"columns_{key}_val_rmse", min(rmse), "RMSE", settings),
            figure(f"columns_{key}_wall_seconds", min(wall), "s", settings),
        ]
    record(figures)


if __name__ == "__main__":
    main()
