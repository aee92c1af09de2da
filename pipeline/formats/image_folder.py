"""Image folders with the label in each file's path: a folder per split (or the zip Kaggle ships
it in), the label in each path for labelled splits and the id for the others (dogs vs cats:
`train/cat.0.jpg`, `test/1.jpg`; a folder per class: `train/{label}/{number}.jpg`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.paths import check_relative, inside, shown
from pipeline.formats.base import ImageFiles, layout_of, register

# The fields a member name pattern may hold: {label} (a class name) and {number} in labelled
# splits, {id} in the others.
_FIELD = re.compile(r"\{(label|number|id)\}")


@dataclass(frozen=True)
class ImageFolder:
    """One split: files (or a zip's members) that match a pattern such as `train/{label}.{number}.jpg`."""

    members: str
    archive: str | None = None  # the zip the split may come in; None: a folder only

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


def image_folder_of(spec) -> ImageFolderLayout:
    """The competition's image folders; ValueError for a competition of another kind."""
    return layout_of(spec, ImageFolderLayout)


def _image_folder(
    raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
) -> ImageFolderLayout:
    folders = {split: ImageFolder(**raw[split]) for split in splits}
    for split, folder in folders.items():
        if folder.archive is not None:
            check_relative(folder.archive, f"[data.image_folder.{split}] archive")
        check_relative(folder.members, f"[data.image_folder.{split}] members")
        if set("{}") & set(_FIELD.sub("", folder.members)):  # str.format would read anything in braces
            raise ValueError(
                f"[data.image_folder.{split}] members {shown(folder.members)}: only {{label}}, "
                "{number} and {id} may stand in braces"
            )
        if "/" not in folder.members or _FIELD.search(folder.folder):
            raise ValueError(
                f"[data.image_folder.{split}] members {shown(folder.members)}: name the split's folder first"
            )
        named = _FIELD.findall(folder.members)
        if len(named) != len(set(named)):  # a regex names a group once: `{label}.{label}` would not parse
            twice = sorted({f for f in named if named.count(f) > 1})
            raise ValueError(
                f"[data.image_folder.{split}] members {shown(folder.members)}: {{{twice[0]}}} stands twice"
            )
        fields = set(named)
        wanted = {"label"} if split in labeled else {"id"}
        if not wanted <= fields:
            raise ValueError(
                f"[data.image_folder.{split}] members {shown(folder.members)} has no {{{wanted.pop()}}}"
            )
    return ImageFolderLayout(splits=folders)


@register
class ImageFolderFormat(ImageFiles):
    name = "image_folder"

    def layout(
        self, raw: dict[str, Any], splits: tuple[str, ...], labeled: tuple[str, ...]
    ) -> ImageFolderLayout:
        return _image_folder(raw, splits, labeled)

    def entries(self, spec) -> dict[str, tuple[str, str | None]]:
        return {split: (folder.folder, folder.archive) for split, folder in layout_of(spec).splits.items()}

    def folder(self, root: Path, spec, split: str) -> Path:
        return inside(root, layout_of(spec).splits[split].folder, f"[data.image_folder.{split}] members")

    def images(self, root: Path, spec, split: str) -> list[tuple[str, Path, str | None]]:
        """(id, path, class name or None) of every image of the split, as its file names say."""
        folder = layout_of(spec).splits[split]
        top = self.folder(root, spec, split)
        found = []
        for path in top.rglob("*"):
            if not path.is_file():
                continue
            name = path.relative_to(root).as_posix()
            path = inside(root, name, "image", root)  # a link out of the data dir is refused
            fields = folder.parse(name)
            if fields is None:
                raise PetalsError(f"{root / name}: not a {split} image name ({folder.members})")
            found.append((fields.get("id", path.stem), path, fields.get("label")))  # train: "cat.0"
        return found
