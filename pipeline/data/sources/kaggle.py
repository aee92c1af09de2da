"""The Kaggle API: the competition's zip downloaded with your credentials, then unpacked."""

from __future__ import annotations

from pathlib import Path

from pipeline.core import kaggle_client
from pipeline.core.errors import PetalsError
from pipeline.data.sources.archives import unpack
from pipeline.data.sources.base import Context, Got, Source, register


@register
class Kaggle(Source):
    name = "kaggle"
    priority = 40

    def auto_reason(self, context: Context) -> str | None:
        where = kaggle_client.find_credentials()
        return f"Kaggle credentials found in {where}" if where else None

    def get(self, context: Context, staging: Path) -> Got:
        options = context.options
        if not kaggle_client.find_credentials():
            raise PetalsError(f"--source kaggle needs Kaggle credentials: {kaggle_client.CREDENTIALS_HELP}")
        archive = kaggle_client.download_competition(
            context.slug, context.cache_dir, retries=options.retries, quiet=not options.progress
        )
        unpack(archive, staging, context.spec, options.sizes, options.progress)
        return Got(str(staging), f"kaggle competition {context.slug}", options.sizes)
