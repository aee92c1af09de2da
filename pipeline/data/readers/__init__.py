"""Data readers, registered by name: how a competition's stored files are taken in and read
(base.py says how one is written). Importing this package registers the shipped ones."""

from pipeline.data.readers.base import READERS, Pool, Reader, Taken, reader_for, register

# Each module registers its reader on import.
from pipeline.data.readers import files, shards  # noqa: F401  isort: skip
from pipeline.data.readers.files import FileSplit  # isort: skip
from pipeline.data.readers.shards import RecordSplit  # isort: skip

Split = RecordSplit | FileSplit

__all__ = [
    "READERS",
    "FileSplit",
    "Pool",
    "Reader",
    "RecordSplit",
    "Split",
    "Taken",
    "reader_for",
    "register",
]
