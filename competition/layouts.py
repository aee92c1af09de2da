"""How a competition's files are laid out, one dataclass per kind of data.

- `records`: JPEG TFRecord shards per resolution and split (the flower competitions).
- `image_folder`: a zip per split of image files, the label in each file's name for labelled
  splits and the id for the others (dogs vs cats: `train/cat.0.jpg`, `test/1.jpg`).
- `table`: a CSV or TSV per split, each row an id, one text or a pair of texts, and a label
  for labelled splits (IMDB reviews, sentence pairs), quoted as Kaggle quotes it.

The competition file's `[data]` section names the kind; `[data.<kind>]` gives its layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KINDS = ("records", "image_folder", "table")


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordSchema:
    """Feature keys of the tf.train.Example records."""

    image: str
    label: str
    id: str


@dataclass(frozen=True)
class RecordLayout:
    """JPEG TFRecord shards: `<record_dir>/<split>/<shard_name>` at each resolution."""

    resolutions: tuple[int, ...]
    record_dir_pattern: str
    shard_name_pattern: str
    shards_per_split: int
    schema: RecordSchema

    def record_dir(self, size: int) -> str:
        """Folder of one resolution's shards, e.g. `tfrecords-jpeg-192x192`."""
        return self.record_dir_pattern.format(size=size)

    def shard_name(self, index: int, size: int, count: int) -> str:
        """Kaggle's shard file name, which carries the record count: `00-192x192-798.tfrec`."""
        return self.shard_name_pattern.format(index=index, size=size, count=count)

    def size_from_record_dir(self, name: str) -> int | None:
        """Inverse of `record_dir`: the resolution a folder name stands for, or None."""
        pattern = re.escape(self.record_dir_pattern).replace(r"\{size\}", r"(\d+)")
        match = re.fullmatch(pattern, name)
        if not match or len(set(match.groups())) != 1:
            return None
        return int(match.group(1))


def _records(raw: dict[str, Any]) -> RecordLayout:
    return RecordLayout(
        resolutions=tuple(int(s) for s in raw["resolutions"]),
        record_dir_pattern=raw["record_dir"],
        shard_name_pattern=raw["shard_name"],
        shards_per_split=int(raw["shards_per_split"]),
        schema=RecordSchema(**raw["schema"]),
    )


# ----------------------------------------------------------------------------- image folder

# The fields a member name pattern may hold: {label} (a class name) and {number} in labelled
# splits, {id} in the others.
_FIELD = re.compile(r"\{(label|number|id)\}")


@dataclass(frozen=True)
class ImageFolder:
    """One split: a zip whose members match a name pattern such as `train/{label}.{number}.jpg`."""

    archive: str
    members: str

    @property
    def folder(self) -> str:
        """The folder the zip unpacks to (`train`): the members' first path part."""
        return self.members.split("/")[0]

    def parse(self, name: str) -> dict[str, str] | None:
        """The fields a member name carries ({"label": "cat", "number": "0"}), or None when the
        name does not match (a folder entry, a stray file)."""
        match = re.fullmatch(self._regex(), name)
        return match.groupdict() if match else None

    def member(self, **fields: object) -> str:
        """The member name for these fields: the inverse of `parse`."""
        return self.members.format(**fields)

    def _regex(self) -> str:
        parts = _FIELD.split(self.members)  # literal, field, literal, field, ...
        return "".join(
            re.escape(part) if i % 2 == 0 else rf"(?P<{part}>[^/]+?)" for i, part in enumerate(parts)
        )


@dataclass(frozen=True)
class ImageFolderLayout:
    splits: dict[str, ImageFolder]


def _image_folder(
    raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
) -> ImageFolderLayout:
    folders = {split: ImageFolder(**raw[split]) for split in splits}
    for split, folder in folders.items():
        if "/" not in folder.members or _FIELD.search(folder.folder):
            raise ValueError(
                f"[data.image_folder.{split}] members {folder.members!r}: name the split's folder first"
            )
        fields = set(_FIELD.findall(folder.members))
        wanted = {"label"} if split in labeled else {"id"}
        if not wanted <= fields:
            raise ValueError(
                f"[data.image_folder.{split}] members {folder.members!r} has no {{{wanted.pop()}}}"
            )
    return ImageFolderLayout(splits=folders)


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableLayout:
    """How one table is written: separator, quoting, and which columns hold what."""

    separator: str
    id_column: str
    text_columns: tuple[str, ...]  # one text, or a pair (premise, hypothesis)
    label_column: str | None  # None for a split without labels
    escapechar: str | None = None  # "\\" where inner quotes are written \"


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


def _table(raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]) -> TableFilesLayout:
    shared = {k: v for k, v in raw.items() if k not in splits}  # separator, columns... for every split
    files = {}
    for split in splits:
        own = {**shared, **raw[split]}
        layout = TableLayout(
            separator=own["separator"],
            id_column=own["id_column"],
            text_columns=tuple(own["text_columns"]),
            label_column=own["label_column"] if split in labeled else None,
            escapechar=own.get("escapechar"),
        )
        if not 1 <= len(layout.text_columns) <= 2:
            raise ValueError(
                f"[data.table] text_columns: one text or a pair, got {list(layout.text_columns)}"
            )
        files[split] = TableFile(file=own["file"], layout=layout, archive=own.get("archive"))
    return TableFilesLayout(splits=files)


# ----------------------------------------------------------------------------- loading

DataLayout = RecordLayout | ImageFolderLayout | TableFilesLayout


def layout_from(
    kind: str, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
) -> DataLayout:
    """The `[data.<kind>]` section as its layout; ValueError for an unknown kind."""
    if kind == "records":
        return _records(raw)
    if kind == "image_folder":
        return _image_folder(raw, splits, labeled)
    if kind == "table":
        return _table(raw, splits, labeled)
    raise ValueError(f"data kind {kind!r} is not one of {', '.join(KINDS)}")
