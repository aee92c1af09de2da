"""An embedded offline dataset for `dogs-vs-cats-redux-kernels-edition`, in Kaggle's layout.

`train.zip` unpacks to `train/cat.<n>.jpg` and `train/dog.<n>.jpg` (the label is in the name),
`test.zip` to `test/<id>.jpg` with ids from 1, and `sample_submission.csv` is `id,label` (label:
P(dog)). Photos differ in size and shape, as the real ones do. Deterministic from one seed.

A pet is a face: cats have pointed ears, slit pupils, whiskers and a short muzzle; dogs have
drooping or rounded ears, round pupils, a long pale muzzle and now and then a tongue. About one
animal in five borrows the other kind's ears, and fur colours, pose, scale, lighting, clutter and
occlusion are shared, so no single trait or colour gives the answer.
"""

from __future__ import annotations

import colorsys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter

from competition import load_spec
from pipeline.core.files import write_atomically, write_zip
from pipeline.data.synthetic import background, encode_jpeg
from pipeline.formats.image_folder import image_folder_of

SPEC = load_spec("dogs-vs-cats")  # the file names, classes and submission columns
KINDS = SPEC.classes  # cat 0, dog 1: the metric is the log loss of P(dog)
DEFAULT_COUNTS = {"train": 1000, "test": 500}
_FUR = [
    (0.08, 0.6, 0.55),
    (0.07, 0.3, 0.85),
    (0.0, 0.0, 0.15),
    (0.1, 0.5, 0.35),
    (0.0, 0.0, 0.9),
    (0.08, 0.2, 0.6),
]


def _rgb(hsv: tuple[float, float, float], rng: np.random.Generator) -> tuple[int, int, int]:
    """An RGB colour near `hsv`, its saturation and value jittered."""
    h, s, v = hsv
    s, v = (float(np.clip(x + rng.normal(0, d), 0, 1)) for x, d in ((s, 0.05), (v, 0.06)))
    return tuple(int(c * 255) for c in colorsys.hsv_to_rgb(h, s, v))


def _ears(draw, kind: str, cx, cy, r, fur, rng) -> None:
    pointed = (kind == "cat") != (rng.random() < 0.2)  # one in five borrows the other kind's ears
    for side in (-1, 1):
        x = cx + side * r * rng.uniform(0.45, 0.7)
        if pointed:
            tip = (x + side * r * rng.uniform(0.0, 0.3), cy - r * rng.uniform(1.2, 1.6))
            draw.polygon([(x - r * 0.35, cy - r * 0.5), (x + r * 0.35, cy - r * 0.6), tip], fill=fur)
        else:  # a drooping ear down the side of the head
            top, length = cy - r * rng.uniform(0.5, 0.8), r * rng.uniform(0.9, 1.4)
            left, right = sorted((x + side * r * 0.15, x + side * r * 0.7))
            draw.ellipse([left, top, right, top + length], fill=tuple(int(c * 0.8) for c in fur))


def _face(draw, kind: str, cx, cy, r, fur, rng) -> None:
    muzzle = tuple(min(255, int(c * 1.25 + 30)) for c in fur)
    long = kind == "dog"
    mw, mh = r * rng.uniform(0.45, 0.6), r * (rng.uniform(0.45, 0.65) if long else rng.uniform(0.25, 0.35))
    my = cy + r * (0.35 if long else 0.3)
    draw.ellipse([cx - mw, my - mh * 0.6, cx + mw, my + mh], fill=muzzle)
    nose = r * 0.12
    draw.polygon(
        [(cx - nose, my - mh * 0.4), (cx + nose, my - mh * 0.4), (cx, my - mh * 0.1)], fill=(40, 25, 25)
    )
    if long and rng.random() < 0.4:  # a tongue
        draw.ellipse([cx - r * 0.12, my + mh * 0.4, cx + r * 0.12, my + mh * 1.1], fill=(220, 110, 130))
    iris = _rgb(rng.choice([(0.15, 0.8, 0.7), (0.3, 0.7, 0.6), (0.08, 0.7, 0.35)]), rng)
    for side in (-1, 1):
        ex, ey, er = cx + side * r * 0.35, cy - r * 0.1, r * rng.uniform(0.11, 0.15)
        draw.ellipse([ex - er, ey - er, ex + er, ey + er], fill=iris)
        pw = er * (0.25 if kind == "cat" else 0.55)  # slit or round pupils
        draw.ellipse([ex - pw, ey - er * 0.9, ex + pw, ey + er * 0.9], fill=(10, 10, 10))
    if kind == "cat" and rng.random() < 0.85:  # whiskers
        for side in (-1, 1):
            for k in range(3):
                start = (cx + side * mw * 0.6, my + k * r * 0.06)
                end = (cx + side * r * rng.uniform(1.0, 1.3), my - r * 0.1 + k * r * 0.15)
                draw.line([start, end], fill=(235, 235, 235), width=max(1, int(r * 0.02)))


def render_pet(kind: str, rng: np.random.Generator) -> np.ndarray:
    """One photo-like uint8 image of a cat or dog face, 150-320 px a side."""
    size = 256
    pil = Image.fromarray((np.clip(background(rng, size), 0, 1) * 255).astype(np.uint8))
    face = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(face)
    fur = _rgb(_FUR[int(rng.integers(len(_FUR)))], rng)
    r = size * rng.uniform(0.18, 0.3)
    cx, cy = rng.uniform(r * 1.3, size - r * 1.3), rng.uniform(r * 1.6, size - r * 1.2)
    _ears(draw, kind, cx, cy, r, fur, rng)
    head_w, head_h = r * (rng.uniform(0.95, 1.1) if kind == "cat" else rng.uniform(0.85, 1.0)), r
    draw.ellipse([cx - head_w, cy - head_h, cx + head_w, cy + head_h * 1.05], fill=fur)
    _face(draw, kind, cx, cy, r, fur, rng)
    face = face.rotate(rng.normal(0, 12), resample=Image.BICUBIC, center=(cx, cy))
    pil.paste(face, (0, 0), face)
    if rng.random() < 0.3:  # something in front: a hand, a cushion, a leaf
        ImageDraw.Draw(pil).rectangle(
            list(_box(rng, size)),
            fill=_rgb((rng.uniform(0, 1), rng.uniform(0, 0.6), rng.uniform(0.2, 0.9)), rng),
        )
    pil = pil.filter(ImageFilter.GaussianBlur(rng.uniform(0.0, 1.2)))
    width, height = (int(v) for v in rng.integers(150, 321, 2))
    pixels = np.asarray(pil.resize((width, height), Image.BILINEAR), np.float32)
    pixels = pixels * rng.uniform(0.75, 1.15) + rng.normal(0, rng.uniform(0, 6), (*pixels.shape[:2], 1))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _box(rng: np.random.Generator, size: int) -> tuple[float, float, float, float]:
    x, y = rng.uniform(0, size * 0.8, 2)
    return x, y, x + size * rng.uniform(0.1, 0.3), y + size * rng.uniform(0.1, 0.3)


def write_dataset(
    out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0, tick: Callable[[], object] = int
) -> dict[str, int]:
    """Write `train.zip`, `test.zip` and `sample_submission.csv` under `out_dir`, as the
    competition's download holds them (each file renamed into place when whole); returns images
    per split. Train is half cats, half dogs, numbered per kind from 0 as Kaggle's are. `tick()`
    after each image drawn (pipeline/core/progress.py counts them)."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    folders = image_folder_of(SPEC).splits
    numbers = dict.fromkeys(KINDS, 0)
    train = []
    for label in rng.permutation(np.arange(counts["train"]) % 2):
        kind = KINDS[int(label)]
        name = folders["train"].member(label=kind, number=numbers[kind])
        train.append((name, encode_jpeg(render_pet(kind, rng))))
        tick()
        numbers[kind] += 1
    test = []
    for n in range(1, counts["test"] + 1):
        test.append((folders["test"].member(id=n), encode_jpeg(render_pet(KINDS[int(rng.integers(2))], rng))))
        tick()
    for split, members in (("train", train), ("test", test)):
        write_zip(out_dir / folders[split].archive, members)
    sample = pd.DataFrame({SPEC.id_column: range(1, counts["test"] + 1), SPEC.label_column: 0.5})
    write_atomically(out_dir / SPEC.sample_submission, lambda path: sample.to_csv(path, index=False))
    return {"train": len(train), "test": len(test)}
