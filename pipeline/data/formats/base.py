"""The Format interface and its registry: how a competition's files are laid out and read.

A competition file names its format (`[data] format = "image_csv"`) and gives its layout in
`[data.<format>]`. A format parses that section into its layout and, for plain files, says
what the data dir holds per split (`entries`), checks a split (`verify_split`) and lists its
examples (`examples`). TFRecord shards (`sharded`) are read by pipeline/data/layout.py and
pipeline/data/datasets.py instead. A new layout is a new module here, decorated `@register`.

Module level stays cheap (no TensorFlow, pandas or PIL): the competition spec imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class Examples:
    """One split, in a fixed order. `inputs` holds image paths, or texts, or text pairs
    (`inputs[k]` is the k-th text column); `labels` is None for an unlabelled split."""

    ids: np.ndarray  # str
    inputs: tuple[np.ndarray, ...]
    labels: np.ndarray | None  # int64 class ids

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> Examples:
        return replace(
            self,
            ids=self.ids[rows],
            inputs=tuple(column[rows] for column in self.inputs),
            labels=None if self.labels is None else self.labels[rows],
        )


FORMATS: dict[str, Format] = {}
JPEG_START = b"\xff\xd8\xff"


def register(cls: type[Format]) -> type[Format]:
    if cls.name in FORMATS:
        raise ValueError(f"format {cls.name!r} registered twice")  # two modules claim one name: a bug
    FORMATS[cls.name] = cls()
    return cls


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"data format {name!r} is not one of {', '.join(sorted(FORMATS))}") from None


class Format:
    name: ClassVar[str]
    sharded: ClassVar[bool] = False  # TFRecord shards at several resolutions, read where they are
    unit: ClassVar[str] = "images"  # what a split's count counts: "images" or "rows"

    def layout(self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> Any:
        """`[data.<format>]` as this format's layout; ValueError naming what is wrong."""
        raise NotImplementedError

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        """Per split: the folder or file the data dir holds, and the zip Kaggle may ship it in."""
        raise NotImplementedError

    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        """Check a split of an unpacked data dir: (its count, its ids); PetalsError naming a defect."""
        raise NotImplementedError

    def examples(self, root: Path, spec, split: str):
        """A split's examples (pipeline/data/file_examples.Examples) in a fixed order."""
        raise NotImplementedError


def _numeric_first(item: tuple) -> tuple:
    """Numeric ids sort as numbers (Kaggle's test/1.jpg ... test/12500.jpg)."""
    return (len(item[0]), item[0]) if item[0].isdigit() else (0, item[0])


class ImageFiles(Format):
    """Image files on disk, one per example: what the subclasses share. A subclass says where a
    split's images are (`folder`) and lists them with their ids and labels (`images`)."""

    def folder(self, root: Path, spec, split: str) -> Path:
        raise NotImplementedError

    def images(self, root: Path, spec, split: str) -> list[tuple[str, Path, str | int | None]]:
        """(id, path, label) per image: the label a class name or id, None in an unlabelled split."""
        raise NotImplementedError

    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        """Every image's name and label checked, and that it starts as a JPEG does; the first is
        decoded whole."""
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
                self.class_id(spec, label, path)
            with open(path, "rb") as f:
                if f.read(3) != JPEG_START:
                    raise PetalsError(f"{path}: not a JPEG")
        first = min(path for _, path, _ in found)
        try:
            with Image.open(first) as image:
                image.convert("RGB")
        except (OSError, UnidentifiedImageError) as err:
            raise PetalsError(f"{first}: not a readable JPEG ({err})") from None
        return len(found), [image_id for image_id, _, _ in found]

    def class_id(self, spec, label, where) -> int:
        """A label as the class id: a class name, or a class id as the label CSV writes it."""
        from pipeline.core.errors import PetalsError

        if label in spec.classes:
            return spec.classes.index(label)
        raise PetalsError(f"{where}: label {label!r} is not a class ({', '.join(spec.classes)})")

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
            labels=np.array([self.class_id(spec, label, top) for label in labels])
            if spec.is_labeled(split)
            else None,
        )
