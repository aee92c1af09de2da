"""The Format interface and its registry: how a competition's files are laid out and read.

A competition file names its format (`[data] format = "image_csv"`) and gives its layout in
`[data.<format>]`. A format parses that section into its layout and, for plain files, says
what the data dir holds per split (`entries`), checks a split (`verify_split`) and lists its
examples (`examples`). The data layer reads a format through the reader it names (`read_by`,
pipeline/data/readers/): TFRecord shards where they lie, plain files unpacked. A new layout is
a new module here, decorated `@register`.

The spec names its format and keeps its table as written; `format_of` and `layout_of` are where
the name meets this registry. Module level stays cheap (no TensorFlow, pandas or PIL).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pipeline.core.named import Registry


@dataclass(frozen=True)
class Examples:
    """One split, in a fixed order. `inputs` holds image paths, or texts, or text pairs
    (`inputs[k]` is the k-th text column), or image paths and their rows' feature columns
    (float32 [examples, columns]); `labels` is None for an unlabelled split."""

    ids: np.ndarray  # str
    inputs: tuple[np.ndarray, ...]
    labels: np.ndarray | None  # targets: class ids, rows of 0/1 over the classes, or rows of numbers

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> Examples:
        return replace(
            self,
            ids=self.ids[rows],
            inputs=tuple(column[rows] for column in self.inputs),
            labels=None if self.labels is None else self.labels[rows],
        )


FORMATS = Registry("data format")
register = FORMATS.register  # class decorator: make a format known by its `name`
get_format = FORMATS.named
JPEG_START = b"\xff\xd8\xff"
# The most pixels a side an image may claim. The competitions' photos are smaller (Cassava's
# 800 x 600, dogs vs cats' about 500) and Kaggle's image competitions stay within a few thousand
# px a side; a header is free to claim more, and a 6 KB file claiming 13,000 x 13,000 px decodes
# to half a gigabyte, several at once in tf.data.
MAX_IMAGE_SIDE = 8192


def format_of(spec) -> Format:
    """The format the competition file names; for a name no format has, one line naming the file."""
    return _read(spec, _written(spec))[0]


def layout_of(spec, kind: type | None = None) -> Any:
    """The competition's `[data.<format>]` as its format's layout (a RecordLayout, say), read once;
    a table the format refuses is one line naming the file. With `kind`, a ValueError for a
    competition whose layout is of another kind (records asked of a table)."""
    layout = _read(spec, _written(spec))[1]
    if kind is not None and not isinstance(layout, kind):
        raise ValueError(f"competition {spec.name} has {spec.format} data, not {kind.__name__}")
    return layout


def resolutions_of(spec) -> tuple[int, ...]:
    """The image sizes the competition's data comes at (TFRecord shards); empty where any size is read."""
    return format_of(spec).resolutions(layout_of(spec))


def _written(spec) -> str:
    """The format's table exactly as written: specs that compare equal may differ in it where
    Python's equality does not look (16 == 16.0 == True), and the format must see each as written."""
    return json.dumps(spec.format_table, sort_keys=True, default=repr)


@cache
def _read(spec, written: str) -> tuple[Format, Any]:
    from competition.spec import CompetitionFileError
    from pipeline.core.errors import PetalsError

    try:
        form = FORMATS.named(spec.format)
        if spec.format_table is None:
            raise KeyError(spec.format)
        return form, form.layout(spec.format_table, spec.splits, spec.labeled_splits)
    except (KeyError, TypeError) as err:  # as the spec's own missing keys are named
        key = f"key {err}" if isinstance(err, KeyError) else str(err)
        raise CompetitionFileError(f"{spec.file}: not a competition file ({key})") from None
    except (ValueError, PetalsError) as err:  # a path field leaving the folder: PetalsError
        raise CompetitionFileError(f"{spec.file}: {err}") from None


def jpeg_size(path: Path) -> tuple[int, int]:
    """(width, height) as a JPEG's header claims them, read without decoding the image; the
    one-line refusal naming the file when the header does not parse or claims more than
    MAX_IMAGE_SIDE a side."""
    from PIL import JpegImagePlugin  # the JPEG reader itself: Image.open would refuse a bomb in a traceback

    from pipeline.core.errors import PetalsError

    try:
        with JpegImagePlugin.JpegImageFile(path) as image:  # reads the markers up to the pixels only
            width, height = image.size
    except (OSError, SyntaxError, ValueError) as err:
        raise PetalsError(f"{path}: not a readable JPEG ({err})") from None
    if max(width, height) > MAX_IMAGE_SIDE:
        raise PetalsError(
            f"{path}: claims {width} x {height} px, more than {MAX_IMAGE_SIDE} px a side "
            "(the competitions' photos are a few thousand at most): not decoded"
        )
    return width, height


class Format(ABC):
    """A layout of a competition's files. Plain files are a `FileFormat`, unpacked into the data
    dir and read as examples; TFRecord shards are read where they lie."""

    name: ClassVar[str]
    read_by: ClassVar[str] = "files"  # the data layer's reader of these files (pipeline/data/readers/)
    unit: ClassVar[str] = "images"  # what a split's count counts: "images" or "rows"
    # What an example's input is: "image" (a file decoded into pixels) or "text" (a table's cells).
    # A competition's task must read it (pipeline/tasks/competitions.py checks the two agree).
    holds: ClassVar[str] = "image"
    # Whether it reads the numeric columns of an example's row beside its image (`[data]
    # feature_columns`: an image_table competition's), as a second input.
    reads_columns: ClassVar[bool] = False

    @abstractmethod
    def layout(self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> Any:
        """`[data.<format>]` as this format's layout; ValueError naming what is wrong."""

    def label_reading(self, spec, layout):
        """How the labelled rows give their targets (pipeline/formats/labels.py's LabelReading): its
        `rank` says what a label becomes, 0 one class id an example, 1 a row of 0/1 over the classes.
        The competition's task must read the same (pipeline/tasks/competitions.py checks the two
        agree). By default one class an example, in the format's own way (a shard's id, a folder's
        name); ValueError where the competition names a column per label."""
        from pipeline.formats.labels import LabelReading

        if spec.label_columns:
            raise ValueError(f"data format {self.name} reads one class an example, not [data] label_columns")
        return LabelReading("ids", (), spec.classes)

    def resolutions(self, layout) -> tuple[int, ...]:
        """The image sizes the competition's files come at, one copy each (TFRecord shards at
        192, 224, 331 and 512 px); empty where photos of any size are resized as they are read."""
        return ()

    def columns(self, root: Path, spec, split: str) -> tuple[Path, Any] | None:
        """(the file, its rows as a pandas DataFrame of strings indexed by id) of a split whose
        examples are rows of a CSV or a table, every column kept (a group's, one petals does not
        read); None for a format without one (TFRecord shards, a folder of images)."""
        return None


class FileFormat(Format):
    """Plain files, unpacked into the data dir: what it holds per split, how a split is checked and read."""

    @abstractmethod
    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        """Per split: the folder or file the data dir holds, and the zip Kaggle may ship it in."""

    @abstractmethod
    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        """Check a split of an unpacked data dir: (its count, its ids); PetalsError naming a defect."""

    @abstractmethod
    def examples(self, root: Path, spec, split: str) -> Examples:
        """A split's examples in a fixed order."""


def _numeric_first(item: tuple) -> tuple:
    """Numeric ids sort as numbers (Kaggle's test/1.jpg ... test/12500.jpg)."""
    return (len(item[0]), item[0]) if item[0].isdigit() else (0, item[0])


class ImageFiles(FileFormat):
    """Image files on disk, one per example: what the subclasses share. A subclass says where a
    split's images are (`folder`) and lists them with their ids and labels (`images`)."""

    @abstractmethod
    def folder(self, root: Path, spec, split: str) -> Path:
        """The folder holding a split's images."""

    @abstractmethod
    def images(self, root: Path, spec, split: str) -> list[tuple[str, Path, str | int | None]]:
        """(id, path, label) per image: the label a class name or id, None in an unlabelled split."""

    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        """Every image's name and label checked, and its JPEG header read (its claimed size within
        MAX_IMAGE_SIDE); the first is decoded whole."""
        from PIL import Image, UnidentifiedImageError

        from pipeline.core.errors import PetalsError

        top = self.folder(root, spec, split)
        if not top.is_dir():
            raise PetalsError(f"{top}: split {split} missing (no such folder)")
        found = sorted(self.images(root, spec, split), key=_numeric_first)
        if not found:
            raise PetalsError(f"{top}: split {split} holds no images")
        for _, path, label in found:
            if spec.is_labeled(split):
                self.target(spec, label, path)
            with open(path, "rb") as f:
                if f.read(3) != JPEG_START:
                    raise PetalsError(f"{path}: not a JPEG")
            jpeg_size(path)  # every header read: no image past the bound reaches a decoder
        first = min(path for _, path, _ in found)
        try:
            with Image.open(first) as image:
                image.convert("RGB")
        except (OSError, UnidentifiedImageError) as err:
            raise PetalsError(f"{first}: not a readable JPEG ({err})") from None
        return len(found), [image_id for image_id, _, _ in found]

    def target(self, spec, label, where):
        """A label as the example's target: the class id of a class name (a subclass reads other
        cells: class ids, lists of names)."""
        from pipeline.core.errors import PetalsError
        from pipeline.core.foreign import listed
        from pipeline.core.paths import shown

        if label in spec.classes:
            return spec.classes.index(label)
        raise PetalsError(f"{where}: label {shown(label)} is not a class ({listed(spec.classes)})")

    def examples(self, root: Path, spec, split: str):
        from pipeline.core.errors import PetalsError

        top = self.folder(root, spec, split)
        found = sorted(self.images(root, spec, split), key=_numeric_first) if top.is_dir() else []
        if not found:
            raise PetalsError(f"{top}: no {split} images; fetch again")
        ids, paths, labels = zip(*found, strict=True)
        return Examples(
            ids=np.array(ids),
            inputs=(np.array([str(p) for p in paths]),),
            labels=np.array([self.target(spec, label, top) for label in labels])
            if spec.is_labeled(split)
            else None,
        )
