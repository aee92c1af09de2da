"""Which group each labelled example belongs to, and a look for groups no one named.

Kaggle's data is often grouped: several photos of one patient, one whale or one plant, several
passages of one essay, several rows of one user. A model scored on rows whose group it trained on
scores what it memorised: on real passages grouped by document, a random val split said 0.57 where
the held-out documents scored 0.27. So a competition names what groups its rows (`[data]
group_column`, or `group_by_id`), and every part petals holds out (the val split, each fold) keeps
a group whole on one side; the out-of-fold rows that blends, thresholds, pseudo-labels and CV
choices are judged on inherit it from the folds.

Where no group is named, `suspected` looks for the two signs that are cheap to see (a column whose
values repeat across rows of one class; identical texts, or identical image files) and says so in
one line, so that a user can name the group before trusting a score.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from competition import CompetitionSpec
from pipeline.core.errors import PetalsError
from pipeline.core.foreign import text
from pipeline.core.paths import shown
from pipeline.formats.base import format_of

log = logging.getLogger(__name__)

# A column looks like a group when its values repeat (at most half as many values as rows), and
# almost every value that repeats stays within one class: a document's passages share its label.
REPEATS = 0.5
WITHIN_ONE_CLASS = 0.95
# Rows that repeat another's input exactly, past which a random split is no longer honest.
DUPLICATES = 0.01
# A group column's values that say "no group" (pandas writes NaN as "" and str() of it as "nan"):
# refused, not read as one group holding every such row.
MISSING = ("", "nan", "NaN", "NAN", "None", "none", "null", "NULL", "NA", "N/A", "n/a", "<NA>")


def group_ids(root: str, spec: CompetitionSpec, splits: Sequence[str], ids: np.ndarray) -> np.ndarray | None:
    """The group of each of `ids` (examples of `splits` of the data dir at `root`), as strings; None
    where the competition names no group. One line for an id the group column does not list."""
    if spec.group_by_id is not None:  # an id without the separator is a group of its own
        return np.array([str(i).rsplit(spec.group_by_id, 1)[0] for i in ids], dtype=object)
    if spec.group_column is None:
        return None
    return _looked_up(root, spec, _group_column(root, spec, splits), ids)


def _group_column(root: str, spec: CompetitionSpec, splits: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for split in splits:
        found.update(_column(root, spec, split, spec.group_column))
    return found


def _looked_up(root: str, spec: CompetitionSpec, found: dict[str, str], ids: np.ndarray) -> np.ndarray:
    missing = next((i for i in ids if str(i) not in found), None)
    if missing is not None:
        raise PetalsError(f"{root}: example {shown(missing)} has no {spec.group_column!r} (its group)")
    return np.array([found[str(i)] for i in ids], dtype=object)


def training_groups(root: str, spec: CompetitionSpec, ids: np.ndarray) -> np.ndarray:
    """The group of each training example, for a split inside the training part (an inner CV): an
    example the group column does not list (a pseudo-labelled test example) is a group of its own."""
    if spec.group_by_id is None and spec.group_column is None:
        return np.asarray(ids, dtype=object)
    if spec.group_by_id is not None:
        return group_ids(root, spec, (), ids)
    found = _group_column(root, spec, spec.labeled_splits)
    return np.array([found.get(str(i), f"example {i}") for i in ids], dtype=object)


def held_out_groups(data_dir: Path, spec: CompetitionSpec, ids: np.ndarray) -> np.ndarray | None:
    """The group of each held-out example of a fetched data dir (its labelled splits read: a val
    split or out-of-fold rows), None where the competition names none."""
    return held_out_grouping(data_dir, spec)(ids)


def held_out_grouping(data_dir: Path, spec: CompetitionSpec) -> Callable[[np.ndarray], np.ndarray | None]:
    """`held_out_groups` for several sets of ids of one data dir (`make compare`'s two runs and the
    rows they share), its group column read once."""
    if not spec.grouped:
        return lambda ids: None
    from pipeline.data.manifest import locate_data

    root = locate_data(data_dir)
    if spec.group_by_id is not None:  # the ids name their groups: nothing to read
        return functools.partial(group_ids, root, spec, ())
    return functools.partial(_looked_up, root, spec, _group_column(root, spec, spec.labeled_splits))


def _column(root: str, spec: CompetitionSpec, split: str, column: str) -> dict[str, str]:
    read = format_of(spec).columns(Path(root), spec, split)
    if read is None:
        raise PetalsError(
            f"{spec.file}: [data] group_column {shown(column)}: {spec.format} data has no columns; "
            "group the rows by their ids instead ([data] group_by_id = the separator)"
        )
    path, rows = read
    if column not in rows.columns:
        raise PetalsError(f"{path}: no column {shown(column)} ([data] group_column)")
    # "P1 " is P1 (a spreadsheet's stray space would split the group); a value that is blank, or
    # that a writer puts where it had none (NaN, None, NA), would merge rows of unrelated groups.
    values = rows[column].astype(str).str.strip()
    missing = values.isin(MISSING)
    if missing.any():
        row = int(np.flatnonzero(missing.to_numpy())[0])
        value = values.iloc[row]  # one of MISSING: nothing of the file's own is printed
        said = "an empty" if value == "" else f"a missing value's marker ({value!r}) as its"
        raise PetalsError(f"{path}: {shown(rows.index[row])} has {said} {column!r}: name each row's group")
    return dict(zip(rows.index.astype(str), values, strict=True))


def digest(ids: np.ndarray, groups: np.ndarray) -> str:
    """What the grouping says of these examples, as a short hash: a fold table dealt by it is
    stored under it, so one dealt before a group was named (or by another) is never taken for it."""
    text_ = "\n".join(f"{i},{g}" for i, g in sorted(zip(ids.astype(str), groups.astype(str), strict=True)))
    return hashlib.sha256(text_.encode()).hexdigest()[:8]


def split_groups(held: np.ndarray, kept: np.ndarray, groups: np.ndarray) -> list[str]:
    """The groups with rows on both sides of a split (row numbers `held` and `kept`): none, where
    the split honours them."""
    return sorted(set(groups[held]) & set(groups[kept]))


# ----------------------------------------------------------------------------- groups no one named


@functools.cache
def _said(line: str) -> None:
    log.warning(line)  # once a process: train, evaluate and predict each make the val split


def warn_if_suspected(
    root: str, spec: CompetitionSpec, splits: tuple[str, ...], ids: np.ndarray, labels: np.ndarray
) -> None:
    """One warning line where the labelled rows look grouped and no group is named; looked for once
    a process for a data dir's splits (train, evaluate and predict each make the val split)."""
    key = (root, str(spec.file), tuple(splits))
    if spec.grouped or key in _LOOKED:
        return
    _LOOKED.add(key)
    line = suspected(root, spec, splits, ids, labels)
    if line:
        _said(line)


_LOOKED: set[tuple[str, str, tuple[str, ...]]] = set()


def suspected(
    root: str, spec: CompetitionSpec, splits: Sequence[str], ids: np.ndarray, labels: np.ndarray
) -> str | None:
    """Why the examples `ids` (of `splits`, their targets `labels`) look grouped, in a line, or None:
    a column of their CSV whose values repeat within one class, or inputs that repeat exactly
    (texts; image files of equal bytes)."""
    reads = [format_of(spec).columns(Path(root), spec, split) for split in splits]
    if all(read is not None for read in reads):
        import pandas as pd

        rows = pd.concat([read[1] for read in reads]).loc[ids.astype(str)]  # in the examples' order
        own = _own_columns(spec, splits)
        found = _suspected_column(rows.drop(columns=own), labels) or _repeated_texts(rows, spec, splits)
        return found or _repeated_images(root, spec, splits)  # a label CSV beside image files
    return _repeated_images(root, spec, splits)


def _own_columns(spec: CompetitionSpec, splits: Sequence[str]) -> list[str]:
    """The columns petals reads as the id, the label and the texts: never a group's."""
    from pipeline.formats.base import layout_of

    found = set()
    for split in splits:
        own = layout_of(spec).splits[split]
        own = getattr(own, "layout", own)  # a table's file holds its layout
        found |= {own.id_column, own.label_column, *getattr(own, "text_columns", ())}
    return sorted(c for c in found if c)


def _suspected_column(rows, labels: np.ndarray) -> str | None:
    """A column whose values repeat (at most half as many as rows), each repeated value within one
    class, and more values than classes (not the label written otherwise)."""
    if labels.ndim != 1:
        return None
    for column in rows.columns:
        values = rows[column].to_numpy(str)
        unique, counts = np.unique(values, return_counts=True)
        if len(unique) <= len(np.unique(labels)) or len(unique) > REPEATS * len(values):
            continue
        repeated = unique[counts > 1][:1000]  # enough to judge, bounded in time
        within = np.mean([len(np.unique(labels[values == v])) == 1 for v in repeated])
        if within >= WITHIN_ONE_CLASS:
            name = text(column, 40)
            return (
                f"the labelled rows look grouped: column {name!r} holds {len(unique):,} values over "
                f"{len(values):,} rows, each repeated within one class; if its rows belong together (one "
                f"document, patient or object), name it ([data] group_column = {name!r}), or the val and "
                "CV scores count groups the model has seen"
            )
    return None


def _repeated_texts(rows, spec: CompetitionSpec, splits: Sequence[str]) -> str | None:
    from pipeline.formats.base import layout_of

    own = getattr(layout_of(spec).splits[splits[0]], "layout", None)
    if own is None or not getattr(own, "text_columns", ()):
        return None
    texts = rows[list(own.text_columns)].astype(str).agg("\x00".join, axis=1)
    repeats = int(texts.duplicated(keep=False).sum())
    if repeats <= DUPLICATES * len(texts):
        return None
    return (
        f"the labelled rows look grouped: {repeats:,} of {len(texts):,} texts repeat another's exactly, "
        "so a random split puts copies on both sides; drop the copies, or name what groups them "
        "([data] group_column)"
    )


def _repeated_images(root: str, spec: CompetitionSpec, splits: Sequence[str]) -> str | None:
    """Image files of equal bytes (sizes compared first: only files of one size are hashed)."""
    from pipeline.formats.base import ImageFiles

    form = format_of(spec)
    if not isinstance(form, ImageFiles):
        return None
    paths = [path for split in splits for _, path, _ in form.images(Path(root), spec, split)]
    by_size: dict[int, list[Path]] = {}
    for path in paths:
        by_size.setdefault(path.stat().st_size, []).append(path)
    same = [group for group in by_size.values() if len(group) > 1]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for group in same for p in group]
    repeats = len(digests) - len(set(digests)) if digests else 0
    if repeats <= DUPLICATES * len(paths):
        return None
    return (
        f"the labelled rows look grouped: {repeats:,} of {len(paths):,} images repeat another's bytes "
        "exactly, so a random split puts copies on both sides; drop the copies, or name what groups "
        "them ([data] group_by_id, or group_column in the label CSV)"
    )
