"""Noisy-student weights carried from the `efficientnet` package into keras.applications' EfficientNet.

The real files cannot be downloaded here, so the package's own models write random weights
(batch-norm statistics included) in the format its files come in, the Keras 2 `.h5` that the
package itself loads; the converted keras.applications model must then compute what the package
model computes, on TensorFlow and on JAX.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from pipeline.core.errors import PetalsError
from pipeline.networks import convert, registry
from tests.conftest import run_python

SIZE = 32


def package_weights(variant: str, path, seed: int = 0):
    """The package's EfficientNet with random weights and statistics, written as its files are."""
    import efficientnet.tfkeras as efn
    from keras.src.legacy.saving import legacy_h5_format

    model = getattr(efn, f"EfficientNet{variant.upper()}")(
        include_top=False, weights=None, input_shape=(SIZE, SIZE, 3)
    )
    rng = np.random.default_rng(seed)
    for variable in model.weights:  # BatchNorm: gamma, beta, moving mean, moving variance
        if "moving_variance" in variable.path:
            variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype("float32"))
        elif any(name in variable.path for name in ("gamma", "beta", "moving_mean")):
            variable.assign(
                rng.normal(0.0, 0.2, variable.shape).astype("float32") + ("gamma" in variable.path)
            )
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)
    return model


def torch_preprocessed(pixels: np.ndarray) -> np.ndarray:
    return (pixels / 255.0 - np.array(convert.TORCH_MEAN)) / np.array(convert.TORCH_STD)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["b0", pytest.param("b3", marks=pytest.mark.heavy)])  # b3: a second width
def test_the_converted_model_computes_what_the_package_model_computes(tmp_path, variant):
    path = tmp_path / f"efficientnet-{variant}_noisy-student_notop.h5"
    package = package_weights(variant, path)
    assert convert.is_package_file(path)
    import efficientnet.tfkeras as efn

    again = getattr(efn, f"EfficientNet{variant.upper()}")(
        include_top=False, weights=str(path), input_shape=(SIZE, SIZE, 3)
    )  # the package loads the file: it is in the package's format
    np.testing.assert_array_equal(again.weights[-1].numpy(), package.weights[-1].numpy())

    keras_app = registry.get_backbone(f"keras-efficientnet-{variant}").build((SIZE, SIZE, 3), str(path))
    pixels = np.random.default_rng(1).uniform(0, 255, (4, SIZE, SIZE, 3)).astype("float32")
    expected = np.asarray(package(torch_preprocessed(pixels).astype("float32"), training=False))
    got = np.asarray(keras_app(pixels, training=False))  # raw pixels: it scales and normalises itself
    assert got.shape == expected.shape and np.abs(expected).max() > 0.1
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.slow
@pytest.mark.heavy  # JAX compiles a whole ImageNet network
def test_the_converted_weights_load_on_jax_and_give_the_same_outputs(tmp_path):
    path = tmp_path / "efficientnet-b0_noisy-student_notop.h5"
    package = package_weights("b0", path)
    pixels = np.random.default_rng(2).uniform(0, 255, (3, SIZE, SIZE, 3)).astype("float32")
    np.save(tmp_path / "pixels.npy", pixels)
    expected = np.asarray(package(torch_preprocessed(pixels).astype("float32"), training=False))
    done = run_python(
        f"""
        import json
        import numpy as np
        from pipeline.core import device
        device.pick("jax", "cpu")
        from pipeline.networks import registry
        net = registry.build_classifier("keras-efficientnet-b0", {SIZE}, 5, weights={str(path)!r})
        backbone = net.get_layer("backbone")
        pixels = np.load({str(tmp_path / "pixels.npy")!r})
        print(json.dumps(backbone.predict(pixels, verbose=0).tolist()))  # jitted: faster than eager here
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.asarray(json.loads(done.stdout.strip().splitlines()[-1]))
    assert np.abs(got - expected).max() <= 1e-4


def test_a_file_of_another_variant_is_named_with_the_first_layer_that_does_not_fit(tmp_path):
    path = tmp_path / "efficientnet-b1_noisy-student_notop.h5"
    package_weights("b1", path)
    with pytest.raises(
        PetalsError, match=r"does not fit efficientnetb0: the file has layers it lacks \(\['block1b_bn'"
    ):
        registry.get_backbone("keras-efficientnet-b0").build((SIZE, SIZE, 3), str(path))


def test_a_keras_3_weights_file_is_not_taken_for_a_package_file(tmp_path):
    model = registry.get_backbone("keras-efficientnet-b0").build((SIZE, SIZE, 3), None)
    path = tmp_path / "b0.weights.h5"
    model.save_weights(path)
    assert not convert.is_package_file(path)
    assert not convert.is_package_file(tmp_path / "missing.h5")


def test_noisy_student_files_are_where_and_what_the_package_says():
    """The URL and md5s are carried here (Kaggle's TPU image has no `efficientnet` package): the same."""
    from efficientnet.weights import NS_WEIGHTS_HASHES, NS_WEIGHTS_PATH

    assert convert.NS_WEIGHTS_URL == NS_WEIGHTS_PATH
    assert {f"efficientnet-{v}": md5 for v, md5 in convert.NS_NOTOP_MD5.items()} == {
        name: hashes[1] for name, hashes in NS_WEIGHTS_HASHES.items()
    }
    assert convert.noisy_student_file("b7") == "efficientnet-b7_noisy-student_notop.h5"
    with pytest.raises(PetalsError, match="no noisy-student weights for efficientnet-b8"):
        convert.download("b8")


def test_the_efficientnet_package_is_tensorflow_only_and_says_what_to_use():
    assert registry.check_backbone("keras-efficientnet-b7", "jax").name == "keras-efficientnet-b7"
    with pytest.raises(
        PetalsError, match=r"efficientnet-b7 builds on tensorflow only.*use keras-efficientnet-b7"
    ):
        registry.check_backbone("efficientnet-b7", "jax")
