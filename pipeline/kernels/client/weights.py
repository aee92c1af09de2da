"""The weights file a kernel's backbone loads, as the wheels go (`wheels.py`): a private dataset it
attaches, so the kernel builds the backbone from the mounted file and never downloads.

Which file: the one `model.weights=/path` names on this machine, which the kernel could not see
otherwise; or, for a kernel without internet, the ImageNet file a keras.applications backbone
(ConvNeXt, EfficientNet and V2, DenseNet201, Xception, ResNet50) would download, taken from Keras's
cache here and checked against Keras's own hash (`networks.keras_weights`). `make kernel` copies it
into `kernels/_datasets/petals-weights/` under a name carrying its sha256, and attaches
`<owner>/petals-weights`; `make kernel-push` uploads that folder before the kernel, only when Kaggle
lacks a file of it (`private_datasets.publish`). The kernel's settings carry the file's name, size
and hash; inside the kernel (`mounted`) the file is found where Kaggle mounted the dataset, refused
unless it lies inside that folder with that size and hash (checked before Keras reads a byte), and
its path becomes `model.weights`, which every registry backbone loads as a local file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.files import sha256, write_atomically
from pipeline.core.paths import check_name, inside
from pipeline.kernels.client import private_datasets

SLUG = "petals-weights"  # <owner>/petals-weights: one per Kaggle account, shared by its kernels
KIND = private_datasets.Private(
    SLUG,
    "weights file(s)",
    lambda name: not name.startswith("."),
    "Pretrained weights files for petals kernels that run without internet, made by `make kernel`.",
    "regenerate it (make kernel) to copy the file in",
)
HASH_IN_NAME = 16  # hex digits of the sha256 a shipped file's name carries: a changed file, a new name


def folder_for(kernels_dir: Path) -> Path:
    return KIND.folder(kernels_dir)


def needed(config, internet: bool) -> Path | None:
    """The file on this machine that the kernel's backbone loads and could not reach otherwise; None
    when there is none (weights from a preset, a package's wheel, the internet, or an attached source)."""
    from pipeline import networks
    from pipeline.networks import backbone
    from pipeline.networks.keras_weights import cached, check_size

    entry = networks.get(config.model.backbone)
    weights = config.model.weights
    if not isinstance(entry, backbone.Backbone) or weights.startswith("/kaggle/input/"):
        return None
    if weights == "imagenet" and not internet:
        return cached(entry)  # None: keras.applications does not build it, or Keras's cache lacks it
    if weights in backbone.WEIGHT_CHOICES:
        return None
    path = Path(weights)
    if not path.is_file():
        raise PetalsError(
            f"model.weights={weights!r}: no such file on this machine to ship to the kernel, which sees only "
            "its attached sources; give a file that is here, or attach a dataset holding it "
            "(DATASETS=owner/slug) and set model.weights=/kaggle/input/<path>/<file>"
        )
    check_size(path)
    return path


def shipped_name(source: Path, digest: str) -> str:
    """`convnext_tiny_notop.h5` -> `convnext_tiny_notop-<hash>.h5`: the suffixes kept whole, since
    Keras tells its formats apart by them (`.h5` from `.weights.h5`)."""
    stem, dot, suffixes = source.name.partition(".")
    stem = re.sub(r"[^A-Za-z0-9_-]", "_", stem)[:80] or "weights"
    return check_name(f"{stem}-{digest[:HASH_IN_NAME]}{dot}{suffixes}", "a shipped weights file's name")


def ship(kernels_dir: Path, source: Path, owner: str) -> dict:
    """`source` copied into the dataset's folder (unless it is there already) and the dataset's
    metadata written; what the kernel's settings carry: {dataset, file, bytes, sha256}."""
    from pipeline.networks.keras_weights import check_size

    size = check_size(source)
    digest = sha256(source)
    folder = folder_for(kernels_dir)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / shipped_name(source, digest)
    if not (target.is_file() and target.stat().st_size == size and sha256(target) == digest):
        write_atomically(target, lambda tmp: shutil.copyfile(source, tmp))
    dataset = f"{owner}/{SLUG}"
    KIND.write_metadata(folder, dataset)
    print(
        f"kernel: attaches the private dataset {dataset} holding {target.name} ({size / 1e6:.1f} MB, from "
        f"{source}): the kernel loads its backbone from it without a download; `make kernel-push` "
        "uploads it first"
    )
    return {"dataset": dataset, "file": target.name, "bytes": size, "sha256": digest}


def publish(kernel_folder: Path, report=print) -> str | None:
    """Before a kernel is pushed: `<owner>/petals-weights` on Kaggle (`private_datasets.publish`)."""
    return private_datasets.publish(kernel_folder, KIND, report)


def mounted(shipped: dict, root: Path) -> Path:
    """Inside the kernel: the shipped file where Kaggle mounted its dataset under `root`, checked as
    untrusted input before Keras reads it (inside its folder, its size, then its sha256)."""
    from pipeline.core import kaggle_input
    from pipeline.networks.keras_weights import check_size

    name = check_name(shipped.get("file"), "the shipped weights file")
    found = kaggle_input.find("dataset", shipped["dataset"], lambda f: (f / name).is_file(), name, root)
    if found is None:
        raise PetalsError(
            f"model.weights: no attached source under {root} holds {name}, from the dataset "
            f"{shipped['dataset']}: attach it (make kernel-push uploads it before the kernel)"
        )
    path = inside(found.path, name, "the shipped weights file")
    check_size(path, shipped["bytes"])
    if sha256(path) != shipped["sha256"]:
        raise PetalsError(
            f"{path}: its sha256 differs from the file petals shipped ({shipped['sha256'][:16]}...): "
            "regenerate and push the kernel (make kernel kernel-push)"
        )
    return path
