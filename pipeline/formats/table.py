"""Tables: a CSV or TSV per split, each row an id, one text or a pair of texts, and a label for
labelled splits (IMDB reviews, sentence pairs), quoted as Kaggle quotes it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from competition.spec import check_text
from pipeline.core.paths import check_relative, inside, shown
from pipeline.formats.base import Examples, FileFormat, layout_of, register
from pipeline.formats.table_layout import TableLayout

LABELS = ("ids", "numbers")  # what a label cell holds: a class id, or a number (a regression's)


@dataclass(frozen=True)
class TableFile:
    """One split's table: its file name and, where Kaggle zips each file again inside the
    competition's download (word2vec-nlp-tutorial's `labeledTrainData.tsv.zip`), that zip."""

    file: str
    layout: TableLayout
    archive: str | None = None


@dataclass(frozen=True)
class TableFilesLayout:
    splits: dict[str, TableFile]


def tables_of(spec) -> TableFilesLayout:
    """The competition's table files; ValueError for a competition of another kind."""
    return layout_of(spec, TableFilesLayout)


def _text(own: dict[str, Any], where: str, key: str, many: bool = False) -> Any:
    """A string of the table (a column name, the separator), or with `many` a list of them:
    `id_column = {a = 1}` is one line naming the key, not a TypeError in pandas."""
    value = own[key]
    if many and not isinstance(value, list):
        raise ValueError(f"{where} {key} {shown(value)} is not a list of column names")
    return (
        tuple(check_text(v, f"{where} {key}") for v in value) if many else check_text(value, f"{where} {key}")
    )


def _table(raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> TableFilesLayout:
    shared = {k: v for k, v in raw.items() if k not in splits}  # separator, columns... for every split
    files = {}
    for split in splits:
        own = {**shared, **raw[split]}
        text = functools.partial(_text, own, f"[data.table.{split}]")
        layout = TableLayout(
            separator=text("separator"),
            id_column=text("id_column"),
            text_columns=text("text_columns", many=True),
            label_column=text("label_column") if split in labeled else None,
            escapechar=text("escapechar") if own.get("escapechar") is not None else None,
            labels_are=text("labels_are") if own.get("labels_are") is not None else "ids",
        )
        if layout.labels_are not in LABELS:
            raise ValueError(
                f"[data.table.{split}] labels_are {layout.labels_are!r} is not one of: {', '.join(LABELS)}"
            )
        if not 1 <= len(layout.text_columns) <= 2:
            raise ValueError(
                f"[data.table] text_columns: one text or a pair, got {list(layout.text_columns)}"
            )
        for key in ("file", "archive"):  # joined onto the data dir, so inside it
            if key == "file" or own.get(key) is not None:
                check_relative(own[key], f"[data.table.{split}] {key}")
        files[split] = TableFile(file=own["file"], layout=layout, archive=own.get("archive"))
    return TableFilesLayout(splits=files)


@register
class Table(FileFormat):
    name = "table"
    unit = "rows"
    holds = "text"

    def layout(
        self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
    ) -> TableFilesLayout:
        return _table(raw, splits, labeled)

    def label_rank(self, layout: TableFilesLayout) -> int:
        return int(self.numeric_labels(layout))  # a number is a row of one float

    def numeric_labels(self, layout: TableFilesLayout) -> bool:
        return any(t.layout.labels_are == "numbers" for t in layout.splits.values() if t.layout.label_column)

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        return {split: (table.file, table.archive) for split, table in layout_of(spec).splits.items()}

    def _rows(self, root: Path, spec, split: str, every_column: bool = False):
        from pipeline.formats.tables import read_table

        table = layout_of(spec).splits[split]
        return table.layout, read_table(
            self._file(root, spec, split),
            table.layout,
            spec.num_classes if spec.is_labeled(split) else None,
            spec.split_counts.get(split) if spec.is_labeled(split) else None,  # a hidden test set is larger
            every_column,
        )

    def _file(self, root: Path, spec, split: str) -> Path:
        return inside(root, layout_of(spec).splits[split].file, f"[data.table.{split}] file")

    def columns(self, root: Path, spec, split: str):
        layout, rows = self._rows(root, spec, split, every_column=True)
        return self._file(root, spec, split), rows.set_index(layout.id_column, drop=False)

    def verify_split(self, root: Path, spec, split: str) -> tuple[int, list[str]]:
        layout, rows = self._rows(root, spec, split)
        return len(rows), rows[layout.id_column].tolist()

    def examples(self, root: Path, spec, split: str):

        layout, rows = self._rows(root, spec, split)
        label = layout.label_column
        return Examples(
            ids=rows[layout.id_column].to_numpy(str),
            inputs=tuple(rows[column].to_numpy(str) for column in layout.text_columns),
            labels=None if not label else _targets(rows[label], layout.labels_are),
        )


def _targets(cells, labels_are: str):
    """A labelled table's targets: class ids, or numbers as rows of one float32 (a regression's)."""
    import numpy as np

    return cells.to_numpy(np.float32)[:, None] if labels_are == "numbers" else cells.to_numpy(np.int64)
