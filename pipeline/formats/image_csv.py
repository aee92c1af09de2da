"""Image folders with a label CSV: the commonest Kaggle image layout since 2020 (Cassava, Plant
Pathology, RANZCR...). A labelled split is a folder of images beside a CSV naming each image
and its label (`train.csv`: `image_id,label` over `train_images/*.jpg`); an unlabelled split is
a folder whose file names are the ids the submission uses (`test_images/2216849948.jpg`).
Labels are class ids (`labels_are = "ids"`: 0..n-1 in classes.txt's order), class names, lists
of class names separated by spaces (`"name_lists"`: Plant Pathology's `scab frog_eye_leaf_spot`),
numbers (`"numbers"`: a regression's target, Pawpularity's 1-100 score), or a 0/1 column per label
(`[data] label_columns`), read by pipeline/formats/labels.py. Where the competition reads
feature columns beside each image (`[data] feature_columns`), a labelled split's come from its
label CSV and an unlabelled split's from its `table` (Pawpularity's test.csv).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from competition.spec import check_text
from pipeline.core.csv_bounds import LABEL_CSV, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.paths import check_relative, inside, shown
from pipeline.formats import feature_columns, labels
from pipeline.formats.base import ImageFiles, layout_of, register


@dataclass(frozen=True)
class ImageCsvSplit:
    folder: str  # the images, e.g. `train_images`
    labels: str | None = None  # the label CSV of a labelled split, e.g. `train.csv`
    id_column: str = "image_id"  # the image's file name, relative to `folder`
    label_column: str = "label"
    labels_are: str = "ids"  # one of labels.CELLS (with [data] label_columns: "numbers" or 0/1 cells)
    archive: str | None = None  # a zip Kaggle may ship the folder in
    # What a file name adds to its id: Pawpularity's `Id` is `0007de18...` for `train/0007de18....jpg`.
    id_suffix: str = ""
    # The CSV of an unlabelled split's rows by id, where the competition reads feature columns
    # (`[data] feature_columns`): Pawpularity's `test.csv` (Id and the flags). A labelled split's
    # columns are its label CSV's.
    table: str | None = None


@dataclass(frozen=True)
class ImageCsvLayout:
    splits: dict[str, ImageCsvSplit]


@register
class ImageCsv(ImageFiles):
    name = "image_csv"
    reads_columns = True  # [data] feature_columns, from the label CSV or the split's `table`

    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        """The images checked, and every feature column's cell read, so fetch refuses a bad one."""
        counted = super().verify_split(root, spec, split)
        if spec.feature_columns:
            self.examples(root, spec, split)
        return counted

    def layout(
        self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
    ) -> ImageCsvLayout:
        layout = ImageCsvLayout(splits={split: ImageCsvSplit(**raw[split]) for split in splits})
        for split, own in layout.splits.items():
            for key in ("folder", "labels", "archive", "table"):  # joined onto the data dir, so inside it
                if key == "folder" or getattr(own, key) is not None:
                    check_relative(getattr(own, key), f"[data.image_csv.{split}] {key}")
            if not isinstance(own.id_suffix, str):
                raise ValueError(f"[data.image_csv.{split}] id_suffix {shown(own.id_suffix)} is not a string")
            for key in ("id_column", "label_column"):  # looked up in a CSV's header
                check_text(getattr(own, key), f"[data.image_csv.{split}] {key}")
            if (own.labels is not None) != (split in labeled):
                wanted = "a labels CSV" if split in labeled else "no labels CSV (it is unlabelled)"
                raise ValueError(f"[data.image_csv.{split}] needs {wanted}")
            labels.check_kind(own.labels_are, f"[data.image_csv.{split}]")
        read = {own.labels_are for own in layout.splits.values() if own.labels is not None}
        if len(read) > 1:  # one way to read a label, whichever split it is in
            raise ValueError(
                f"[data.image_csv] the labelled splits read labels as {' and '.join(sorted(read))}"
            )
        return layout

    def label_reading(self, spec, layout: ImageCsvLayout) -> labels.LabelReading:
        own = next(s for s in layout.splits.values() if s.labels is not None)  # read one way (layout)
        return labels.reading(spec, own.label_column, own.labels_are)

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        entries = {}
        for split, own in layout_of(spec).splits.items():
            entries[f"{split} images"] = (own.folder, own.archive)
            if own.labels is not None:
                entries[f"{split} labels"] = (own.labels, None)
            if own.table is not None:
                entries[f"{split} table"] = (own.table, None)
        return entries

    def folder(self, root: Path, spec, split: str) -> Path:
        return inside(root, layout_of(spec).splits[split].folder, f"[data.image_csv.{split}] folder")

    def _label_rows(self, root: Path, spec, split: str, key: str = "labels"):
        """(the split's label CSV, or its `table`, its rows as strings)."""
        import pandas as pd

        own = layout_of(spec).splits[split]
        path = inside(root, getattr(own, key), f"[data.image_csv.{split}] {key}")
        # its bytes, rows (the split's declared count) and ids bounded before pandas reads it whole
        check_csv(path, LABEL_CSV.declaring(spec.split_counts.get(split)), id_column=own.id_column)
        try:
            return path, pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, ValueError) as err:
            raise PetalsError(f"{path}: not a readable CSV ({err})") from None

    def columns(self, root: Path, spec, split: str):
        own = layout_of(spec).splits[split]
        if own.labels is None:
            return None
        path, rows = self._label_rows(root, spec, split)
        return path, rows.set_index(own.id_column, drop=False)

    def examples(self, root: Path, spec, split: str):
        """The split's images and, where the competition reads feature columns, their rows' numbers
        (a second input, pipeline/formats/feature_columns.py)."""
        found = super().examples(root, spec, split)
        if not spec.feature_columns:
            return found
        own = layout_of(spec).splits[split]
        key = "labels" if own.labels is not None else "table"
        if getattr(own, key) is None:
            raise PetalsError(
                f"{spec.file}: [data.image_csv.{split}] names no table: the CSV of the split's rows "
                "that holds [data] feature_columns (Pawpularity's test.csv)"
            )
        path, rows = self._label_rows(root, spec, split, key)
        if own.id_column not in rows.columns:
            raise PetalsError(
                f"{path}: no column {shown(own.id_column)} (columns: {shown(', '.join(rows.columns))})"
            )
        rows = rows.set_index(own.id_column, drop=False)
        numbers = feature_columns.numbers(
            path, rows, found.ids.astype(str), spec.feature_columns, own.id_column
        )
        return replace(found, inputs=(*found.inputs, numbers))

    def images(self, root: Path, spec, split: str) -> list[tuple[str, Path, str | None]]:
        own = layout_of(spec).splits[split]
        top = self.folder(root, spec, split)
        end = own.id_suffix
        if own.labels is None:  # the file names are the ids (less the suffix, where one is named)
            listed = (p.relative_to(top).as_posix() for p in top.rglob("*"))
            files = [i for i in listed if (top / i).is_file()]
            return [(_without(i, end), inside(top, i, "image", top), None) for i in files]
        path, rows = self._label_rows(root, spec, split)
        read = self.label_reading(spec, layout_of(spec))
        missing = {own.id_column, *read.columns} - set(rows.columns)
        if missing:
            raise PetalsError(
                f"{path}: no column {', '.join(sorted(missing))} (columns: {shown(', '.join(rows.columns))})"
            )
        # Each id names a file inside the split's folder, never another split's or one outside
        # the data dir (a link out included); row n is the CSV's line n + 2, after its header. A
        # label is its cell, or its cells where a label has a column.
        ids = rows[own.id_column]
        found = [
            (i, inside(top, i + end, f"line {n + 2} {own.id_column}", path), label)
            for n, (i, label) in enumerate(zip(ids, labels.cells(read, rows), strict=True))
        ]
        twice = ids[ids.duplicated()]
        if len(twice):
            raise PetalsError(f"{path}: {own.id_column} {shown(twice.iloc[0])} is listed twice")
        listed = {i + end for i in ids}
        for image_id, image, label in found:
            self.target(spec, label, f"{path} ({shown(image_id)})")  # the CSV's line, named
            if not image.is_file():
                raise PetalsError(f"{image}: listed in {path} but missing")
        strays = [p for p in top.rglob("*") if p.is_file() and p.relative_to(top).as_posix() not in listed]
        if strays:
            raise PetalsError(f"{strays[0]}: not listed in {path} ({len(strays)} such)")
        return found

    def target(self, spec, label, where):
        return labels.target(self.label_reading(spec, layout_of(spec)), label, where)


def _without(name: str, suffix: str) -> str:
    """A file's id: its name less `suffix` (the whole name where it does not end so)."""
    return name[: len(name) - len(suffix)] if suffix and name.endswith(suffix) else name
