"""TensorFlow's oneDNN kernels on this CPU: the CPU recipe's network trained with them off, on,
and on in mixed bfloat16 (oneDNN's bf16 kernels need avx512_bf16 or AMX to be fast).

TensorFlow turns oneDNN on by itself on CPUs with avx512_bf16, avx512_vnni or AMX, and then logs
so at import in a way TF_CPP_MIN_LOG_LEVEL cannot hide (pipeline/core/native_log.py filters it).
Turning oneDNN off would hide the lines too; this measures what that would cost. Each setting
trains the `cnn` backbone at 192 px, batch 32, on in-memory random pixels (no input pipeline),
in a fresh process (the variable is read once, at import), alternated and repeated because
this machine's speed swings within minutes.

Usage: python benchmarks/bench_onednn.py [--repeats 2] [--steps 60]. Writes benchmarks/latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402

# One run, in its own process: warm up, then time `steps` training steps.
TRAIN = """
import json, sys, time
import numpy as np
import tensorflow as tf
import keras
keras.mixed_precision.set_global_policy("{precision}")
from pipeline.networks import registry
from pipeline.networks.backbone import build_backbone
steps, size, batch = {steps}, 192, 32
backbone = build_backbone(registry.get_backbone("cnn"), size, None)
inputs = keras.Input((size, size, 3))
net = keras.Model(inputs, keras.layers.Dense(104, dtype="float32")(backbone(inputs)))
net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
pixels = np.random.default_rng(0).uniform(0, 255, (batch * 20, size, size, 3)).astype("float32")
labels = np.random.default_rng(1).integers(0, 104, batch * 20)
data = tf.data.Dataset.from_tensor_slices((pixels, labels)).batch(batch).cache().repeat()
net.fit(data, steps_per_epoch=10, epochs=1, verbose=0)
start = time.perf_counter()
net.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
print(json.dumps({{"images_per_second": steps * batch / (time.perf_counter() - start)}}))
"""


def cpu_flags() -> list[str]:
    from pipeline.core.machine import cpu_info

    flags = cpu_info()[1]
    return [flag for flag in ("avx512_bf16", "avx512_vnni", "amx_bf16", "avx_vnni") if flag in flags]


# (name, TF_ENABLE_ONEDNN_OPTS, Keras dtype policy)
SETTINGS = (
    ("onednn_off", "0", "float32"),
    ("onednn_on", "1", "float32"),
    ("onednn_on_bfloat16", "1", "mixed_bfloat16"),
)


def one_run(onednn: str, precision: str, steps: int) -> float:
    env = {
        **os.environ,
        "TF_ENABLE_ONEDNN_OPTS": onednn,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", TRAIN.format(steps=steps, precision=precision)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["images_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of each setting, alternated (default: 2)"
    )
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run (default: 60)")
    args = parser.parse_args()
    speeds: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
    for _ in range(args.repeats):
        for name, onednn, precision in SETTINGS:
            speeds[name].append(one_run(onednn, precision, args.steps))
            print(f"{name}: {speeds[name][-1]:.0f} img/s", flush=True)
    settings = {"machine": machine(), "cpu_flags": cpu_flags(), "steps": args.steps, "runs": speeds}
    record(
        [
            figure(f"{name}_img_per_s", min(runs), "img/s (slowest run)", settings)
            for name, runs in speeds.items()
        ]
    )
    for name, runs in speeds.items():
        print(f"{name}: {min(runs):.0f}-{max(runs):.0f} img/s ({settings['cpu_flags']})")


if __name__ == "__main__":
    main()
