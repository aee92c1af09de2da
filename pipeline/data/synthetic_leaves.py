"""An embedded offline dataset for `cassava-leaf-disease-classification`, in Kaggle's layout.

`train_images/<id>.jpg` beside `train.csv` (`image_id,label`, sorted as Kaggle sorts it: as
strings), `test_images/<id>.jpg` and `sample_submission.csv` (`image_id,label`). Photos are 4:3
like the real 800x600 ones, smaller. The classes keep the real data's imbalance (Cassava Mosaic
Disease is 61% of train). Deterministic from one seed.

A leaf is a palmate cassava leaf (five to seven lobes) on soil and grass, at varied size, angle
and light. Each disease shows as its real signs do, at a severity drawn per leaf, so a mild case
looks nearly healthy:
- bacterial blight (CBB): angular dark brown spots and browned, wilting lobe tips;
- brown streak (CBSD): yellow-brown blotches along the veins;
- green mottle (CGM): many small pale spots, a paler leaf;
- mosaic (CMD): yellow-green mosaic patches and narrowed, twisted lobes;
- healthy: an even green.
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter

from competition import load_spec
from pipeline.core.files import write_atomically
from pipeline.data.synthetic import encode_jpeg
from pipeline.formats.base import layout_of

SPEC = load_spec("cassava")  # folders, columns and classes
CBB, CBSD, CGM, CMD, HEALTHY = range(5)
# The real train.csv's shares (1,087 / 2,189 / 2,386 / 13,158 / 2,577 of 21,397).
SHARES = np.array([1087, 2189, 2386, 13158, 2577]) / 21397
DEFAULT_COUNTS = {"train": 800, "test": 40}
WIDTH, HEIGHT = 224, 168


def _colour(h: float, s: float, v: float) -> tuple[int, int, int]:
    return tuple(int(c * 255) for c in colorsys.hsv_to_rgb(h % 1.0, min(max(s, 0), 1), min(max(v, 0), 1)))


def _ground(rng: np.random.Generator) -> Image.Image:
    """Soil and grass: a blurred blend of brown and green blobs."""
    image = Image.new("RGB", (WIDTH, HEIGHT), _colour(rng.uniform(0.06, 0.12), 0.45, rng.uniform(0.3, 0.5)))
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x, y, r = rng.uniform(0, WIDTH), rng.uniform(0, HEIGHT), rng.uniform(4, 24)
        hue = rng.uniform(0.06, 0.12) if rng.random() < 0.6 else rng.uniform(0.2, 0.3)
        draw.ellipse(
            [x - r, y - r, x + r, y + r], fill=_colour(hue, rng.uniform(0.3, 0.6), rng.uniform(0.2, 0.55))
        )
    return image.filter(ImageFilter.GaussianBlur(3))


def _lobe(cx, cy, angle, length, width, bend: float = 0.0) -> list[tuple[float, float]]:
    """A lanceolate lobe from the leaf's centre: a pointed ellipse along `angle`, bent by `bend`."""
    points = []
    for t in np.linspace(0, 2 * math.pi, 28):
        along = (1 - math.cos(t)) / 2 * length  # 0 at the base, `length` at the tip
        across = math.sin(t) * width * math.sin(math.pi * along / length) ** 0.8
        a = angle + bend * along / length
        points.append(
            (cx + along * math.cos(a) - across * math.sin(a), cy + along * math.sin(a) + across * math.cos(a))
        )
    return points


def _on_lobe(rng, cx, cy, angle, length, where=(0.2, 0.9)) -> tuple[float, float]:
    along = rng.uniform(*where) * length
    offset = rng.normal(0, length * 0.05)
    return cx + along * math.cos(angle) - offset * math.sin(angle), cy + along * math.sin(
        angle
    ) + offset * math.cos(angle)


def render_leaf(label: int, rng: np.random.Generator) -> np.ndarray:
    """One photo of a leaf of class `label` (uint8, HEIGHT x WIDTH x 3)."""
    image = _ground(rng)
    draw = ImageDraw.Draw(image)
    severity = rng.uniform(0.05, 1.0)  # a mild case shows one or two signs: nearly healthy
    cx, cy = rng.uniform(0.35, 0.65) * WIDTH, rng.uniform(0.4, 0.7) * HEIGHT
    lobes, size = int(rng.integers(5, 8)), rng.uniform(0.32, 0.5) * HEIGHT
    hue, sat, val = rng.uniform(0.25, 0.33), rng.uniform(0.55, 0.8), rng.uniform(0.45, 0.7)
    if label == CGM:
        sat, val = sat - 0.2 * severity, val + 0.1 * severity
    green = _colour(hue, sat, val)
    start, spread = rng.uniform(0, 2 * math.pi), rng.uniform(0.8, 1.2) * math.pi * 1.5
    shape = []
    for k in range(lobes):
        angle = start + spread * k / (lobes - 1)
        length = size * rng.uniform(0.75, 1.1) * (1 - 0.3 * abs(k - (lobes - 1) / 2) / lobes)
        width = length * rng.uniform(0.16, 0.22)
        bend = 0.0
        if label == CMD:  # mosaic-distorted lobes: narrow and twisted
            width *= 1 - 0.45 * severity
            bend = rng.normal(0, 0.5 * severity)
        shape.append((angle, length))
        draw.polygon(_lobe(cx, cy, angle, length, width, bend), fill=green)
        vein = _colour(hue, sat * 0.6, val + 0.15)
        draw.line(
            [(cx, cy), (cx + length * 0.9 * math.cos(angle), cy + length * 0.9 * math.sin(angle))],
            fill=vein,
            width=1,
        )
    _disease(draw, label, severity, shape, cx, cy, hue, rng)
    light = rng.uniform(0.75, 1.2)
    pixels = np.asarray(image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9))), np.float32) * light
    pixels += rng.normal(0, 4, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _disease(draw, label, severity, shape, cx, cy, hue, rng) -> None:
    spots = int(1 + 25 * severity)
    for _ in range(spots if label != HEALTHY else 0):
        angle, length = shape[int(rng.integers(len(shape)))]
        x, y = _on_lobe(rng, cx, cy, angle, length)
        if label == CBB:  # angular dark brown, water-soaked spots
            r = rng.uniform(1.5, 4)
            corners = [(x + r * math.cos(a), y + r * math.sin(a)) for a in rng.uniform(0, 2 * math.pi, 4)]
            draw.polygon(corners, fill=_colour(0.07, 0.7, rng.uniform(0.15, 0.3)))
        elif label == CBSD:  # yellow-brown blotches along the vein
            x, y = _on_lobe(rng, cx, cy, angle, length)
            r = rng.uniform(2, 5)
            draw.ellipse(
                [x - r * 1.6, y - r, x + r * 1.6, y + r], fill=_colour(0.1, 0.75, rng.uniform(0.5, 0.7))
            )
        elif label == CGM:  # small pale spots
            r = rng.uniform(0.8, 2)
            draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(hue, 0.2, 0.9))
        elif label == CMD:  # yellow-green mosaic patches
            r = rng.uniform(2.5, 6)
            draw.ellipse(
                [x - r, y - r * 0.7, x + r, y + r * 0.7], fill=_colour(0.17, 0.75, rng.uniform(0.7, 0.9))
            )
    if label == CBB:  # wilting, browned lobe tips
        for angle, length in shape:
            if rng.random() < severity:
                x, y = _on_lobe(rng, cx, cy, angle, length, where=(0.85, 0.95))
                r = length * 0.12
                draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(0.08, 0.6, 0.35))


def write_dataset(
    out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0, tick: Callable[[], object] = int
) -> dict[str, int]:
    """Write `train_images/`, `train.csv`, `test_images/` and `sample_submission.csv` under
    `out_dir` (each CSV renamed into place when whole); returns images per split. `tick()` after
    each image drawn (pipeline/core/progress.py counts them)."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    splits = layout_of(SPEC).splits
    ids = np.unique(rng.integers(10**8, 5 * 10**9, 2 * (counts["train"] + counts["test"])))
    ids = rng.permutation(ids)[: counts["train"] + counts["test"]]  # distinct, as Kaggle's are
    labels = rng.choice(len(SHARES), counts["train"], p=SHARES)
    labels[: len(SHARES)] = np.arange(len(SHARES))  # every class at least once, however small
    names = {}
    for split, count, offset in (("train", counts["train"], 0), ("test", counts["test"], counts["train"])):
        folder = out_dir / splits[split].folder
        folder.mkdir(parents=True, exist_ok=True)
        names[split] = [f"{i}.jpg" for i in ids[offset : offset + count]]
        for k, name in enumerate(names[split]):
            label = int(labels[k]) if split == "train" else int(rng.choice(len(SHARES), p=SHARES))
            (folder / name).write_bytes(encode_jpeg(render_leaf(label, rng)))
            tick()
    train = pd.DataFrame({"image_id": names["train"], "label": labels}).sort_values("image_id")
    write_atomically(out_dir / splits["train"].labels, lambda path: train.to_csv(path, index=False))
    sample = pd.DataFrame({SPEC.id_column: sorted(names["test"]), SPEC.label_column: 4})
    write_atomically(out_dir / SPEC.sample_submission, lambda path: sample.to_csv(path, index=False))
    return {"train": counts["train"], "test": counts["test"]}
