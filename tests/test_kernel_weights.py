"""The weights file of a keras.applications backbone for a kernel without internet, the way the wheels
go: found in Keras's cache here (or given as model.weights=/path), copied under a name carrying its
hash into a private dataset the kernel attaches, uploaded before the kernel only when Kaggle lacks it,
and inside the kernel found where Kaggle mounted it, checked, and loaded: never downloaded.

The real `kaggle` client talks to the loopback server. The weights are a randomly initialised
ConvNeXt-Tiny's, saved here in the format keras.applications publishes; Keras's own hash for the
ImageNet file is swapped for theirs. So the path is tested, not ImageNet's weights."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path

import keras
import numpy as np
import pytest

from pipeline import cli
from pipeline.core import kaggle_datasets
from pipeline.core.errors import PetalsError
from pipeline.kernels.client import metadata as kernel
from pipeline.kernels.client import private_datasets, weights
from pipeline.kernels.script import main as kernel_main
from pipeline.networks import keras_weights, registry
from pipeline.tasks.recipe_config import load_config
from tests.conftest import error_lines, kernel_help_recorded
from tests.kaggle_server import Behaviour, KaggleTestServer

OWNER, NAME = "petals-user", "petals-convnext-offline"
CONVNEXT = ["--set", "model.backbone=convnext-tiny"]
DATASET = f"{OWNER}/{weights.SLUG}"


def _generate(kernels_dir, *extra: str) -> int:
    with kernel_help_recorded():  # these tests are about the weights the kernel ships
        return cli.main(["kernel", "generate", "--kernels-dir", str(kernels_dir), "--owner", OWNER,
                         "--name", NAME, "--accelerator", "None", *extra])  # fmt: skip


def _push(kernels) -> int:
    return cli.main(
        ["kernel", "push", "--kernels-dir", str(kernels), "--name", NAME, "--accelerator", "None"]
    )


def _settings(kernels) -> dict:
    """The SETTINGS the generated kernel script carries (a pprint'ed dict literal)."""
    import ast

    text = (kernels / NAME / kernel.SCRIPT).read_text()
    return ast.literal_eval(re.search(r"^SETTINGS = (.*?)\nBUNDLE = ", text, re.S | re.M).group(1))


@pytest.fixture
def keras_cache(tmp_path, monkeypatch) -> Path:
    """Keras's cache (`$KERAS_HOME/models`) moved to an empty folder."""
    from keras.src.backend import config

    monkeypatch.setattr(config, "_KERAS_DIR", str(tmp_path / "keras"))
    folder = tmp_path / "keras" / "models"
    folder.mkdir(parents=True)
    return folder


def _as_keras_publishes(path: Path, monkeypatch) -> Path:
    """`path` taken by keras.applications for ConvNeXt-Tiny's ImageNet file: Keras's hash made its."""
    from keras.src.applications import convnext

    top, _ = convnext.WEIGHTS_HASHES["convnext_tiny"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setitem(convnext.WEIGHTS_HASHES, "convnext_tiny", (top, digest))
    return path


@pytest.mark.slow
@pytest.mark.heavy  # builds six keras.applications networks, DenseNet201 and Xception among them
def test_the_imagenet_file_is_asked_of_keras_applications_for_each_backbone_it_builds():
    named = {
        "convnext-tiny": "convnext_tiny_notop.h5",
        "keras-efficientnetv2-b0": "efficientnetv2-b0_notop.h5",
        "keras-efficientnet-b0": "efficientnetb0_notop.h5",
        "densenet201": "densenet201_weights_tf_dim_ordering_tf_kernels_notop.h5",
        "xception": "xception_weights_tf_dim_ordering_tf_kernels_notop.h5",
        "resnet50": "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5",
    }
    for name, file in named.items():
        found = keras_weights.imagenet_file(registry.get_backbone(name))
        assert found is not None and found.name == file and len(found.file_hash) in (32, 64)
    for name in ("cnn", "efficientnet-lite0", "efficientnet-b0"):  # no file, a wheel's, the package's
        assert keras_weights.imagenet_file(registry.get_backbone(name)) is None


@pytest.mark.slow  # kernel generation (as test_kernel_wheels)
def test_an_offline_kernel_ships_the_cached_file_once_under_its_hash(
    keras_cache, tmp_path, monkeypatch, capsys
):
    cached = keras_cache / "convnext_tiny_notop.h5"
    cached.write_bytes(b"convnext weights " * 64)
    _as_keras_publishes(cached, monkeypatch)
    kernels = tmp_path / "kernels"
    assert _generate(kernels, "--internet", "off", *CONVNEXT, "--set", "model.weights=imagenet") == 0
    meta = json.loads((kernels / NAME / kernel.METADATA).read_text())
    assert meta["dataset_sources"] == [DATASET] and meta["enable_internet"] is False
    digest = hashlib.sha256(cached.read_bytes()).hexdigest()
    file = f"convnext_tiny_notop-{digest[:16]}.h5"
    folder = weights.folder_for(kernels)
    assert sorted(p.name for p in folder.iterdir()) == sorted([private_datasets.DATASET_METADATA, file])
    assert (folder / file).read_bytes() == cached.read_bytes()
    assert _settings(kernels)["shipped_weights"] == {
        "dataset": DATASET, "file": file, "bytes": cached.stat().st_size, "sha256": digest,
    }  # fmt: skip
    assert f"attaches the private dataset {DATASET} holding {file}" in capsys.readouterr().out
    # Online, Kaggle downloads it: nothing to ship.
    config = load_config(overrides=["model.backbone=convnext-tiny", "model.weights=imagenet"])
    assert weights.needed(config, internet=True) is None and weights.needed(config, internet=False) == cached


@pytest.mark.slow  # kernel generation (as test_kernel_wheels)
def test_a_cached_file_that_is_not_keras_s_is_refused_and_a_missing_one_says_how_to_ship_it(
    keras_cache, tmp_path, capsys
):
    offline = ("--internet", "off", *CONVNEXT, "--set", "model.weights=imagenet")
    assert _generate(tmp_path / "kernels", *offline) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "model.weights=imagenet downloads the imagenet weights file of convnext-tiny" in line
    assert "let petals ship it" in line and str(keras_cache) in line
    (keras_cache / "convnext_tiny_notop.h5").write_bytes(b"half a download")
    assert _generate(tmp_path / "kernels", *offline) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "not the file keras.applications publishes for convnext-tiny" in line
    assert not (tmp_path / "kernels").exists()


@pytest.fixture
def generated(tmp_path, monkeypatch, in_kaggle_env):
    monkeypatch.setattr(kaggle_datasets, "POLL_SECONDS", 0.01)
    mine = tmp_path / "mine.weights.h5"
    mine.write_bytes(b"weights, version 1")
    kernels = tmp_path / "kernels"
    assert _generate(kernels, *CONVNEXT, "--set", f"model.weights={mine}") == 0  # internet on: still
    return kernels, mine


def _order(behaviour) -> list[str]:
    said = [r["path"].rsplit("/", 1)[-1] for r in behaviour.requests if r["path"].startswith("/api/v1/")]
    return [m for m in said if m in ("CreateDataset", "CreateDatasetVersion", "SaveKernel")]


@pytest.mark.slow  # kernel generation (as test_kernel_wheels)
def test_the_weights_go_up_before_the_kernel_once_and_again_only_when_the_file_changes(generated, capsys):
    """A file model.weights names here (once refused: the kernel could not see it) goes up the same way."""
    kernels, mine = generated
    shipped = _settings(kernels)["shipped_weights"]
    assert re.fullmatch(r"mine-[0-9a-f]{16}\.weights\.h5", shipped["file"])  # Keras's suffix kept whole
    behaviour = Behaviour(dataset_statuses=["BLOBS_RECEIVED"])
    with KaggleTestServer(behaviour):
        assert _push(kernels) == 0
        assert _push(kernels) == 0  # the same file: reused
        mine.write_bytes(b"weights, version 2")  # the same size: a new hash, a new name
        assert _generate(kernels, *CONVNEXT, "--set", f"model.weights={mine}") == 0
        assert _push(kernels) == 0
    assert _order(behaviour) == [
        "CreateDataset",
        "SaveKernel",
        "SaveKernel",
        "CreateDatasetVersion",
        "SaveKernel",
    ]
    created = behaviour.dataset_requests[0]
    assert created["isPrivate"] is True and created["slug"] == weights.SLUG and created["ownerSlug"] == OWNER
    first, second = behaviour.datasets[DATASET]
    assert list(first.values()) == [b"weights, version 1"]
    assert sorted(second.values()) == [b"weights, version 1", b"weights, version 2"]  # the folder only grows
    assert all(p["datasetDataSources"] == [DATASET] for p in behaviour.pushed)
    assert "reused, not uploaded" in capsys.readouterr().out


# ----------------------------------------------------------------------------- inside the kernel


def _mount(tmp_path, files: dict[str, bytes]) -> Path:
    """The dataset where Kaggle mounted it in 2026: /kaggle/input/datasets/<owner>/<slug>."""
    folder = tmp_path / "input" / "datasets" / OWNER / weights.SLUG
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def _shipped(data: bytes, file: str = "w-0123456789abcdef.h5") -> dict:
    return {"dataset": DATASET, "file": file, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _load(tmp_path, shipped, monkeypatch) -> list[str]:
    monkeypatch.setattr(kernel_main, "SETTINGS", {"shipped_weights": shipped})
    return kernel_main.use_shipped_weights(argparse.Namespace(input=tmp_path / "input", extra=[]))


@pytest.mark.parametrize(
    ("on_disk", "said"),
    [
        ({"other.h5": b"12345678"}, "no attached source under"),
        ({"w-0123456789abcdef.h5": b"1234567"}, "7 bytes where 8 were shipped"),
        ({"w-0123456789abcdef.h5": b"12345679"}, "its sha256 differs from the file petals shipped"),
    ],
)
def test_a_mounted_file_that_is_not_the_one_shipped_stops_the_kernel_in_one_line(
    tmp_path, monkeypatch, on_disk, said
):
    _mount(tmp_path, on_disk)
    with pytest.raises(PetalsError, match=said) as raised:
        _load(tmp_path, _shipped(b"12345678"), monkeypatch)
    assert "\n" not in str(raised.value)


def test_a_mounted_file_is_refused_before_it_is_read_when_it_leaves_its_folder_or_is_too_large(
    tmp_path, monkeypatch
):
    outside = tmp_path / "elsewhere.h5"
    outside.write_bytes(b"12345678")
    folder = _mount(tmp_path, {})
    os.symlink(outside, folder / "w-0123456789abcdef.h5")
    with pytest.raises(PetalsError, match=r"leaves .* link out of it"):
        _load(tmp_path, _shipped(b"12345678"), monkeypatch)
    (folder / "w-0123456789abcdef.h5").unlink()
    (folder / "w-0123456789abcdef.h5").write_bytes(b"12345678")
    monkeypatch.setattr(keras_weights, "MAX_WEIGHTS_BYTES", 4)
    with pytest.raises(PetalsError, match="8 bytes, over the 4 a weights file may have"):
        _load(tmp_path, _shipped(b"12345678"), monkeypatch)
    with pytest.raises(PetalsError, match="is not a plain name"):
        _load(tmp_path, _shipped(b"12345678", file="../elsewhere.h5"), monkeypatch)


def _random_convnext_file(path: Path) -> keras.Model:
    """A randomly initialised ConvNeXt-Tiny without its top, saved as keras.applications publishes
    ImageNet's (Keras 2's HDF5 weights layout, which `load_weights` reads by a `.h5` name)."""
    import h5py
    from keras.src.legacy.saving import legacy_h5_format

    keras.utils.set_random_seed(7)
    model = keras.applications.ConvNeXtTiny(include_top=False, weights=None, input_shape=(32, 32, 3))
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)
    return model


@pytest.mark.slow
@pytest.mark.heavy  # a 110 MB file through generate, the loopback upload and the kernel's loader: 30 s
def test_a_convnext_kernel_without_internet_builds_its_backbone_from_the_mounted_file(
    keras_cache, tmp_path, monkeypatch, in_kaggle_env
):
    monkeypatch.setattr(kaggle_datasets, "POLL_SECONDS", 0.01)
    saved = _random_convnext_file(keras_cache / "convnext_tiny_notop.h5")
    _as_keras_publishes(keras_cache / "convnext_tiny_notop.h5", monkeypatch)
    kernels = tmp_path / "kernels"
    assert _generate(kernels, "--internet", "off", *CONVNEXT, "--set", "model.weights=imagenet") == 0
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert _push(kernels) == 0
    (uploaded,) = behaviour.datasets[DATASET]
    mount = _mount(tmp_path, uploaded)  # what Kaggle received, where a 2026 kernel finds it
    (keras_cache / "convnext_tiny_notop.h5").unlink()  # nothing here but the mount

    def no_download(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args}")

    from keras.src.utils import file_utils

    monkeypatch.setattr(file_utils, "get_file", no_download)
    args = argparse.Namespace(input=tmp_path / "input", extra=["train.epochs=1"])
    monkeypatch.setattr(kernel_main, "SETTINGS", _settings(kernels))
    (line,) = kernel_main.use_shipped_weights(args)
    (file,) = uploaded
    assert args.extra == [f"model.weights={mount / file}", "train.epochs=1"] and "sha256 checked" in line
    net = registry.build_classifier("convnext-tiny", 32, 3, weights=str(mount / file))
    for ours, theirs in zip(net.get_layer("backbone").get_weights(), saved.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
