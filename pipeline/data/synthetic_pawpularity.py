"""An embedded offline dataset for `petfinder-pawpularity-score`, in Kaggle's layout.

`train.csv` (Id, the 12 metadata flags, Pawpularity) beside `train/<Id>.jpg`, `test.csv` (Id and
the flags) beside `test/<Id>.jpg`, and `sample_submission.csv` (Id, Pawpularity), ids 32 hex
digits as Kaggle's are. The photos are the dogs-vs-cats embedded pets (synthetic_pets.py), each
then lit, framed and spoiled as its flags say. Deterministic from one seed.

The score is a function of what is drawn, plus noise, so a model can learn it and a test can
tell one that did: a warmer photo is more popular (its colour temperature alone spans 50 points;
every photo is first balanced to grey and brought to one brightness, so the warmth, not the
background, sets its red against its blue, and the brightness and contrast jitter the
competition keeps the label under leave it alone), a near pet gains 8, a blurred photo loses
12, an occluded one 6; then N(0, 5) noise, rounded and kept in 1..100. The scores' standard
deviation, what predicting the mean scores, is about 16 by construction; a model that reads the
warmth and the framing is left with the noise's 5. The other flags are drawn at the real
train.csv's shares and change nothing. Near, Blur and Occlusion are drawn in the photo too (cropped
closer, blurred, covered) and written in the CSVs as well: a model that reads the flags beside the
photo (`input = "image_table"`) is told exactly what it would otherwise have to see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter

from competition import load_spec
from pipeline.core.files import write_atomically
from pipeline.data.synthetic import encode_jpeg
from pipeline.data.synthetic_pets import render_pet

SPEC = load_spec("petfinder-pawpularity")
# The flags and the share of the real train.csv's 9,912 photos that have each.
FLAGS = {
    "Subject Focus": 0.03, "Eyes": 0.77, "Face": 0.90, "Near": 0.86, "Action": 0.01, "Accessory": 0.07,
    "Group": 0.13, "Collage": 0.05, "Human": 0.17, "Occlusion": 0.17, "Info": 0.06, "Blur": 0.07,
}  # fmt: skip
DEFAULT_COUNTS = {"train": 600, "test": 30}
WARMTH = (-1.0, 1.0)  # the photo's colour temperature: red up and blue down by 30% at 1
MEAN_PIXEL = 110.0  # each channel's mean pixel before the warmth: the warmth is what sets red against blue


def score(warmth: float, flags: dict[str, int], rng: np.random.Generator) -> int:
    """The Pawpularity of a photo drawn with `warmth` and `flags`: what a model must learn."""
    base = 20 + 50 * (warmth - WARMTH[0]) / (WARMTH[1] - WARMTH[0])
    value = base + 8 * flags["Near"] - 12 * flags["Blur"] - 6 * flags["Occlusion"] + rng.normal(0, 5)
    return int(np.clip(round(value), 1, 100))


def render(warmth: float, flags: dict[str, int], rng: np.random.Generator) -> np.ndarray:
    """A pet photo of colour temperature `warmth`, its pet near (the middle, enlarged), blurred or
    occluded as `flags` say."""
    pet = Image.fromarray(render_pet(str(rng.choice(["cat", "dog"])), rng))
    width, height = pet.size
    if flags["Near"]:
        pet = pet.crop((width // 5, height // 5, width - width // 5, height - height // 5)).resize(
            (width, height)
        )
    if flags["Occlusion"]:
        x, y = rng.uniform(0.2, 0.5) * width, rng.uniform(0.2, 0.5) * height
        ImageDraw.Draw(pet).rectangle([x, y, x + 0.4 * width, y + 0.4 * height], fill=(90, 60, 40))
    if flags["Blur"]:
        pet = pet.filter(ImageFilter.GaussianBlur(4))
    pixels = np.asarray(pet, np.float32)
    pixels *= MEAN_PIXEL / np.maximum(pixels.mean(axis=(0, 1)), 1.0)  # grey-balanced, one brightness
    pixels *= np.array([1 + 0.3 * warmth, 1.0, 1 - 0.3 * warmth], np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _flags(rng: np.random.Generator) -> dict[str, int]:
    return {name: int(rng.random() < share) for name, share in FLAGS.items()}


def write_dataset(
    out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0, tick: Callable[[], object] = int
) -> dict[str, int]:
    """Write `train/`, `train.csv`, `test/`, `test.csv` and `sample_submission.csv` under `out_dir`
    (each CSV renamed into place when whole); returns images per split. `tick()` after each image."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    tables = {}
    for split in ("train", "test"):
        folder = out_dir / split
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for _ in range(counts[split]):
            image_id = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16))
            flags, warmth = _flags(rng), float(rng.uniform(*WARMTH))
            (folder / f"{image_id}.jpg").write_bytes(encode_jpeg(render(warmth, flags, rng)))
            rows.append({"Id": image_id, **flags, SPEC.label_column: score(warmth, flags, rng)})
            tick()
        table = pd.DataFrame(rows).sort_values("Id")
        tables[split] = table if split == "train" else table.drop(columns=[SPEC.label_column])
        write_atomically(out_dir / f"{split}.csv", lambda path, t=tables[split]: t.to_csv(path, index=False))
    sample = pd.DataFrame({SPEC.id_column: tables["test"]["Id"], SPEC.label_column: 38.0})
    write_atomically(out_dir / SPEC.sample_submission, lambda path: sample.to_csv(path, index=False))
    return {split: counts[split] for split in ("train", "test")}
