"""Forward examples/s on this CPU of each family's smallest main preset, at random weights.

Each architecture is built here from the published shape of that preset (the preset's own
config.json is on Kaggle, not here: no download; where keras-hub converted the preset from timm,
the shape its own converter gives), images at the native size, headless and pooled as petals pools
them, texts at 256 tokens under petals' head; then one warm-up batch and `--batches` timed batches
of `--batch` examples (`predict_on_batch`; the two largest families 2 a batch). What it measures:
the ceiling of a CPU run's forward pass (a feature-cache probe, or predicting), not training. Each
row keeps the 1-minute load average as it ran: on a shared machine, a figure to read beside it.

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
_XCEPTION_41 = {  # keras.applications' Xception (20.9 M parameters headless, the preset's count)
    "stackwise_conv_filters": [[32, 64], [128, 128], [256, 256], [728, 728]]
    + [[728, 728, 728]] * 8
    + [[728, 1024], [1536, 2048]],
    "stackwise_pooling": [False, True, True, True] + [False] * 8 + [True, False],
}
# name: (keras-hub family, smallest main preset, timm's architecture): the shape keras-hub's own timm
# converter gives it (its presets were converted from timm's checkpoints by that code).
TIMM = {
    "hgnetv2": ("HGNetV2", "hgnetv2_b4_ssld_stage2_ft_in1k", "hgnetv2", "hgnetv2_b4"),
    "mobilenetv3": ("MobileNet", "mobilenet_v3_small_100_imagenet", "mobilenet", "mobilenetv3_small_100"),
    "cspnet": ("CSPNet", "csp_darknet_53_ra_imagenet", "cspnet", "cspdarknet53"),
    "mobilenetv5": ("MobileNetV5", "mobilenetv5_300m_enc_gemma3n", "mobilenetv5", "mobilenetv5_300m"),
}
_B16 = {"patch_size": 16, "hidden_dim": 768, "num_layers": 12, "num_heads": 12, "intermediate_dim": 3072}
# Two-tower families: petals keeps the vision tower, pooled and projected; the text tower is built
# tiny (it is not part of the timed network) because the backbone's constructor needs one.
_SIGLIP_B16 = {**_B16, "intermediate_activation": "gelu_approximate"}
TOWERS = {
    "siglip": ("SigLIP", "siglip2_base_patch16_224", _SIGLIP_B16, 0),
    "clip": ("CLIP", "clip_vit_base_patch16", _B16, 512),
    "metaclip2": (
        "MetaCLIP2",
        "metaclip_2_vit_huge_patch14_224",
        {"patch_size": 14, "hidden_dim": 1280, "num_layers": 32, "num_heads": 16, "intermediate_dim": 5120},
        1024,
    ),
}
SHAPES["hub-xception"] = ("Xception", "xception_41_imagenet", _XCEPTION_41)
BATCH = {"metaclip2": 2, "mobilenetv5": 2}  # 632 M and 300 M parameters: batches of 2 here
NOT_TIMED: dict[str, str] = {}  # every family's smallest main preset is timed now


def _timm_shape(converter: str, architecture: str) -> dict:
    import importlib

    module = importlib.import_module(f"keras_hub.src.utils.timm.convert_{converter}")
    return module.convert_backbone_config({"architecture": architecture, "pretrained_cfg": {"tag": "ssld"}})


def _two_tower(name: str, size: int):
    import keras_hub

    family, _, vision, projection = TOWERS[name]
    models = keras_hub.models
    tower = getattr(models, f"{family}VisionEncoder")(**vision, image_shape=(size, size, 3))
    text = {"vocabulary_size": 64, "embedding_dim": 32, "hidden_dim": 32, "num_layers": 1, "num_heads": 2}
    text["intermediate_dim"] = 64
    if not projection:  # SigLIP: the text tower projects onto the vision tower's width
        text_tower = models.SigLIPTextEncoder(**text, projection_dim=vision["hidden_dim"])
        return models.SigLIPBackbone(tower, text_tower)
    text_tower = getattr(models, f"{family}TextEncoder")(**text)
    return getattr(models, f"{family}Backbone")(tower, text_tower, projection)


TOKENS = 256  # a text's tokens: petals' default data.sequence_length
_BASE = {"num_layers": 12, "num_heads": 12, "hidden_dim": 768, "intermediate_dim": 3072}
# Text encoders: name: the smallest main preset's shape (keras-hub's model cards).
TEXTS = {
    "deberta-v3": {
        **_BASE,
        "num_heads": 6,
        "hidden_dim": 384,
        "intermediate_dim": 1536,
        "vocabulary_size": 128100,
    },
    "roberta": {**_BASE, "vocabulary_size": 50265},
    "xlm-roberta": {**_BASE, "vocabulary_size": 250002},
    "distil-bert": {**_BASE, "num_layers": 6, "vocabulary_size": 30522},
    "albert": {**_BASE, "vocabulary_size": 30000, "embedding_dim": 128},
}


def _text(name: str, size: int):
    """A text encoder under petals' own head (keras_hub_text.classifier), `size` tokens a text."""
    import keras_hub

    from pipeline.networks import keras_hub_text

    entry = keras_hub_text.NETWORKS[name]
    backbone = getattr(keras_hub.models, f"{entry.family}Backbone")(**TEXTS[name])
    return keras_hub_text.classifier(entry, backbone, 2, size, 0.1)


def _batch(name: str, size: int, batch: int):
    import numpy as np

    rng = np.random.default_rng(0)
    if name not in TEXTS:
        return rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    words = rng.integers(5, 1000, (batch, size)).astype("int32")
    zeros, ones = np.zeros_like(words), np.ones_like(words)
    from pipeline.networks import keras_hub_text

    given = {"token_ids": words, "padding_mask": ones, "segment_ids": zeros}
    return {key: given[key] for key in keras_hub_text.NETWORKS[name].inputs}


def build(name: str, size: int):
    """The family's smallest main preset's architecture, headless, pooled as petals pools it."""
    import keras
    import keras_hub

    from pipeline.networks import keras_hub_vision

    if name in TEXTS:
        return _text(name, size)
    if name.startswith("convnext-"):
        return keras.applications.ConvNeXtTiny(include_top=False, weights=None, pooling="avg",
                                               input_shape=(size, size, 3))  # fmt: skip
    if name in TOWERS:
        backbone = _two_tower(name, size)
    elif name in TIMM:
        family, _, converter, architecture = TIMM[name]
        backbone = getattr(keras_hub.models, f"{family}Backbone")(**_timm_shape(converter, architecture))
    else:
        family, _, shape = SHAPES[name]
        backbone = getattr(keras_hub.models, f"{family}Backbone")(**shape)
    entry = keras_hub_vision.BACKBONES[name]
    body = keras_hub_vision._body(entry, backbone, size)
    inputs = keras.Input((size, size, 3))
    return keras.Model(inputs, keras_hub_vision.pooled(entry, body, body(inputs)))


def time_one(name: str, size: int, batch: int, batches: int) -> dict:
    started = time.perf_counter()
    model = build(name, size)
    built = time.perf_counter() - started
    pixels = _batch(name, size, batch)
    model.predict_on_batch(pixels)  # the warm-up: tracing, oneDNN's reorders
    seconds = []
    for _ in range(batches):
        start = time.perf_counter()
        model.predict_on_batch(pixels)
        seconds.append(time.perf_counter() - start)
    return {
        "family": name,
        "size": size,
        "batch": batch,
        "parameters": int(model.count_params()),
        "build_seconds": round(built, 2),
        "examples_per_second": round(batch / min(seconds), 2),
        "batch_seconds": [round(s, 3) for s in seconds],
        "load_average": round(os.getloadavg()[0], 1),  # other work on the machine as it ran
    }


def _kept(path: Path, rows: list[dict]) -> list[dict]:
    """The file's rows of the families not timed this time (each names its own commit), then these."""
    timed = {row["family"] for row in rows}
    before = json.loads(path.read_text())["rows"] if path.is_file() else []
    return [row for row in before if row["family"] not in timed] + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="images a batch (default 8)")
    parser.add_argument("--batches", type=int, default=2, help="timed batches a family (default 2)")
    parser.add_argument("--only", nargs="*", default=None, help="these families only (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "backbones.json")
    args = parser.parse_args()
    from pipeline.networks import keras_hub_vision

    names = [*SHAPES, *TIMM, *TOWERS, "convnext-tiny", *TEXTS] if args.only is None else args.only
    rows = []
    for name in names:
        size = TOKENS if name in TEXTS else 224 if name.startswith("convnext-") else None
        size = size or keras_hub_vision.BACKBONES[name].native_size
        row = time_one(name, size, BATCH.get(name, args.batch), args.batches)
        rows.append(row)
        millions, rate = row["parameters"] / 1e6, row["examples_per_second"]
        unit = "tokens" if name in TEXTS else "px"
        print(f"{name:<18} {size:>4} {unit:<6}  {millions:7.1f} M  {rate:8.2f} ex/s", flush=True)
    for name, why in NOT_TIMED.items():
        print(f"{name:<18} {why}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    command = f"python benchmarks/bench_backbones.py --batch {args.batch} --batches {args.batches}"
    for row in rows:
        only = f" --only {row['family']}" if args.only else ""
        row.update(commit=commit.stdout.strip(), command=command + only)
    result = {
        "command": command,
        "commit": commit.stdout.strip(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "keras_backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "rows": _kept(args.out, rows) if args.only else rows,
        "not_timed": NOT_TIMED,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
