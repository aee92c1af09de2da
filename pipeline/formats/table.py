"""Tables: a CSV or TSV per split, each row an id, one text or a pair of texts, and a label for
labelled splits (IMDB reviews, sentence pairs), quoted as Kaggle quotes it. A label is a class id,
a class name, a list of names (`labels_are`), or a 0/1 column per label (`[data] label_columns`,
Jigsaw's comments): pipeline/formats/labels.py reads them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from competition.spec import check_text
from pipeline.core.paths import check_relative, inside, shown
from pipeline.formats import labels
from pipeline.formats.base import Examples, FileFormat, layout_of, register
from pipeline.formats.table_layout import TableLayout


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
            # a labelled split's one label column; none where a label has a column ([data] label_columns)
            label_column=text("label_column") if split in labeled and "label_column" in own else None,
            escapechar=text("escapechar") if own.get("escapechar") is not None else None,
            labels_are=labels.check_kind(own.get("labels_are", "ids"), f"[data.table.{split}]"),
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

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        return {split: (table.file, table.archive) for split, table in layout_of(spec).splits.items()}

    def label_reading(self, spec, layout: TableFilesLayout) -> labels.LabelReading:
        labelled = [t.layout for s, t in layout.splits.items() if s in spec.labeled_splits]
        read = {(t.label_column, t.labels_are) for t in labelled}
        if len(read) > 1:  # one way to read a label, whichever split it is in
            raise ValueError(f"[data.table] the labelled splits read labels {len(read)} ways")
        return labels.reading(spec, *next(iter(read), (None, "ids")))

    def _rows(self, root: Path, spec, split: str, every_column: bool = False):
        from pipeline.formats.tables import read_table

        table = layout_of(spec).splits[split]
        return table.layout, read_table(
            self._file(root, spec, split),
            table.layout,
            self.label_reading(spec, layout_of(spec)) if spec.is_labeled(split) else None,
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
        read = self.label_reading(spec, layout_of(spec)) if spec.is_labeled(split) else None
        return Examples(
            ids=rows[layout.id_column].to_numpy(str),
            inputs=tuple(rows[column].to_numpy(str) for column in layout.text_columns),
            labels=None if read is None else self._targets(read, rows, self._file(root, spec, split)),
        )

    @staticmethod
    def _targets(read: labels.LabelReading, rows, path: Path):
        """The rows' targets: class ids as read_table made them, else read from their cells."""
        import numpy as np

        if read.kind == "ids":
            return rows[read.columns[0]].to_numpy(np.int64)
        return labels.targets(read, rows, path)
