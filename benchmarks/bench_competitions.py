"""Benchmark the competitions beyond flowers: each one's CPU recipe on its embedded dataset.

For each competition (dogs-vs-cats, imdb, watson): its embedded dataset is fetched once into a
temporary folder, then `python -m pipeline train --recipe cpu` runs in a fresh process on each
backend asked for, the backends alternating (--repeat rounds: this machine's speed swings within
minutes). Reported per run: the val score in the competition's own metric, the train command's
wall time, training seconds, and the steady training speed in examples (sequences for texts,
images for photos) per second: the median over the epochs after the first, which compiles.

Usage: python benchmarks/bench_competitions.py [--competitions imdb watson] [--backends tensorflow jax]
       [--repeat 2]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure, spread, train  # noqa: E402

COMPETITIONS = ("dogs-vs-cats", "imdb", "watson")


def fetch(name: str, data_dir: Path) -> float:
    from competition import load_spec
    from pipeline.stages.fetch import FetchOptions, fetch

    started = time.perf_counter()
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, progress=False), load_spec(name))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--competitions", nargs="+", default=list(COMPETITIONS), choices=COMPETITIONS)
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"], choices=["tensorflow", "jax"])
    parser.add_argument("--repeat", type=int, default=2, help="runs per backend, interleaved")
    args = parser.parse_args()
    from competition import load_spec

    figures = []
    for name in args.competitions:
        spec = load_spec(name)
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp) / "data"
            fetched = fetch(name, data_dir)
            print(f"{name}: embedded dataset fetched in {fetched:.1f} s", flush=True)
            runs: dict[str, list[dict]] = {backend: [] for backend in args.backends}
            for round_ in range(args.repeat):
                for backend in args.backends:
                    metrics, history, wall = train(
                        data_dir, "cpu", [f"competition={name}"], strategy="cpu", backend=backend
                    )
                    speed = statistics.median(row["images_per_second"] for row in history[1:] or history)
                    runs[backend].append(
                        {
                            "score": metrics[spec.score_key],
                            "wall": wall,
                            "train": metrics["train_seconds"],
                            "speed": speed,
                            "backbone": metrics["backbone"],
                        }
                    )
                    print(
                        f"  round {round_ + 1} {backend:<10} val {spec.metric.title} "
                        f"{metrics[spec.score_key]:.4f}, {speed:.0f} examples/s, training "
                        f"{metrics['train_seconds']:.0f} s, wall {wall:.0f} s",
                        flush=True,
                    )
        for backend, done in runs.items():
            scores, walls = [r["score"] for r in done], [r["wall"] for r in done]
            speeds, trains = [r["speed"] for r in done], [r["train"] for r in done]
            print(
                f"{name} {backend}: val {spec.metric.title} {spread(scores)}, {spread(speeds)} examples/s, "
                f"training {spread(trains)} s, wall {spread(walls)} s over {len(done)} runs"
            )
            settings = {"machine": machine(), "competition": name, "recipe": "cpu", "backend": backend,
                        "backbone": done[0]["backbone"], "runs": len(done), "interleaved": True}  # fmt: skip
            stem = f"competition_{name}_cpu_recipe_{backend}"
            figures += [
                figure(
                    f"{stem}_val_{spec.metric.name}",
                    [round(x, 4) for x in scores],
                    spec.metric.title,
                    settings,
                ),
                figure(f"{stem}_examples_per_second", [round(x, 1) for x in speeds], "examples/s", settings),
                figure(f"{stem}_train_seconds", [round(x, 1) for x in trains], "s", settings),
                figure(f"{stem}_wall_seconds", [round(x, 1) for x in walls], "s", settings),
            ]
    record(figures)


if __name__ == "__main__":
    main()
