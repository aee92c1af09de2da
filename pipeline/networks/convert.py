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

log = logging.getLogger(__name__)

# ImageNet statistics of "torch" preprocessing: the `efficientnet` package's preprocess_input
# (and DenseNet's). Defined here so `backbone` imports this module and never the reverse.
TORCH_MEAN = (0.485, 0.456, 0.406)
TORCH_STD = (0.229, 0.224, 0.225)


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


# Where the `efficientnet` package (1.1.1, efficientnet/weights.py) fetches its noisy-student no-top
# files, and their md5s: kept here because Kaggle's TPU image, where they matter most, lacks the package.
NS_WEIGHTS_URL = "https://github.com/qubvel/efficientnet/releases/download/v0.0.1/"
NS_NOTOP_MD5 = {
    "b0": "a5b48ae7547fc990c7e4f3951230290d",
    "b1": "4d35baa41ca36f175506a33918f7e334",
    "b2": "e496e531f41242598288ff3a4b4199f9",
    "b3": "47da5b154de1372b557a65795d3e6135",
    "b4": "47c10902a4949eec589ab92fe1c35ed8",
    "b5": "4d53ef3544d4114e2d8080d6d777a74c",
    "b6": "71f96d7e15d9f891f3729b4f4e701f77",
    "b7": "e112b00c464fe929b821edbb35d1af55",
}


def noisy_student_file(variant: str) -> str:
    """The file name of `efficientnet-<variant>`'s noisy-student no-top weights (b0..b7)."""
    return f"efficientnet-{variant}_noisy-student_notop.h5"


def download(variant: str) -> Path:
    """The noisy-student no-top file of `efficientnet-<variant>`, from Keras's cache (a kernel without
    internet links an attached copy there) or downloaded as the package does, checked by its md5."""
    import keras

    if variant not in NS_NOTOP_MD5:
        raise PetalsError(f"no noisy-student weights for efficientnet-{variant}")
    file_name = noisy_student_file(variant)
    return Path(
        keras.utils.get_file(
            file_name, NS_WEIGHTS_URL + file_name, cache_subdir="models", file_hash=NS_NOTOP_MD5[variant]
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
