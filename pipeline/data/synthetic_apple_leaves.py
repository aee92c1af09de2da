"""An embedded offline dataset for `plant-pathology-2021-fgvc8`, in Kaggle's layout.

`train_images/<id>.jpg` beside `train.csv` (`image,labels`, the labels space-separated, sorted by
image as Kaggle's is), `test_images/<id>.jpg` and `sample_submission.csv` (every row `healthy`,
as Kaggle's). Photos are 3:2 like the real 4000 x 2672 ones, smaller. The twelve label strings
keep the real train.csv's shares (docs/competitions/plant-pathology-2021.md): 7% of the leaves
carry two or three labels. Deterministic from one seed.

A leaf is an ovate apple leaf with a midrib and side veins on grass and soil, at varied size,
angle and light. Each disease it has shows as its real signs do, all on the same leaf, so a
leaf with scab and frog eye leaf spot shows both:
- scab: olive-brown, velvety, irregular blotches;
- rust: bright orange spots with a red rim;
- frog eye leaf spot: round tan spots with a dark purple margin;
- powdery mildew: white powdery patches, a paler leaf;
- complex: browned, dying margins and a yellowed leaf;
- healthy: an even green.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import ImageDraw, ImageFilter

from competition import load_spec
from pipeline.core.files import write_atomically
from pipeline.data.synthetic import encode_jpeg
from pipeline.data.synthetic_leaves import _colour, _ground
from pipeline.formats.base import layout_of

SPEC = load_spec("plant-pathology-2021")  # folders, columns and labels
# The real train.csv's twelve label strings and their rows (of 18,632).
STRINGS = {
    "scab": 4826,
    "healthy": 4624,
    "frog_eye_leaf_spot": 3181,
    "rust": 1860,
    "complex": 1602,
    "powdery_mildew": 1184,
    "scab frog_eye_leaf_spot": 686,
    "scab frog_eye_leaf_spot complex": 200,
    "frog_eye_leaf_spot complex": 165,
    "rust frog_eye_leaf_spot": 120,
    "rust complex": 97,
    "powdery_mildew complex": 87,
}
SHARES = np.array(list(STRINGS.values())) / sum(STRINGS.values())
DEFAULT_COUNTS = {"train": 600, "test": 30}
WIDTH, HEIGHT = 240, 160


def _outline(cx, cy, angle, length, width) -> list[tuple[float, float]]:
    """An ovate leaf with a pointed tip and a finely toothed edge, from its stalk at (cx, cy)."""
    points = []
    for t in np.linspace(0, 2 * math.pi, 72, endpoint=False):
        along = (1 - math.cos(t)) / 2 * length
        across = math.sin(t) * _half_width(along, length, width) * (1 + 0.03 * math.sin(40 * t))  # teeth
        points.append(_at(cx, cy, angle, along, across))
    return points


def _half_width(along: float, length: float, width: float) -> float:
    """The blade's half-width `along` its axis: widest below the middle, narrowing to the tip."""
    rise = max(0.0, math.sin(math.pi * along / length))  # never below 0: a negative base ** 0.7 is complex
    return width * rise**0.7 * (1.15 - 0.3 * along / length)


def _at(cx, cy, angle, along, across) -> tuple[float, float]:
    """The point `along` the leaf's axis from its stalk and `across` it."""
    x = cx + along * math.cos(angle) - across * math.sin(angle)
    return x, cy + along * math.sin(angle) + across * math.cos(angle)


def _on_leaf(rng, cx, cy, angle, length, width, edge: bool = False) -> tuple[float, float]:
    """A point on the blade (near its margin with `edge`)."""
    along = rng.uniform(0.15, 0.9) * length
    share = rng.choice([-1, 1]) * rng.uniform(0.75, 0.95) if edge else rng.uniform(-0.8, 0.8)
    return _at(cx, cy, angle, along, share * _half_width(along, length, width))


def render_leaf(labels: set[str], rng: np.random.Generator) -> np.ndarray:
    """One photo of a leaf with `labels` (uint8, HEIGHT x WIDTH x 3)."""
    image = _ground(rng).resize((WIDTH, HEIGHT))
    draw = ImageDraw.Draw(image)
    angle = rng.uniform(0, 2 * math.pi)
    length = rng.uniform(0.75, 0.95) * HEIGHT
    width = length * rng.uniform(0.28, 0.36)
    cx = WIDTH / 2 - 0.5 * length * math.cos(angle) + rng.normal(0, 6)
    cy = HEIGHT / 2 - 0.5 * length * math.sin(angle) + rng.normal(0, 6)
    hue, sat, val = rng.uniform(0.24, 0.32), rng.uniform(0.55, 0.8), rng.uniform(0.4, 0.62)
    if "complex" in labels:  # a yellowed leaf
        hue, sat = hue - 0.07, sat - 0.1
    if "powdery_mildew" in labels:  # a paler leaf
        sat, val = sat - 0.2, val + 0.12
    outline = _outline(cx, cy, angle, length, width)
    draw.polygon(outline, fill=_colour(hue, sat, val))
    vein = _colour(hue, sat * 0.5, val + 0.18)
    tip = (cx + length * math.cos(angle), cy + length * math.sin(angle))
    draw.line([(cx, cy), tip], fill=vein, width=2)
    for k in range(1, 7):
        a = k / 7 * length
        base = (cx + a * math.cos(angle), cy + a * math.sin(angle))
        for side in (-1, 1):
            b = angle + side * 0.9
            draw.line(
                [base, (base[0] + 0.35 * width * math.cos(b), base[1] + 0.35 * width * math.sin(b))],
                fill=vein,
            )
    blade = (cx, cy, angle, length, width)
    for label in sorted(labels):
        _SIGNS.get(label, lambda *_: None)(draw, rng, blade, outline)
    light = rng.uniform(0.8, 1.15)
    pixels = np.asarray(image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.8))), np.float32) * light
    pixels += rng.normal(0, 4, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _scab(draw, rng, blade, outline) -> None:
    for _ in range(int(rng.integers(5, 14))):
        x, y = _on_leaf(rng, *blade)
        r = rng.uniform(2.5, 6)
        corners = [(x + r * rng.uniform(0.6, 1.2) * math.cos(a), y + r * rng.uniform(0.6, 1.2) * math.sin(a))
                   for a in np.sort(rng.uniform(0, 2 * math.pi, 7))]  # fmt: skip
        draw.polygon(corners, fill=_colour(rng.uniform(0.12, 0.17), 0.6, rng.uniform(0.2, 0.35)))


def _rust(draw, rng, blade, outline) -> None:
    for _ in range(int(rng.integers(3, 10))):
        x, y = _on_leaf(rng, *blade)
        r = rng.uniform(2.5, 5)
        draw.ellipse([x - r - 1.5, y - r - 1.5, x + r + 1.5, y + r + 1.5], fill=_colour(0.0, 0.8, 0.6))
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(rng.uniform(0.06, 0.1), 0.9, 0.95))


def _frog_eye(draw, rng, blade, outline) -> None:
    for _ in range(int(rng.integers(4, 12))):
        x, y = _on_leaf(rng, *blade)
        r = rng.uniform(2.5, 4.5)
        draw.ellipse([x - r - 1.5, y - r - 1.5, x + r + 1.5, y + r + 1.5], fill=_colour(0.85, 0.6, 0.3))
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(0.1, 0.35, rng.uniform(0.65, 0.8)))


def _mildew(draw, rng, blade, outline) -> None:
    for _ in range(int(rng.integers(4, 9))):
        x, y = _on_leaf(rng, *blade)
        r = rng.uniform(5, 11)
        draw.ellipse(
            [x - r, y - r * 0.7, x + r, y + r * 0.7], fill=_colour(0.2, 0.05, rng.uniform(0.85, 0.97))
        )


def _complex(draw, rng, blade, outline) -> None:
    for _ in range(int(rng.integers(4, 9))):
        x, y = _on_leaf(rng, *blade, edge=True)
        r = rng.uniform(4, 9)
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(0.07, 0.65, rng.uniform(0.25, 0.4)))


_SIGNS = {
    "scab": _scab,
    "rust": _rust,
    "frog_eye_leaf_spot": _frog_eye,
    "powdery_mildew": _mildew,
    "complex": _complex,
}


def write_dataset(
    out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0, tick: Callable[[], object] = int
) -> dict[str, int]:
    """Write `train_images/`, `train.csv`, `test_images/` and `sample_submission.csv` under
    `out_dir` (each CSV renamed into place when whole); returns images per split. `tick()` after
    each image drawn (pipeline/core/progress.py counts them)."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    splits = layout_of(SPEC).splits
    total = counts["train"] + counts["test"]
    ids = [f"{n:016x}.jpg" for n in rng.integers(2**60, 2**63 - 1, 2 * total, dtype=np.int64)]
    ids = list(dict.fromkeys(ids))[:total]  # distinct, as Kaggle's are
    strings = list(STRINGS)
    drawn = rng.choice(len(strings), counts["train"], p=SHARES)
    first = min(len(strings), len(drawn))
    drawn[:first] = np.arange(first)  # every string at least once, however small (room allowing)
    names = {}
    for split, count, offset in (("train", counts["train"], 0), ("test", counts["test"], counts["train"])):
        folder = out_dir / splits[split].folder
        folder.mkdir(parents=True, exist_ok=True)
        names[split] = ids[offset : offset + count]
        for k, name in enumerate(names[split]):
            string = strings[drawn[k] if split == "train" else rng.choice(len(strings), p=SHARES)]
            (folder / name).write_bytes(encode_jpeg(render_leaf(set(string.split()), rng)))
            tick()
    train = pd.DataFrame({"image": names["train"], "labels": [strings[d] for d in drawn]}).sort_values(
        "image"
    )
    write_atomically(out_dir / splits["train"].labels, lambda path: train.to_csv(path, index=False))
    sample = pd.DataFrame({SPEC.id_column: sorted(names["test"]), SPEC.label_column: "healthy"})
    write_atomically(out_dir / SPEC.sample_submission, lambda path: sample.to_csv(path, index=False))
    return {"train": counts["train"], "test": counts["test"]}
