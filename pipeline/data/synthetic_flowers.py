"""Procedurally drawn flowers: each class's traits and one photo-like image of them.

Every class has its own traits (petal count, petal shape, colours, centre, layering,
patterns). Classes come in "genera" of a few "species" that share shape and petal
count and differ in one or two traits, so fine-grained confusions exist as in the
real data. Each image varies pose, tilt, scale, position, lighting, background
clutter, occlusion, noise and blur. Everything is deterministic from the generator passed in.

numpy and Pillow only (no TensorFlow), so rendering workers start fast.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

SHAPES = ("elliptic", "pointed", "broad", "notched", "fringed", "wavy")
CENTRE_STYLES = ("disc", "dotted", "stamens")
# Flower hues people actually see: reds, oranges, yellows, pinks, purples, blues, whites.
_HUES = (0.0, 0.03, 0.08, 0.13, 0.16, 0.55, 0.62, 0.7, 0.76, 0.83, 0.9, 0.95)


@dataclass(frozen=True)
class FlowerTraits:
    """What makes one class look like itself. Colours are HSV triples in [0, 1]."""

    petals: int
    layers: int
    shape: str
    length: float  # outer petal length, as a fraction of the flower radius
    width: float  # fraction of its angular sector a petal fills (<1 leaves gaps)
    petal_hsv: tuple[float, float, float]
    tip_hsv: tuple[float, float, float] | None  # colour the petal fades to towards its tip
    centre_hsv: tuple[float, float, float]
    centre_size: float
    centre_style: str
    veins: bool
    spots: bool


# ----------------------------------------------------------------------------- traits


def _flower_colour(rng: np.random.Generator) -> tuple[float, float, float]:
    if rng.random() < 0.12:  # white and cream flowers
        return (float(rng.choice(_HUES)), float(rng.uniform(0.03, 0.15)), float(rng.uniform(0.9, 1.0)))
    return (float(rng.choice(_HUES)), float(rng.uniform(0.55, 0.95)), float(rng.uniform(0.7, 1.0)))


def _genus(rng: np.random.Generator) -> FlowerTraits:
    petals = int(rng.choice([3, 4, 5, 5, 6, 6, 7, 8, 10, 12, 14, 18]))
    shape = str(rng.choice(SHAPES))
    # Many-petalled flowers get thin, ray-like petals (daisies); few-petalled ones broad petals.
    width = float(rng.uniform(0.35, 0.6) if petals >= 12 else rng.uniform(0.6, 1.0))
    centre_hue = float(rng.choice([0.1, 0.13, 0.08, 0.05, 0.3]))
    return FlowerTraits(
        petals=petals,
        layers=int(rng.choice([1, 1, 2, 2, 3])),
        shape=shape,
        length=float(rng.uniform(0.8, 1.0)),
        width=width,
        petal_hsv=_flower_colour(rng),
        tip_hsv=None,
        centre_hsv=(centre_hue, float(rng.uniform(0.5, 0.9)), float(rng.uniform(0.25, 0.9))),
        centre_size=float(rng.uniform(0.1, 0.3)),
        centre_style=str(rng.choice(CENTRE_STYLES)),
        veins=bool(rng.random() < 0.3),
        spots=False,
    )


def _mutate(base: FlowerTraits, trait: str, rng: np.random.Generator) -> FlowerTraits:
    """A sister species: the genus with one trait changed clearly enough to be learnable."""
    t = asdict(base)
    if trait == "hue":
        h, s, v = base.petal_hsv
        far = [c for c in _HUES if min(abs(c - h), 1 - abs(c - h)) > 0.1]
        t["petal_hsv"] = (float(rng.choice(far)), max(s, 0.5), v)
    elif trait == "tip":
        t["tip_hsv"] = _flower_colour(rng) if base.tip_hsv is None else None
    elif trait == "centre":
        t["centre_hsv"] = (float(rng.uniform(0, 1)), 0.8, float(rng.choice([0.15, 0.95])))
        t["centre_style"] = str(rng.choice([c for c in CENTRE_STYLES if c != base.centre_style]))
    elif trait == "pattern":
        t["spots"], t["veins"] = not base.spots, not base.veins
    elif trait == "shape":
        t["shape"] = str(rng.choice([s for s in SHAPES if s != base.shape]))
        t["length"] = float(np.clip(base.length * rng.choice([0.75, 1.25]), 0.6, 1.0))
    return FlowerTraits(**t)


@cache
def class_traits(num_classes: int, seed: int) -> tuple[FlowerTraits, ...]:
    """Traits for every class: genera of four related species, in shuffled class order.

    A genus's species are its base form, two forms that each change one trait, and one
    that changes two, so every species has a sister that differs in a single trait.
    """
    rng = np.random.default_rng([seed, 0x5EED])
    traits: list[FlowerTraits] = []
    while len(traits) < num_classes:
        genus = _genus(rng)
        changes = rng.permutation(["hue", "tip", "centre", "pattern", "shape"])
        traits += [
            genus,
            _mutate(genus, changes[0], rng),
            _mutate(genus, changes[1], rng),
            _mutate(_mutate(genus, changes[0], rng), changes[2], rng),
        ]
    order = rng.permutation(len(traits))[:num_classes]
    return tuple(traits[i] for i in order)


# ----------------------------------------------------------------------------- drawing


def _rgb(hsv: tuple[float, float, float]) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(*hsv), dtype=np.float32)


def _jitter(hsv: tuple[float, float, float], rng: np.random.Generator) -> tuple[float, float, float]:
    h, s, v = hsv
    return (
        (h + rng.normal(0, 0.012)) % 1.0,
        float(np.clip(s + rng.normal(0, 0.04), 0, 1)),
        float(np.clip(v + rng.normal(0, 0.04), 0, 1)),
    )


def _profile(shape: str, u: np.ndarray) -> np.ndarray:
    """Petal outline: radial extent (0..1) at angular position u in [-1, 1] across the petal."""
    inside = np.clip(1.0 - u * u, 0.0, 1.0)
    if shape == "pointed":
        return np.clip(1.0 - np.abs(u), 0.0, 1.0) ** 0.8
    if shape == "broad":
        return np.sqrt(np.clip(1.0 - u**4, 0.0, 1.0))
    if shape == "notched":
        return np.sqrt(inside) * (1.0 - 0.35 * np.exp(-((u / 0.22) ** 2)))
    if shape == "fringed":
        return np.sqrt(inside) * (0.9 + 0.12 * np.abs(np.sin(4.0 * math.pi * u)))
    if shape == "wavy":
        return np.sqrt(inside) * (0.92 + 0.08 * np.cos(3.0 * math.pi * u))
    return np.sqrt(inside)  # elliptic


@cache
def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel row and column coordinates (float32), shared read-only between images."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    yy.flags.writeable = xx.flags.writeable = False
    return yy, xx


def _smooth_noise(rng: np.random.Generator, size: int, cells: int, channels: int = 3) -> np.ndarray:
    """Low-frequency noise in [0, 1]: a small random grid upsampled bicubically."""
    grid = (rng.random((cells, cells, channels)) * 255).astype(np.uint8)
    planes = [Image.fromarray(grid[..., c]).resize((size, size), Image.BICUBIC) for c in range(channels)]
    return np.stack([np.asarray(p, np.float32) for p in planes], axis=-1) / 255.0


def _ellipse_mask(xx, yy, cx, cy, a, b, angle, soft) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    x, y = (xx - cx) * c + (yy - cy) * s, -(xx - cx) * s + (yy - cy) * c
    d = np.sqrt((x / a) ** 2 + (y / b) ** 2)
    return np.clip((1.0 - d) * min(a, b) / soft + 0.5, 0.0, 1.0)


def _ellipse_points(cx, cy, a, b, angle, n=24) -> list[tuple[float, float]]:
    t = np.linspace(0, 2 * math.pi, n, endpoint=False)
    c, s = math.cos(angle), math.sin(angle)
    x, y = a * np.cos(t), b * np.sin(t)
    return list(zip((cx + x * c - y * s).tolist(), (cy + x * s + y * c).tolist(), strict=True))


def _to_uint8(rgb: np.ndarray) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in np.clip(rgb * 255, 0, 255))
    return (r, g, b)


def background(rng: np.random.Generator, size: int) -> np.ndarray:
    """An out-of-focus scene: a tinted gradient, low-frequency light variation and blurred clutter."""
    scene = rng.choice(["foliage", "foliage", "sky", "soil", "grey"])
    base_hsv = {
        "foliage": (rng.uniform(0.22, 0.4), rng.uniform(0.4, 0.8), rng.uniform(0.2, 0.6)),
        "sky": (rng.uniform(0.55, 0.62), rng.uniform(0.2, 0.6), rng.uniform(0.7, 0.95)),
        "soil": (rng.uniform(0.06, 0.1), rng.uniform(0.3, 0.6), rng.uniform(0.2, 0.5)),
        "grey": (0.0, 0.0, rng.uniform(0.2, 0.8)),
    }[scene]
    top, bottom = _rgb(base_hsv), _rgb(_jitter(base_hsv, rng)) * rng.uniform(0.6, 1.0)
    t = np.linspace(0, 1, size, dtype=np.float32)[:, None, None]
    image = (top * (1 - t) + bottom * t) * np.ones((1, size, 1), np.float32)
    # Light varies mostly in brightness, a little in colour.
    light = 0.7 + 0.6 * _smooth_noise(rng, size, int(rng.integers(3, 8)), channels=1)
    image = image * light * (1 + 0.1 * (_smooth_noise(rng, size, 4) - 0.5))
    pil = Image.fromarray((np.clip(image, 0, 1) * 255).astype(np.uint8))
    # Clutter: leaves and blobs, drawn sharp and then blurred with the whole background.
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(2, 9))):
        colour = _rgb((rng.uniform(0.18, 0.42), rng.uniform(0.3, 0.9), rng.uniform(0.15, 0.7)))
        if rng.random() < 0.15:  # an odd patch of colour: petals of something else far away
            colour = _rgb((rng.uniform(0, 1), rng.uniform(0.2, 0.7), rng.uniform(0.5, 0.9)))
        cx, cy = rng.uniform(0, size, 2)
        a = size * rng.uniform(0.05, 0.3)
        points = _ellipse_points(cx, cy, a, a * rng.uniform(0.2, 0.8), rng.uniform(0, math.pi))
        draw.polygon(points, fill=_to_uint8(colour))
    pil = pil.filter(ImageFilter.GaussianBlur(size * rng.uniform(0.01, 0.04)))
    return np.asarray(pil, np.float32) / 255.0


def _flower(traits, rng, size, image) -> tuple[np.ndarray, float, float, float]:
    """Composite one flower onto `image`; returns the image and the flower's centre and radius.

    Work is done only inside the flower's bounding box, and layers are accumulated as
    scalar maps (coverage, position along the petal, shade) so the three-channel colour
    work happens once, not once per layer.
    """
    radius = size * rng.uniform(0.26, 0.44)
    # Python floats: a numpy float64 centre would make every array below float64 (NumPy 2's
    # promotion), a fifth of the drawing's time (make bench-fetch: 67 s against 55 s).
    cx = float(size * (0.5 + np.clip(rng.normal(0, 0.08), -0.15, 0.15)))
    cy = float(size * (0.5 + np.clip(rng.normal(0, 0.08), -0.15, 0.15)))
    reach = radius * 1.12 + 2  # petals reach at most 1.08 radius; stamens stay inside
    x0, x1 = max(0, int(cx - reach)), min(size, math.ceil(cx + reach))
    y0, y1 = max(0, int(cy - reach)), min(size, math.ceil(cy + reach))
    yy, xx = _grid(size)
    yy, xx = yy[y0:y1, x0:x1], xx[y0:y1, x0:x1]
    whole, image = image, image[y0:y1, x0:x1]
    # Pose: in-plane rotation plus a tilt that squashes the flower along a random axis.
    tilt_axis, tilt = rng.uniform(0, math.pi), rng.uniform(0.62, 1.0)
    c, s = math.cos(tilt_axis), math.sin(tilt_axis)
    x, y = (xx - cx) * c + (yy - cy) * s, (-(xx - cx) * s + (yy - cy) * c) / tilt
    r, theta = np.hypot(x, y), np.arctan2(y, x)
    soft = max(0.6, size / 256)

    sector = 2 * math.pi / traits.petals
    rotation = rng.uniform(0, sector)
    length = traits.length * rng.uniform(0.92, 1.08)
    coverage = np.zeros_like(r)
    along = np.zeros_like(r)
    shade = np.ones_like(r)
    spotted = np.zeros_like(r)
    for layer in range(traits.layers):  # outer layer first, inner layers on top
        offset = rotation + layer * sector / 2
        local = np.mod(theta - offset + sector / 2, sector) - sector / 2
        u = np.clip(local / (sector / 2 * traits.width), -1, 1)
        extent = radius * length * (1 - 0.27 * layer) * _profile(traits.shape, u)
        extent = np.where(np.abs(u) < 1, extent, 0.0)
        mask = np.clip((extent - r) / soft + 0.5, 0, 1)
        layer_along = np.clip(r / np.maximum(extent, 1e-3), 0, 1)
        layer_shade = (0.72 + 0.28 * (1 - u * u)) * (1.0 + 0.08 * layer)  # darker edges separate petals
        if traits.veins:
            layer_shade = layer_shade * (1 - 0.3 * np.exp(-((u / 0.08) ** 2)) * (layer_along > 0.15))
        coverage = coverage + mask * (1 - coverage)
        along = along + mask * (layer_along - along)
        shade = shade + mask * (layer_shade - shade)
        if traits.spots:
            dots = (np.sin(r * 9.0 / radius * math.pi) * np.sin(u * 3 * math.pi) > 0.75) & (layer_along < 0.6)
            spotted = spotted + mask * (dots - spotted)

    petal_rgb = _rgb(_jitter(traits.petal_hsv, rng))
    tip_rgb = _rgb(_jitter(traits.tip_hsv, rng)) if traits.tip_hsv else petal_rgb
    fade = (along**1.5)[..., None]
    colour = (petal_rgb + (tip_rgb - petal_rgb) * fade) * (shade * (1 - 0.7 * spotted))[..., None]
    image = image + coverage[..., None] * (np.clip(colour, 0, 1) - image)

    centre_r = radius * traits.centre_size * rng.uniform(0.9, 1.1)
    centre_rgb = _rgb(_jitter(traits.centre_hsv, rng))
    if traits.centre_style == "stamens":
        filaments = (np.cos(theta * 3 * traits.petals + rotation) > 0.8) & (r < centre_r * 1.8)
        image = np.where(filaments[..., None], np.clip(centre_rgb * 1.3 + 0.15, 0, 1), image)
    centre_mask = np.clip((centre_r - r) / soft + 0.5, 0, 1)[..., None]
    texture = 0.75 + 0.25 * (r / max(centre_r, 1e-3))
    if traits.centre_style == "dotted":
        texture = texture * (0.8 + 0.2 * (np.sin(x * 20 / radius) * np.sin(y * 20 / radius)))
    image = image + centre_mask * (np.clip(centre_rgb * texture[..., None], 0, 1) - image)
    whole = whole.copy()
    whole[y0:y1, x0:x1] = image
    return whole, cx, cy, radius


def render_image(traits: FlowerTraits, rng: np.random.Generator, size: int) -> np.ndarray:
    """One photo-like uint8 [size, size, 3] image of a flower with these traits."""
    yy, xx = _grid(size)
    image = background(rng, size)
    # A stem in the lower half, drawn before the flower so the flower covers its top.
    stem_x, lean, half = size * rng.uniform(0.3, 0.7), rng.uniform(-0.3, 0.3), size // 2
    lower_x, lower_y = xx[half:], yy[half:]
    stem = np.clip(size * 0.018 - np.abs(lower_x - stem_x - (lower_y - size) * lean), 0, 1)[..., None]
    image[half:] += stem * (_rgb((0.3, 0.7, 0.4)) - image[half:])
    image, cx, cy, radius = _flower(traits, rng, size, image)
    if rng.random() < 0.3:  # occlusion: a leaf in front of part of the flower
        angle = rng.uniform(0, 2 * math.pi)
        lx, ly = cx + math.cos(angle) * radius * 0.9, cy + math.sin(angle) * radius * 0.9
        leaf = _ellipse_mask(xx, yy, lx, ly, radius * 0.55, radius * 0.22, angle + rng.normal(0, 0.5), 1.0)
        leaf_rgb = _rgb((rng.uniform(0.22, 0.36), rng.uniform(0.5, 0.9), rng.uniform(0.3, 0.7)))
        image = image * (1 - leaf[..., None]) + leaf_rgb * leaf[..., None]
    # Lighting: exposure, a colour cast and a directional gradient.
    direction, strength = rng.uniform(0, 2 * math.pi), rng.uniform(0, 0.4)
    ramp = (np.arange(size, dtype=np.float32) - size / 2) / size * strength
    light = 1 + ramp[None, :] * math.cos(direction) + ramp[:, None] * math.sin(direction)  # outer sum
    cast = rng.uniform(0.75, 1.15) * (1 + rng.normal(0, 0.05, 3)).astype(np.float32)
    image = image * (light[..., None] * cast)
    noise = rng.uniform(0, 0.03) * rng.standard_normal((size, size, 1), dtype=np.float32)  # sensor grain
    image = image + noise
    pil = Image.fromarray((np.clip(image, 0, 1) * 255).astype(np.uint8))
    if rng.random() < 0.4:
        pil = pil.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2) * size / 192))
    return np.asarray(pil)
