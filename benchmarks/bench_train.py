"""Benchmark the train stage: the CPU recipe end to end, and backbone training speed.

  cpu-recipe          `python -m pipeline train --recipe cpu` on the data dir: wall time of the
                      whole command, training seconds, images/s, val macro-F1 (best, and after
                      the first epoch: the embedded dataset must not be solved in one epoch)
  efficientnet-b0     training images/s at 192 px, batch 16, random init (speed does not depend
                      on the weights), measured on the second epoch (the first one compiles)
  gpu-speedup         only where a GPU is present: EfficientNetB0 at 224 px with petals'
                      accelerator defaults vs float32, no XLA, steps_per_execution=1, on each
                      backend that sees the GPU
  backends            the CPU recipe on TensorFlow and on JAX, interleaved and repeated
                      (--repeat, default 2): this machine's speed swings within minutes, so
                      one run of each would compare two moments, not two backends. Not part of
                      the default set (about half an hour here): `make bench-backends`

Usage: python benchmarks/bench_train.py [--data-dir data] [--only cpu-recipe] [--repeat 2]
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

PARTS = ("cpu-recipe", "efficientnet-b0", "gpu-speedup", "backends")
DEFAULT_PARTS = PARTS[:3]


def train(
    data_dir: Path, recipe: str, overrides: list[str], strategy: str = "auto", backend: str = "auto"
) -> tuple[dict, list[dict], float]:
    """Run the train stage in a fresh process; its metrics, history rows and wall seconds."""
    with tempfile.TemporaryDirectory() as runs:
        command = [sys.executable, "-m", "pipeline", "--quiet", "train", "--data-dir", str(data_dir)]
        command += ["--runs-dir", runs, "--run", "bench", "--recipe", recipe, "--strategy", strategy]
        command += ["--backend", backend]
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


def jax_sees_gpu() -> bool:
    """Whether JAX (in a fresh process: it must not start here) has a GPU backend."""
    code = "import jax, sys; sys.exit(0 if jax.default_backend() == 'gpu' else 1)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, check=False).returncode == 0


def spread(values: list[float]) -> str:
    return f"{min(values):.4g}-{max(values):.4g}" if len(values) > 1 else f"{values[0]:.4g}"


def compare_backends(data_dir: Path, repeat: int, epochs: int, settings: dict) -> list[dict]:
    """The CPU recipe on each backend, alternating, `repeat` times each: img/s, F1, seconds."""
    results: dict[str, list[dict]] = {"tensorflow": [], "jax": []}
    overrides = [f"train.epochs={epochs}"] if epochs else []
    settings = {**settings, "epochs": epochs or "recipe"}
    for round_ in range(repeat):
        for backend in results:
            metrics, _, wall = train(data_dir, "cpu", overrides, strategy="cpu", backend=backend)
            results[backend].append({**metrics, "wall": wall})
            print(
                f"  round {round_ + 1} {backend:<10} {metrics['images_per_second']:6.0f} img/s, "
                f"val macro-F1 {metrics['val_macro_f1']:.4f}, training {metrics['train_seconds']:.0f} s, "
                f"wall {wall:.0f} s",
                flush=True,
            )
    figures = []
    for backend, runs in results.items():
        speeds = [r["images_per_second"] for r in runs]
        scores = [r["val_macro_f1"] for r in runs]
        seconds = [r["train_seconds"] for r in runs]
        print(
            f"{backend:<10} img/s {spread(speeds)}, val macro-F1 {spread(scores)}, "
            f"training {spread(seconds)} s over {len(runs)} runs"
        )
        s = {**settings, "recipe": "cpu", "backend": backend, "runs": len(runs), "interleaved": True}
        figures += [
            figure(
                f"train_cpu_recipe_{backend}_images_per_second", [round(x, 1) for x in speeds], "img/s", s
            ),
            figure(f"train_cpu_recipe_{backend}_val_macro_f1", [round(x, 4) for x in scores], "macro-F1", s),
            figure(f"train_cpu_recipe_{backend}_train_seconds", [round(x, 1) for x in seconds], "s", s),
        ]
    ratios = [j["images_per_second"] / t["images_per_second"] for t, j in zip(*results.values(), strict=True)]
    print(f"jax / tensorflow img/s, run by run: {', '.join(f'{r:.2f}' for r in ratios)}")
    figures.append(
        figure("train_cpu_recipe_jax_over_tensorflow_speed", [round(r, 3) for r in ratios], "ratio", settings)
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts")
    parser.add_argument("--repeat", type=int, default=2, help="backends: runs of each backend")
    parser.add_argument("--epochs", type=int, default=0, help="backends: epochs (default: the recipe's)")
    args = parser.parse_args()
    parts = args.only or list(DEFAULT_PARTS)
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
        backends = [b for b, seen in (("tensorflow", has_gpu()), ("jax", jax_sees_gpu())) if seen]
        if not backends:
            print("gpu-speedup: no GPU here; not measured")
        for backend in backends:
            base = ["model.backbone=keras-efficientnet-b0", "model.weights=none", "data.image_size=224",
                    "data.batch_size=64", "train.epochs=2", "train.steps_per_epoch=30"]  # fmt: skip
            plain = ["train.precision=float32", "train.jit_compile=off", "train.steps_per_execution=1"]
            speeds = {}
            for name, extra in (("defaults", []), ("plain", plain)):
                _, history, _ = train(args.data_dir, "default", base + extra, strategy="gpu", backend=backend)
                speeds[name] = history[-1]["images_per_second"]
            ratio = speeds["defaults"] / speeds["plain"]
            print(
                f"GPU EfficientNetB0 224 px on {backend}: defaults {speeds['defaults']:.0f} img/s, "
                f"plain {speeds['plain']:.0f} img/s, x{ratio:.2f}"
            )
            s = {**settings, "size": 224, "batch": 64, "backend": backend}
            figures += [
                figure(
                    f"train_gpu_b0_{backend}_defaults_images_per_second",
                    round(speeds["defaults"], 1),
                    "img/s",
                    s,
                ),
                figure(
                    f"train_gpu_b0_{backend}_plain_images_per_second", round(speeds["plain"], 1), "img/s", s
                ),
                figure(f"train_gpu_b0_{backend}_speedup", round(ratio, 2), "ratio", s),
            ]

    if "backends" in parts:
        figures += compare_backends(args.data_dir, args.repeat, args.epochs, settings)
    record(figures)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
