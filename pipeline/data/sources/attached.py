"""`/kaggle/input/<slug>` inside a Kaggle notebook: the attached competition, read in place."""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.core import kaggle_input
from pipeline.core.errors import PetalsError
from pipeline.data.readers import reader_for
from pipeline.data.sources.base import Context, FetchOptions, Got, Source, register

log = logging.getLogger(__name__)


def find_attached(options: FetchOptions, spec) -> kaggle_input.Found | None:
    """The attached competition under Kaggle's input folder, wherever this year's layout put it."""
    return kaggle_input.find(
        "competition",
        options.slug or spec.default_slug,
        reader_for(spec).holds_competition(spec),
        reader_for(spec).markers(spec),
        options.kaggle_input,
        aliases=spec.slugs,
    )


@register
class Attached(Source):
    name = "kaggle-input"
    priority = 20

    def auto_reason(self, context: Context) -> str | None:
        found = context.attached()
        return f"the competition is attached at {found} (running inside Kaggle)" if found else None

    def get(self, context: Context, staging: Path) -> Got:
        options = context.options
        found = context.attached()
        if found is None:
            raise PetalsError(
                f"--source kaggle-input: no folder under {options.kaggle_input} holds "
                f"{reader_for(context.spec).markers(context.spec)} "
                f"(attach the competition {context.slug} to the kernel)"
            )
        if options.source != "auto":  # auto's reason already said where
            log.info("fetch: the competition is attached at %s", found)
        return Got(str(found.path), str(found.path), options.sizes)
