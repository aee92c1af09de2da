"""Forward examples/s on this CPU of each image family's smallest main preset, at random weights.

Each architecture is built here from the published shape of that preset (the preset's own
config.json is on Kaggle, not here: no download), at its native size, headless and pooled as petals
pools it; then one warm-up batch and `--batches` timed batches of `--batch` images
(`predict_on_batch`). What it measures: the ceiling of a CPU run's forward pass (a feature-cache
probe, or predicting), not training. Families whose smallest preset is too large to time in seconds
here are listed, not timed.

Usage: python benchmarks/bench_backbones.py [--batch 8] [--batches 2] [--only NAME ...]
Writes benchmarks/backbones.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

IMAGE = (224, 224, 3)
_VIT_S = {"patch_size": 14, "num_layers": 12, "hidden_dim": 384, "num_heads": 6, "intermediate_dim": 1536}
# name: (keras-hub family, smallest main preset, its shape), from the model cards (timm's names).
SHAPES = {
    "dinov2": ("DINOV2", "dinov2_small", {**_VIT_S, "image_shape": (224, 224, 3)}),
    "dinov3": ("DINOV3", "dinov3_vit_small_lvd1689m", {**_VIT_S, "patch_size": 16, "image_shape": IMAGE}),
    "deit": (
        "DeiT",
        "deit_tiny_distilled_patch16_224_imagenet",
        {
            "image_shape": (224, 224, 3),
            "patch_size": 16,
            "num_layers": 12,
            "num_heads": 3,
            "hidden_dim": 192,
            "intermediate_dim": 768,
        },
    ),
    "vit": (
        "ViT",
        "vit_base_patch16_224_imagenet",
        {
            "image_shape": (224, 224, 3),
            "patch_size": 16,
            "num_layers": 12,
            "num_heads": 12,
            "hidden_dim": 768,
            "mlp_dim": 3072,
        },
    ),
    "swin": (
        "SwinTransformer",
        "swin_tiny_patch4_window7_224",
        {
            "image_shape": (224, 224, 3),
            "embed_dim": 96,
            "depths": [2, 2, 6, 2],
            "num_heads": [3, 6, 12, 24],
            "window_size": 7,
        },
    ),
    "hub-efficientnet": (
        "EfficientNet",
        "efficientnet_b0_ra_imagenet",
        {
            "stackwise_kernel_sizes": [3, 3, 5, 3, 5, 5, 3],
            "stackwise_num_repeats": [1, 2, 2, 3, 3, 4, 1],
            "stackwise_input_filters": [32, 16, 24, 40, 80, 112, 192],
            "stackwise_output_filters": [16, 24, 40, 80, 112, 192, 320],
            "stackwise_expansion_ratios": [1, 6, 6, 6, 6, 6, 6],
            "stackwise_squeeze_and_excite_ratios": [0.25] * 7,
            "stackwise_strides": [1, 2, 2, 2, 1, 2, 1],
            "stackwise_block_types": ["v1"] * 7,
            "width_coefficient": 1.0,
            "depth_coefficient": 1.0,
        },
    ),
    "hub-resnet": (
        "ResNet",
        "resnet_18_imagenet",
        {
            "input_conv_filters": [64],
            "input_conv_kernel_sizes": [7],
            "stackwise_num_filters": [64, 128, 256, 512],
            "stackwise_num_blocks": [2, 2, 2, 2],
            "stackwise_num_strides": [1, 2, 2, 2],
            "block_type": "basic_block",
        },
    ),
    "hub-densenet": ("DenseNet", "densenet_121_imagenet", {"stackwise_num_repeats": [6, 12, 24, 16]}),
    "vgg": (
        "VGG",
        "vgg_16_imagenet",
        {"stackwise_num_repeats": [2, 2, 3, 3, 3], "stackwise_num_filters": [64, 128, 256, 512, 512]},
    ),
}
NOT_TIMED = {  # its smallest main preset's shape is not written here, or it is too large to time in seconds
    "siglip": "ViT-B/16 vision tower (as vit) with a text tower: not timed",
    "clip": "ViT-B/16 vision tower (as vit) with a text tower: not timed",
    "metaclip2": "ViT-H/14 at 224: 632M parameters in the vision tower, not timed on 2 cores",
    "hgnetv2": "B4's stage table not written here: not timed",
    "mobilenetv3": "its block table not written here: not timed",
    "mobilenetv5": "300M parameters at 768 px: not timed on 2 cores",
    "cspnet": "CSPDarkNet-53's stage table not written here: not timed",
    "hub-xception": "Xception-41's block table not written here: not timed",
}


def build(name: str, size: int):
    """The family's smallest main preset's architecture, headless, pooled as petals pools it."""
    import keras
    import keras_hub

    from pipeline.networks import keras_hub_vision

    if name.startswith("convnext-"):
        return keras.applications.ConvNeXtTiny(include_top=False, weights=None, pooling="avg",
                                               input_shape=(size, size, 3))  # fmt: skip
    family, _, shape = SHAPES[name]
    backbone = getattr(keras_hub.models, f"{family}Backbone")(**shape)
    entry = keras_hub_vision.BACKBONES[name]
    body = keras_hub_vision._body(entry, backbone, size)
    inputs = keras.Input((size, size, 3))
    return keras.Model(inputs, keras_hub_vision.pooled(entry, body, body(inputs)))


def time_one(name: str, size: int, batch: int, batches: int) -> dict:
    import numpy as np

    started = time.perf_counter()
    model = build(name, size)
    built = time.perf_counter() - started
    pixels = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    model.predict_on_batch(pixels)  # the warm-up: tracing, oneDNN's reorders
    seconds = []
    for _ in range(batches):
        start = time.perf_counter()
        model.predict_on_batch(pixels)
        seconds.append(time.perf_counter() - start)
    return {
        "family": name,
        "size": size,
        "parameters": int(model.count_params()),
        "build_seconds": round(built, 2),
        "examples_per_second": round(batch / min(seconds), 2),
        "batch_seconds": [round(s, 3) for s in seconds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="images a batch (default 8)")
    parser.add_argument("--batches", type=int, default=2, help="timed batches a family (default 2)")
    parser.add_argument("--only", nargs="*", default=None, help="these families only (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "backbones.json")
    args = parser.parse_args()
    from pipeline.networks import keras_hub_vision

    names = [*SHAPES, "convnext-tiny"] if args.only is None else args.only
    rows = []
    for name in names:
        size = 224 if name.startswith("convnext-") else keras_hub_vision.BACKBONES[name].native_size
        row = time_one(name, size, args.batch, args.batches)
        rows.append(row)
        millions, rate = row["parameters"] / 1e6, row["examples_per_second"]
        print(f"{name:<18} {size:>4} px  {millions:7.1f} M  {rate:8.2f} ex/s", flush=True)
    for name, why in NOT_TIMED.items():
        print(f"{name:<18} {why}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    result = {
        "command": "python benchmarks/bench_backbones.py " + f"--batch {args.batch} --batches {args.batches}",
        "commit": commit.stdout.strip(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "keras_backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "rows": rows,
        "not_timed": NOT_TIMED,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
