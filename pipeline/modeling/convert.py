"""Noisy-student weights for keras.applications' EfficientNet, so they train on any backend.

The `efficientnet` package (the source of EfficientNet's noisy-student weights, which the
public 0.96 flower recipe uses) builds only on TensorFlow under Keras 3: on JAX its swish
calls `keras.backend.sigmoid`, which Keras 3 does not have. Its weight files are Keras 2 `.h5`
files of the same network keras.applications builds (both follow the original TensorFlow
implementation, layer for layer and name for name), so this module reads such a file with
h5py and assigns each layer's weights to the keras.applications layer of the same name.

Two differences are bridged: keras.applications' model begins with its own input scaling
(x / 255, then a Normalization layer), which is set here to the package's ImageNet mean and
standard deviation ("torch" preprocessing), so the converted model takes raw 0..255 pixels
like every keras.applications backbone; and the package's `same`-padded strided convolutions
are keras.applications' explicit ZeroPadding2D + `valid` ones, which compute the same thing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.modeling.registry import TORCH_MEAN, TORCH_STD  # the package's preprocess_input stats

log = logging.getLogger(__name__)


def is_package_file(path: str | Path) -> bool:
    """Whether `path` is a Keras 2 weights file (the `efficientnet` package's format)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            group = f.get("model_weights", f)
            return "layer_names" in group.attrs
    except OSError:
        return False


def _package_weights(path: str | Path) -> dict[str, list[np.ndarray]]:
    """{layer name: its weight arrays in the file's order} of a Keras 2 weights file."""
    import h5py

    def text(value) -> str:
        return value.decode("utf8") if isinstance(value, bytes) else str(value)

    layers: dict[str, list[np.ndarray]] = {}
    with h5py.File(path, "r") as f:
        group = f.get("model_weights", f)
        for name in (text(n) for n in group.attrs["layer_names"]):
            names = [text(w) for w in group[name].attrs.get("weight_names", [])]
            if names:
                layers[name] = [np.asarray(group[name][w]) for w in names]
    return layers


def download(variant: str) -> Path:
    """The noisy-student no-top file of `efficientnet-<variant>` (b0..b7), as the package fetches it."""
    try:
        from efficientnet.weights import NS_WEIGHTS_HASHES, NS_WEIGHTS_PATH  # data only: no Keras
    except ImportError:
        raise PetalsError(
            f"noisy-student weights for efficientnet-{variant}: the `efficientnet` package, which knows "
            "where they are, is not installed; pass the file instead: "
            f"--set model.weights=/path/to/efficientnet-{variant}_noisy-student_notop.h5"
        ) from None
    import keras

    name = f"efficientnet-{variant}"
    file_name = f"{name}_noisy-student_notop.h5"
    return Path(
        keras.utils.get_file(
            file_name,
            NS_WEIGHTS_PATH + file_name,
            cache_subdir="models",
            file_hash=NS_WEIGHTS_HASHES[name][1],
        )
    )


def load_into(model, path: str | Path) -> None:
    """Assign a package weights file to keras.applications' EfficientNet `model`, layer by layer.

    Every layer with weights in the model must be in the file with the same shapes, and every
    layer in the file must be used: a file of another variant is a PetalsError naming the first
    layer that does not fit.
    """
    import keras

    saved = _package_weights(path)
    used = set()
    for layer in model.layers:
        if not layer.weights:
            continue
        if isinstance(
            layer, keras.layers.Normalization
        ):  # keras.applications' input scaling: the package's stats
            stats = [
                np.asarray(TORCH_MEAN, "float32"),
                np.square(np.asarray(TORCH_STD, "float32")),
                np.asarray(0),
            ]
            layer.set_weights(stats)
            layer.finalize_state()  # the layer computes with copies it makes of these
            continue
        arrays = saved.get(layer.name)
        shapes = [tuple(w.shape) for w in layer.weights]
        if arrays is None or [a.shape for a in arrays] != shapes:
            found = "missing" if arrays is None else [a.shape for a in arrays]
            raise PetalsError(
                f"{path}: does not fit {model.name}: layer {layer.name} wants {shapes}, the file has {found}"
            )
        layer.set_weights(arrays)
        used.add(layer.name)
    unused = sorted(set(saved) - used)
    if unused:
        raise PetalsError(
            f"{path}: does not fit {model.name}: the file has layers it lacks ({unused[:3]}; "
            "another variant's weights?)"
        )
    log.info("weights: %s carried into %s (%d layers)", Path(path).name, model.name, len(used))
