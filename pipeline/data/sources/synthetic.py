"""The embedded offline dataset, drawn in the competition's own layout: what `auto` falls back to."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline.core import kaggle_client
from pipeline.data import embedded
from pipeline.data.sources.base import Context, FetchOptions, Got, Source, register
from pipeline.formats.base import format_of, resolutions_of

log = logging.getLogger(__name__)


def request(options: FetchOptions, spec) -> dict[str, Any]:
    """What the drawing is made with, as the manifest records it (a rerun asking for other
    values must say FORCE)."""
    scale = embedded.default_scale(spec) if options.scale is None else options.scale
    asked = {"seed": options.seed, "scale": scale}
    return {**asked, "size": options.synthetic_size} if resolutions_of(spec) else asked  # drawn at a size


@register
class Synthetic(Source):
    name = "synthetic"
    priority = 90

    def auto_reason(self, context: Context) -> str | None:
        return (
            "no /kaggle/input data, GCS path or Kaggle credentials found; using the embedded offline dataset "
            f"({kaggle_client.CREDENTIALS_HELP} to fetch the real data)"
        )

    def get(self, context: Context, staging: Path) -> Got:
        options, spec = context.options, context.spec
        asked = request(options, spec)
        split_counts = embedded.draw(
            spec,
            staging,
            size=options.synthetic_size,
            seed=options.seed,
            scale=asked["scale"],
            workers=options.workers,
            progress=options.progress,
        )
        log.info("fetch: drew %s %s", split_counts, format_of(spec).unit)
        return Got(
            str(staging), "embedded synthetic dataset", (options.synthetic_size,), {"synthetic": asked}
        )
