"""Real labelled images that ship inside packages, written as a user's own TFRecord competition.

No one here drew these, so a recipe tuned on the embedded flowers is tested on them honestly:
- `digits`: scikit-learn's 1,797 UCI scans of handwritten digits (8 x 8, 17 grey levels), in
  its wheel (`sklearn.datasets.load_digits`).
- `fashion`: Fashion-MNIST's product photos (28 x 28 grey, 10 classes, Zalando, MIT), from the
  Debian package `dataset-fashion-mnist`: `apt-get download`, unpacked without root into a
  cache folder (nothing is installed). 600 train and 200 val images per class from its train
  file, and 200 per class of its test file as the held-out test split.
- `faces`: scikit-image's `lfw_subset` (100 faces from Labeled Faces in the Wild, 100 other
  crops, 25 x 25 grey), in its wheel.

Each becomes a folder in the flowers layout (TFRecord shards of JPEGs per split, an unlabelled
test split, `sample_submission.csv`) and a competition file with its class list, as
docs/adding-a-competition.md says; the test labels stay here, for scoring the submission.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CACHE = Path.home() / ".cache" / "petals" / "real-data"
SHARDS = 4  # per split
FASHION_CLASSES = [
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "boot",
]


@dataclass
class RealImages:
    """Grey or RGB uint8 images of one dataset, split three ways (test labels held out)."""

    name: str
    classes: list[str]
    keeps_label: list[str]  # the transforms after which an image is still its class
    splits: dict[str, tuple[np.ndarray, np.ndarray]]  # split -> (images, labels)


def _three_ways(images, labels, val: float, test: float, seed: int = 0):
    from sklearn.model_selection import train_test_split

    rest_x, test_x, rest_y, test_y = train_test_split(
        images, labels, test_size=test, stratify=labels, random_state=seed
    )
    train_x, val_x, train_y, val_y = train_test_split(
        rest_x, rest_y, test_size=val / (1 - test), stratify=rest_y, random_state=seed
    )
    return {"train": (train_x, train_y), "val": (val_x, val_y), "test": (test_x, test_y)}


def digits() -> RealImages:
    """Dark ink on white paper, as the scans were: 0 (paper) .. 16 (ink) -> 255 .. 0."""
    from sklearn.datasets import load_digits

    loaded = load_digits()
    images = (255 - loaded.images * (255 / 16)).round().astype(np.uint8)
    shifts = ["rotation", "shear", "zoom", "shift", "brightness", "contrast"]
    return RealImages(
        "digits", [str(d) for d in range(10)], shifts, _three_ways(images, loaded.target, 0.2, 0.2)
    )


def _fashion_files() -> Path:
    folder = CACHE / "fashion-mnist"
    found = list(folder.rglob("train-images-idx3-ubyte.gz"))
    if found:
        return found[0].parent
    system = Path("/usr/share/datasets/fashion-mnist")
    if (system / "train-images-idx3-ubyte.gz").is_file():
        return system
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["apt-get", "download", "dataset-fashion-mnist"], cwd=folder, capture_output=True, text=True
    )
    debs = list(folder.glob("dataset-fashion-mnist_*.deb"))
    if done.returncode or not debs:
        raise SystemExit(
            f"real_images: apt-get download dataset-fashion-mnist failed: {done.stderr.strip()[-300:]}"
        )
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(folder / "unpacked")], check=True)
    return next((folder / "unpacked").rglob("train-images-idx3-ubyte.gz")).parent


def _idx(path: Path, offset: int) -> np.ndarray:
    return np.frombuffer(gzip.open(path).read(), np.uint8, offset=offset)


def fashion(per_class_train: int = 600, per_class_val: int = 200, per_class_test: int = 200) -> RealImages:
    folder = _fashion_files()
    rng = np.random.default_rng(0)

    def take(prefix: str, counts: list[int]):
        images = _idx(folder / f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
        labels = _idx(folder / f"{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
        parts = [[] for _ in counts]
        for label in range(10):
            rows = rng.permutation(np.flatnonzero(labels == label))
            start = 0
            for part, count in zip(parts, counts, strict=True):
                part.extend(rows[start : start + count])
                start += count
        return [(images[np.sort(p)], labels[np.sort(p)]) for p in parts]

    train, val = take("train", [per_class_train, per_class_val])
    (test,) = take("t10k", [per_class_test])
    keeps = ["flip", "zoom", "shift", "brightness", "contrast"]
    return RealImages("fashion", FASHION_CLASSES, keeps, {"train": train, "val": val, "test": test})


def faces() -> RealImages:
    from skimage import data

    images = data.lfw_subset()  # floats in [0, 1]: 100 faces, then 100 other crops
    labels = np.r_[np.ones(100, np.int64), np.zeros(100, np.int64)]
    images = (images * 255).round().astype(np.uint8)
    keeps = ["flip", "rotation", "zoom", "shift", "brightness", "contrast"]
    return RealImages("faces", ["other", "face"], keeps, _three_ways(images, labels, 0.2, 0.2))


DATASETS = {"digits": digits, "fashion": fashion, "faces": faces}


def _jpeg(image: np.ndarray, size: int) -> bytes:
    from PIL import Image

    from pipeline.data import synthetic

    grey = Image.fromarray(image).resize((size, size), Image.BICUBIC)
    return synthetic.encode_jpeg(
        np.stack([np.asarray(grey)] * 3, axis=-1) if image.ndim == 2 else np.asarray(grey)
    )


def write_competition(data: RealImages, root: Path, size: int = 192) -> tuple[Path, Path, dict[str, int]]:
    """(the competition file, the data folder to fetch, test id -> true label)."""
    import pandas as pd

    from pipeline.data import records

    spec_dir, folder = root / "competition", root / "download"
    spec_dir.mkdir(parents=True)
    (spec_dir / f"{data.name}-classes.txt").write_text("\n".join(data.classes) + "\n")
    counts = {split: len(labels) for split, (_, labels) in data.splits.items()}
    spec = spec_dir / f"{data.name}.toml"
    spec.write_text(
        f'''name = "{data.name}"
title = "{data.name}: real images as a user brings them"
slugs = ["{data.name}-real"]
classes_file = "{data.name}-classes.txt"
task = "image_classification"
metric = "macro_f1"

[data]
format = "records"
splits = ["train", "val", "test"]
labeled_splits = ["train", "val"]
sample_submission = "sample_submission.csv"

[data.counts]
{chr(10).join(f"{split} = {count}" for split, count in counts.items())}

[data.records]
resolutions = [{size}]
record_dir = "tfrecords-jpeg-{{size}}x{{size}}"
shard_name = "{{index:02d}}-{{size}}x{{size}}-{{count}}.tfrec"
shards_per_split = {SHARDS}

[data.records.schema]
image = "image"
label = "class"
id = "id"

[submission]
id_column = "id"
label_column = "label"
value = "class"

[augment]
keeps_label = {json.dumps(data.keeps_label)}
'''
    )
    from competition import load_spec
    from pipeline.formats.records import records_of

    schema = records_of(load_spec(str(spec))).schema
    truth = {}
    for split, (images, labels) in data.splits.items():
        out = folder / f"tfrecords-jpeg-{size}x{size}" / split
        out.mkdir(parents=True)
        ids = [f"{data.name[0]}{split[0]}{i:07x}" for i in range(len(labels))]
        labeled = split != "test"
        rows = [
            records.serialize_example(schema, _jpeg(image, size), i, int(label) if labeled else None)
            for image, i, label in zip(images, ids, labels, strict=True)
        ]
        for shard in range(SHARDS):
            part = rows[shard::SHARDS]
            records.write_shard(str(out / f"{shard:02d}-{size}x{size}-{len(part)}.tfrec"), part)
        if split == "test":
            truth = dict(zip(ids, labels.tolist(), strict=True))
            pd.DataFrame({"id": ids, "label": 0}).to_csv(folder / "sample_submission.csv", index=False)
    return spec, folder, truth
