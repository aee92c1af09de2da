"""Benchmark transfer on the CPU: the pretrained recipe against the cnn, the feature cache, and
EfficientNet-Lite0's speed on each backend.

  recipes   `python -m pipeline train` with the cpu recipe (Lite0 on cached views) and the cnn
            recipe (from scratch) on the data dir (the embedded flowers by default): val
            macro-F1, training seconds, the train command's wall seconds (caching included)
  cache     the cpu recipe with and without its feature cache (train.feature_cache=false: the
            same layers fine-tuned on images, the whole network run every step): the train
            command's wall seconds, val macro-F1, and the speed-up
  speed     Lite0 at 192 px on random pixels, in a fresh process per backend: predict images/s
            (batch 64, after a warm-up) and training images/s with every layer training (batch
            16, the second of two short epochs)

Usage: python benchmarks/bench_transfer.py [--data-dir data] [--only recipes] [--backends tensorflow jax]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure, train  # noqa: E402

PARTS = ("recipes", "cache", "speed")

SPEED = """
import json, time
import numpy as np
import keras
from pipeline import networks
from pipeline.networks import registry
net = registry.build_classifier("efficientnet-lite0", 192, 104, weights="imagenet", input_dtype="float32")
net = networks.with_output(net, "softmax")  # the image task's output on the headless network
pixels = np.random.default_rng(0).uniform(0, 255, (256, 192, 192, 3)).astype("float32")
net.predict(pixels[:64], batch_size=64, verbose=0)
started = time.perf_counter()
net.predict(pixels, batch_size=64, verbose=0)
predict = len(pixels) / (time.perf_counter() - started)
labels = keras.utils.to_categorical(np.arange(len(pixels)) % 104, 104)
net.compile(keras.optimizers.Adam(1e-4), "categorical_crossentropy")
steps = {steps}
net.fit(pixels, labels, batch_size=16, steps_per_epoch=2, epochs=1, verbose=0)
started = time.perf_counter()
net.fit(pixels, labels, batch_size=16, steps_per_epoch=steps, epochs=1, verbose=0)
trained = 16 * steps / (time.perf_counter() - started)
print(json.dumps({{"predict": predict, "train": trained}}))
"""


def speed(backend: str) -> dict:
    """Lite0's predict and training images/s on one backend, in a fresh process."""
    env = {**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    code = textwrap.dedent(SPEED.format(steps=8 if backend == "tensorflow" else 4))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"bench_transfer: the speed run on {backend} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts")
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"], choices=["tensorflow", "jax"])
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    settings = {"data_dir": str(args.data_dir), "machine": machine()}
    figures = []

    if "recipes" in parts:
        for recipe in ("cpu", "cnn"):
            metrics, _, wall = train(args.data_dir, recipe, [])
            print(
                f"{recipe:<4} {metrics['backbone']:<20} val macro-F1 {metrics['val_macro_f1']:.4f}, training "
                f"{metrics['train_seconds']:.0f} s, train command {wall:.0f} s",
                flush=True,
            )
            s = {**settings, "recipe": recipe, "backbone": metrics["backbone"], "epochs": metrics["epochs"]}
            figures += [
                figure(f"transfer_{recipe}_val_macro_f1", round(metrics["val_macro_f1"], 4), "macro-F1", s),
                figure(f"transfer_{recipe}_train_seconds", round(metrics["train_seconds"], 1), "s", s),
                figure(f"transfer_{recipe}_train_command_seconds", round(wall, 1), "s", s),
            ]

    if "cache" in parts:
        walls, scores = {}, {}
        for name, extra in (("cached", []), ("images", ["train.feature_cache=false"])):
            metrics, _, walls[name] = train(args.data_dir, "cpu", extra)
            scores[name] = metrics["val_macro_f1"]
            print(
                f"cpu recipe, {name:<7}: train command {walls[name]:.0f} s"
                f" (training {metrics['train_seconds']:.0f} s)"
                f", val macro-F1 {scores[name]:.4f}",
                flush=True,
            )
        ratio = walls["images"] / walls["cached"]
        print(f"feature cache speed-up: x{ratio:.1f}")
        s = {**settings, "recipe": "cpu", "walls": walls, "val_macro_f1": scores}
        figures.append(figure("transfer_feature_cache_speedup", round(ratio, 2), "ratio", s))

    if "speed" in parts:
        for backend in args.backends:
            measured = speed(backend)
            print(
                f"lite0 192 px on {backend}: predict {measured['predict']:.0f} img/s, "
                f"training (every layer) {measured['train']:.1f} img/s",
                flush=True,
            )
            s = {**settings, "backend": backend, "size": 192}
            figures += [
                figure(
                    f"lite0_{backend}_predict_images_per_second", round(measured["predict"], 1), "img/s", s
                ),
                figure(f"lite0_{backend}_train_images_per_second", round(measured["train"], 1), "img/s", s),
            ]
    record(figures)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
