"""Image folders with a label CSV: the commonest Kaggle image layout since 2020 (Cassava, Plant
Pathology, RANZCR...). A labelled split is a folder of images beside a CSV naming each image
and its label (`train.csv`: `image_id,label` over `train_images/*.jpg`); an unlabelled split is
a folder whose file names are the ids the submission uses (`test_images/2216849948.jpg`).
Labels are class ids (`labels = "ids"`: 0..n-1 in classes.txt's order) or class names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.data.formats.base import ImageFiles, register

LABELS = ("ids", "names")


@dataclass(frozen=True)
class ImageCsvSplit:
    folder: str  # the images, e.g. `train_images`
    labels: str | None = None  # the label CSV of a labelled split, e.g. `train.csv`
    id_column: str = "image_id"  # the image's file name, relative to `folder`
    label_column: str = "label"
    labels_are: str = "ids"  # one of LABELS
    archive: str | None = None  # a zip Kaggle may ship the folder in


@dataclass(frozen=True)
class ImageCsvLayout:
    splits: dict[str, ImageCsvSplit]


@register
class ImageCsv(ImageFiles):
    name = "image_csv"

    def layout(
        self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
    ) -> ImageCsvLayout:
        layout = ImageCsvLayout(splits={split: ImageCsvSplit(**raw[split]) for split in splits})
        for split, own in layout.splits.items():
            if (own.labels is not None) != (split in labeled):
                wanted = "a labels CSV" if split in labeled else "no labels CSV (it is unlabelled)"
                raise ValueError(f"[data.image_csv.{split}] needs {wanted}")
            if own.labels_are not in LABELS:
                raise ValueError(
                    f"[data.image_csv.{split}] labels_are {own.labels_are!r} is not one of ids, names"
                )
        return layout

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        entries = {}
        for split, own in spec.layout.splits.items():
            entries[f"{split} images"] = (own.folder, own.archive)
            if own.labels is not None:
                entries[f"{split} labels"] = (own.labels, None)
        return entries

    def folder(self, root: Path, spec, split: str) -> Path:
        return root / spec.layout.splits[split].folder

    def images(self, root: Path, spec, split: str) -> list[tuple[str, Path, str | None]]:
        own = spec.layout.splits[split]
        top = root / own.folder
        if own.labels is None:  # the file names are the ids
            return [(p.relative_to(top).as_posix(), p, None) for p in top.rglob("*") if p.is_file()]
        import pandas as pd

        path = root / own.labels
        try:
            rows = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as err:
            raise PetalsError(f"{path}: not a readable CSV ({err})") from None
        missing = {own.id_column, own.label_column} - set(rows.columns)
        if missing:
            raise PetalsError(
                f"{path}: no column {', '.join(sorted(missing))} (columns: {', '.join(rows.columns)})"
            )
        found = [
            (i, top / i, label) for i, label in zip(rows[own.id_column], rows[own.label_column], strict=True)
        ]
        listed = {image_id for image_id, _, _ in found}
        if len(listed) != len(found):
            raise PetalsError(f"{path}: an {own.id_column} is listed twice")
        for image_id, image, label in found:
            self.class_id(spec, label, f"{path} ({image_id})")  # the CSV's line, named
            if not image.is_file():
                raise PetalsError(f"{image}: listed in {path} but missing")
        strays = [p for p in top.rglob("*") if p.is_file() and p.relative_to(top).as_posix() not in listed]
        if strays:
            raise PetalsError(f"{strays[0]}: not listed in {path} ({len(strays)} such)")
        return found

    def class_id(self, spec, label, where) -> int:
        own = next(s for s in spec.layout.splits.values() if s.labels is not None)
        if own.labels_are == "names":
            return super().class_id(spec, label, where)
        if isinstance(label, str) and label.isdigit() and int(label) < spec.num_classes:
            return int(label)
        raise PetalsError(f"{where}: label {label!r} is not a class id (0 to {spec.num_classes - 1})")
