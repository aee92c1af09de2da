"""The embedded offline datasets: which one each competition draws, and drawing it.

Competitions read as TFRecord shards get the flower renderer (`synthetic`, any number of classes); the others
have one dataset each, written in their Kaggle layout (zips included) by their own module.
`scale` multiplies a dataset's default size.
"""

from __future__ import annotations

from pathlib import Path

from competition import CompetitionSpec
from pipeline.core.config import check_range
from pipeline.core.errors import PetalsError
from pipeline.core.progress import Progress
from pipeline.data import (
    synthetic,
    synthetic_apple_leaves,
    synthetic_comments,
    synthetic_essays,
    synthetic_leaves,
    synthetic_pairs,
    synthetic_pawpularity,
    synthetic_pets,
    synthetic_reviews,
)
from pipeline.formats.base import format_of

# competition name -> the module that draws it (write_dataset(out_dir, counts, seed), DEFAULT_COUNTS)
BY_COMPETITION = {
    "cassava": synthetic_leaves,
    "dogs-vs-cats": synthetic_pets,
    "feedback-prize-ell": synthetic_essays,
    "imdb": synthetic_reviews,
    "jigsaw-toxic": synthetic_comments,
    "petfinder-pawpularity": synthetic_pawpularity,
    "plant-pathology-2021": synthetic_apple_leaves,
    "watson": synthetic_pairs,
}


# Those drawn image by image, seconds to minutes (scaled): they report their progress.
DRAWN_IMAGES = (synthetic_leaves, synthetic_apple_leaves, synthetic_pets, synthetic_pawpularity)


# Any competition read as TFRecord shards, whatever its classes: the flower renderer, at the size asked.
RENDERED = {"shards": synthetic}


# The most an embedded dataset may be scaled: 4 x the flowers' default (4.0, 16,000 images) is
# 256,000 images, ten times the real flowers' 24,000; each one is drawn, encoded and written.
MAX_SCALE = 16.0


def default_scale(spec: CompetitionSpec) -> float:
    renderer = RENDERED.get(format_of(spec).read_by)
    return renderer.DEFAULT_SCALE if renderer is not None else 1.0


def draw(
    spec: CompetitionSpec,
    out_dir: Path,
    *,
    size: int,
    seed: int,
    scale: float,
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, int]:
    """Write the competition's embedded dataset under `out_dir`; images or rows per split.
    `size` is the flower renderer's image size (the others draw photos of varied sizes, or text)."""
    if not 0 < scale <= MAX_SCALE:
        raise PetalsError(f"synthetic scale {scale}: must be in (0, {MAX_SCALE:g}]")
    renderer = RENDERED.get(format_of(spec).read_by)
    if renderer is not None:
        check_range("data.image_size", size, "--size")  # the size recipes read, bounded as theirs is
        return renderer.write_dataset(
            out_dir, spec, size=size, seed=seed, scale=scale, workers=workers, progress=progress
        )
    module = BY_COMPETITION.get(spec.name)
    if module is None:
        raise PetalsError(
            f"competition {spec.name} has no embedded dataset (those of {', '.join(BY_COMPETITION)} do); "
            "fetch its data with SOURCE=kaggle or SOURCE=dir"
        )
    counts = {split: max(2, round(n * scale)) for split, n in module.DEFAULT_COUNTS.items()}
    if module not in DRAWN_IMAGES:
        written = module.write_dataset(out_dir, counts, seed=seed)
    else:
        what = f"drawing the {spec.name} images"
        with Progress(what, sum(counts.values()), "img", enabled=progress) as bar:
            written = module.write_dataset(out_dir, counts, seed=seed, tick=bar.advance)
    return {split: written[split] for split in spec.splits}
