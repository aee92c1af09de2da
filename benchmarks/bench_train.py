"""Benchmark the train stage: the CPU recipe end to end, and backbone training speed.

  cpu-recipe          `python -m pipeline train --recipe cpu` on the data dir: wall time of the
                      whole command, training seconds, images/s, val macro-F1 (best, and after
                      the first epoch: the embedded dataset must not be solved in one epoch)
  efficientnet-b0     training images/s at 192 px, batch 16, random init (speed does not depend
                      on the weights), measured on the second epoch (the first one compiles)
  gpu-speedup         only where a GPU is present: EfficientNetB0 at 224 px with petals'
                      accelerator defaults vs float32, no XLA, steps_per_execution=1

Usage: python benchmarks/bench_train.py [--data-dir data] [--only cpu-recipe]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402

PARTS = ("cpu-recipe", "efficientnet-b0", "gpu-speedup")


def train(
    data_dir: Path, recipe: str, overrides: list[str], strategy: str = "auto"
) -> tuple[dict, list[dict], float]:
    """Run the train stage in a fresh process; its metrics, history rows and wall seconds."""
    with tempfile.TemporaryDirectory() as runs:
        command = [sys.executable, "-m", "pipeline", "--quiet", "train", "--data-dir", str(data_dir)]
        command += ["--runs-dir", runs, "--run", "bench", "--recipe", recipe, "--strategy", strategy]
        for override in overrides:
            command += ["--set", override]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"bench_train: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
        import pandas as pd

        from pipeline.core.rundir import RunDir

        run = RunDir(Path(runs) / "bench")
        metrics = run.metrics()
        history = pd.read_csv(run.history_file).to_dict("records")
    return metrics, history, wall


def figure(name: str, value: float, unit: str, settings: dict) -> dict:
    return {"name": name, "value": value, "unit": unit, "settings": settings}


def has_gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts")
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    settings = {"data_dir": str(args.data_dir), "machine": machine()}
    figures = []

    if "cpu-recipe" in parts:
        metrics, history, wall = train(args.data_dir, "cpu", [])
        s = {**settings, "recipe": "cpu", "epochs": metrics["epochs"], "image_size": metrics["image_size"]}
        print(
            f"cpu recipe: wall {wall:.0f} s, training {metrics['train_seconds']:.0f} s, "
            f"{metrics['images_per_second']:.0f} img/s, val macro-F1 {metrics['val_macro_f1']:.4f} "
            f"(epoch {metrics['best_epoch']}), after epoch 1 {metrics['first_epoch_val_macro_f1']:.4f}"
        )
        for row in history:
            print(
                f"  epoch {row['epoch']:>3}  {row['seconds']:6.1f} s  val macro-F1 {row['val_macro_f1']:.4f}"
            )
        figures += [
            figure("train_cpu_recipe_wall_seconds", round(wall, 1), "s", s),
            figure("train_cpu_recipe_train_seconds", round(metrics["train_seconds"], 1), "s", s),
            figure("train_cpu_recipe_images_per_second", round(metrics["images_per_second"], 1), "img/s", s),
            figure("train_cpu_recipe_val_macro_f1", round(metrics["val_macro_f1"], 4), "macro-F1", s),
            figure(
                "train_cpu_recipe_first_epoch_val_macro_f1",
                round(metrics["first_epoch_val_macro_f1"], 4),
                "macro-F1",
                s,
            ),
        ]

    if "efficientnet-b0" in parts:
        overrides = [
            "model.backbone=efficientnet-b0",
            "model.weights=none",
            "data.image_size=192",
            "data.input_size=0",
            "data.batch_size=16",
            "train.epochs=2",
            "train.steps_per_epoch=15",
        ]
        _, history, _ = train(args.data_dir, "default", overrides, strategy="cpu")
        speed = history[-1]["images_per_second"]
        print(
            f"efficientnet-b0 on the CPU, 192 px, batch 16: {speed:.1f} img/s "
            f"(first epoch, compiling: {history[0]['seconds']:.0f} s)"
        )
        s = {**settings, "size": 192, "batch": 16, "device": "CPU"}
        figures.append(
            {
                "name": "train_efficientnet_b0_cpu_images_per_second",
                "value": round(speed, 1),
                "unit": "img/s",
                "settings": s,
            }
        )

    if "gpu-speedup" in parts:
        if not has_gpu():
            print("gpu-speedup: no GPU here; not measured")
        else:
            base = ["model.backbone=keras-efficientnet-b0", "model.weights=none", "data.image_size=224",
                    "data.batch_size=64", "train.epochs=2", "train.steps_per_epoch=30"]  # fmt: skip
            plain = ["train.precision=float32", "train.jit_compile=off", "train.steps_per_execution=1"]
            speeds = {}
            for name, extra in (("defaults", []), ("plain", plain)):
                _, history, _ = train(args.data_dir, "default", base + extra, strategy="gpu")
                speeds[name] = history[-1]["images_per_second"]
            ratio = speeds["defaults"] / speeds["plain"]
            print(
                f"GPU EfficientNetB0 224 px: defaults {speeds['defaults']:.0f} img/s, "
                f"plain {speeds['plain']:.0f} img/s, x{ratio:.2f}"
            )
            s = {**settings, "size": 224, "batch": 64}
            figures += [
                figure("train_gpu_b0_defaults_images_per_second", round(speeds["defaults"], 1), "img/s", s),
                figure("train_gpu_b0_plain_images_per_second", round(speeds["plain"], 1), "img/s", s),
                figure("train_gpu_b0_speedup", round(ratio, 2), "ratio", s),
            ]
    record(figures)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
