"""Data sources, registered by name (base.py says how one is written); `auto` takes the first
that applies. Importing this package registers the shipped ones."""

from pipeline.data.sources.base import SOURCES, Context, FetchOptions, Got, Source, by_priority, register

# Each module registers its source on import.
from pipeline.data.sources import attached, copy, gcs, kaggle, synthetic  # noqa: F401  isort: skip

__all__ = ["SOURCES", "Context", "FetchOptions", "Got", "Source", "by_priority", "register"]
