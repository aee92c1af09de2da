"""Data formats, registered by name: how a competition's files are laid out (base.py says how a
format is written). Importing this package registers the shipped ones."""

from pipeline.formats.base import (
    FORMATS,
    FileFormat,
    Format,
    ImageFiles,
    format_of,
    get_format,
    layout_of,
    register,
    resolutions_of,
)

# Each module registers its format on import.
from pipeline.formats import image_csv, image_folder, records, table  # noqa: F401  isort: skip

__all__ = [
    "FORMATS",
    "FileFormat",
    "Format",
    "ImageFiles",
    "format_of",
    "get_format",
    "layout_of",
    "register",
    "resolutions_of",
]
