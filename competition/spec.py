"""The competition spec: one frozen dataclass loaded from `competition/<name>/competition.toml`.

A competition is its folder: `competition.toml` names its task (pipeline/tasks/) and its data
format (pipeline/formats/), `classes.txt` lists its classes in id order (a regression, whose
submission is a number, has none), and `recipes/`
holds the recipes it overrides (the task's cpu, gpu and tpu recipes serve otherwise). Pipeline
code reads everything competition-specific from here, so a competition of a known task and
format needs only its file and class list.

The spec is plain data at the bottom floor: its task and format are names, and its format's table
(`[data.<format>]`) is kept as written. The floors above look the names up in their registries:
the format reads its table (`pipeline.formats.layout_of`), and `pipeline.tasks.competitions`
assembles the `Competition`, the spec with its task and format, checked against each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from competition.metric import Metric, get_metric
from competition.task_names import task_name
from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, read_small_text
from pipeline.core.paths import check_name, check_relative, shown

SPEC_DIR = Path(__file__).resolve().parent
SPEC_FILE = "competition.toml"
CLASSES_FILE = "classes.txt"
# A class id per row, the probability of class 1, the labels a row holds ("scab rust"), a
# probability per label, one column each (Jigsaw's `id,toxic,...,identity_hate`), or a number (a
# regression's: Pawpularity's score); the competition's task says which it writes
# (`Task.submission_kinds`).
SUBMISSION_VALUES = ("class", "probability", "labels", "label_probabilities", "number")
# How Kaggle takes a submission: a CSV uploaded through the API, or (a code competition) the
# submission file a notebook version writes, sent with the API's code-submission call.
SUBMITTED_BY = ("file", "code")
# Kaggle's competition slugs, as in its URLs: lower-case letters, digits and dashes.
SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")


@dataclass(frozen=True)
class CompetitionSpec:
    name: str
    title: str
    slugs: tuple[str, ...]
    classes: tuple[str, ...]
    metric: Metric
    task: str  # the kind of problem: a name in pipeline/tasks/'s registry
    format: str  # how its files are laid out: a name in pipeline/formats/'s registry
    format_table: dict[str, Any] | None = field(hash=False)  # `[data.<format>]`, read by the format
    splits: tuple[str, ...]
    labeled_splits: tuple[str, ...]
    sample_submission: str
    sample_submission_archive: str | None  # the zip Kaggle ships it in (sample_submission.csv.zip)
    split_counts: dict[str, int] = field(hash=False)
    id_column: str
    label_column: str
    submission_value: str  # one of SUBMISSION_VALUES
    submitted_by: str  # one of SUBMITTED_BY
    submission_file: str  # the file a code competition's notebook writes (submission.csv)
    # Training transforms (AugmentConfig's names) after which an example keeps its label: a
    # mirrored flower is the same flower, a mirrored digit or sentence may not be.
    keeps_label: frozenset[str]
    file: Path = field(hash=False, compare=False)  # the competition file, named in its errors
    # What groups the labelled rows (one patient's photos, one document's passages): held-out parts
    # never split a group. A column of the label CSV or table (`[data] group_column`), or the id's
    # text before its last separator (`[data] group_by_id = "_"`: `doc7_3` is in group `doc7`).
    group_column: str | None = None
    group_by_id: str | None = None
    # One 0/1 column per label in the labelled rows (`[data] label_columns`), or a number in each of
    # them: the classes are these columns, in order (pipeline/formats/labels.py reads them).
    label_columns: tuple[str, ...] = ()
    # A submission's value columns after the id: `[submission] label_columns`, or the label columns
    # for a probability per label, else the one `label_column`.
    submission_columns: tuple[str, ...] = ()
    # A number submission's range as the competition states it (`[submission] range = [1, 100]`:
    # Pawpularity's scores): predictions are clipped to it; None, to the labelled rows' range.
    value_range: tuple[float, float] | None = None
    # Numeric columns of an example's row read beside its image (`[data] feature_columns`:
    # Pawpularity's 12 photo flags), in order: what an `image_table` input reads.
    feature_columns: tuple[str, ...] = ()

    @property
    def grouped(self) -> bool:
        return self.group_column is not None or self.group_by_id is not None

    @property
    def column_per_label(self) -> bool:
        """A submission row holds a value per label or per number, each in its own column (Jigsaw's,
        Feedback Prize ELL's)."""
        return self.submission_value == "label_probabilities" or _numbers(
            self.submission_value, self.label_columns
        )

    @property
    def code_competition(self) -> bool:
        """Scored by running a notebook (internet off) on the hidden test set, not by a CSV upload."""
        return self.submitted_by == "code"

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def default_slug(self) -> str:
        return self.slugs[0]

    def is_labeled(self, split: str) -> bool:
        return split in self.labeled_splits

    @property
    def score_key(self) -> str:
        """The history column and metrics key of the competition's metric on val: `val_macro_f1`."""
        return f"val_{self.metric.name}"


# Classes a competition may have: the head, the probabilities and the reports grow with them.
# Kaggle's largest are Google Landmarks (81,313), Herbarium 2021 (64,500) and iNaturalist (10,000).
MAX_CLASSES = 100_000
# Their list is read whole: 100,000 names of up to ~80 characters (Herbarium's are species names).
MAX_CLASSES_BYTES = 8 * 2**20


def _read_classes(folder: Path, value: object) -> tuple[str, ...]:
    """The class list beside the competition file: read by the rule for shared folders (a link out
    of the folder, a FIFO or a file over MAX_CLASSES_BYTES refused before a byte is read)."""
    relative = check_relative(value, "classes_file")
    text = read_small_text(folder, relative, "classes_file", limit=MAX_CLASSES_BYTES)
    names = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(set(names)) != len(names):
        raise ValueError(f"{folder / value}: class names are not unique")
    if len(names) > MAX_CLASSES:
        many = f"{len(names)} classes, more than {MAX_CLASSES}"
        raise ValueError(f"{folder / value}: {many} (no Kaggle competition has more)")
    return names


def _classes(
    folder: Path, raw: dict, label_columns: tuple[str, ...], value: str, submission: dict
) -> tuple[str, ...]:
    """The class list: classes.txt; or, for data with a column per label, those columns, in order,
    where the file is omitted (one it names, or one beside it, must list the same). A competition
    whose submission is a number has none: its one output column is the target, named as the
    submission names it (`classes` is then `("Pawpularity",)`), or its label columns, in order."""
    if value == "number":
        return label_columns or (_text(submission, "label_column", "[submission] label_column"),)
    if label_columns and "classes_file" not in raw and not (folder / CLASSES_FILE).exists():
        return label_columns
    classes = _read_classes(folder, raw.get("classes_file", CLASSES_FILE))
    if label_columns and classes != label_columns:
        raise ValueError(
            f"{folder / raw.get('classes_file', CLASSES_FILE)}: lists {', '.join(classes)}; [data] "
            f"label_columns are {', '.join(label_columns)} (the same, in order, or omit the file)"
        )
    return classes


def _numbers(value: str, label_columns: tuple[str, ...]) -> bool:
    """A number in each of several columns (Feedback Prize ELL's six scores), not one."""
    return value == "number" and bool(label_columns)


def _submission_columns(submission: dict, value: str, label_columns: tuple[str, ...]) -> tuple[str, ...]:
    """A submission's value columns: a column per label for `label_probabilities`, or per number
    of several (named in `[submission] label_columns`, else the data's), else `label_column`."""
    if value != "label_probabilities" and not _numbers(value, label_columns):
        return (_text(submission, "label_column", "[submission] label_column"),)
    if "label_columns" in submission:
        return _texts(submission["label_columns"], "[submission] label_columns")
    if not label_columns:
        raise PetalsError("[submission] value label_probabilities needs label_columns ([data]'s or its own)")
    return label_columns


def _table(raw: dict, key: str, field: str, default: dict | None = None) -> dict:
    """`raw[key]`, a TOML table (`[data]`): one line naming it otherwise."""
    value = raw[key] if default is None else raw.get(key, default)
    if not isinstance(value, dict):
        raise PetalsError(f"{field} {shown(value)} is not a table")
    return value


def check_text(value: object, field: str) -> str:
    """`value` if it is a non-empty string: `id_column = {a = 1}` is refused naming the key here,
    where the file is loaded, not as a TypeError wherever the column is first looked up."""
    if not isinstance(value, str) or not value:
        raise PetalsError(f"{field} {shown(value)} is not a string")
    return value


def _text(table: dict, key: str, field: str, default: str | None = None) -> str:
    return check_text(table[key] if default is None else table.get(key, default), field)


def _texts(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise PetalsError(f"{field} {shown(value)} is not a list of strings")
    return tuple(value)


def _slugs(value: object) -> tuple[str, ...]:
    """The Kaggle slugs: a non-empty list, each a slug as Kaggle writes them (never a path)."""
    if not isinstance(value, list) or not value:
        raise PetalsError(f"slugs {shown(value)} is not a list of Kaggle slugs")
    for slug in value:
        if not isinstance(slug, str) or not SLUG.fullmatch(slug):
            raise PetalsError(f"slugs: {shown(slug)} is not a Kaggle slug (a-z, 0-9 and '-')")
    return tuple(value)


def _counts(value: object) -> dict[str, int]:
    """`[data.counts]`: each split's count a whole number, 0 or more (TOML's inf and nan refused)."""
    if not isinstance(value, dict):
        raise PetalsError(f"[data.counts] {shown(value)} is not a table of counts")
    for key, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PetalsError(
                f"[data.counts] {key} = {shown(count)} is not a count (a whole number, 0 or more)"
            )
    return dict(value)


def _splits(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise PetalsError(f"{field} {shown(value)} is not a list of split names")
    return tuple(check_name(split, field) for split in value)


# A separator the id is cut at: a few characters (`_`, `-`, `/`), never a pattern (a regular
# expression from a shared file could take exponential time on an id).
MAX_SEPARATOR = 8


def _grouping(data: dict) -> dict[str, str | None]:
    """`[data] group_column` or `group_by_id`, at most one, each a string."""
    column, separator = data.get("group_column"), data.get("group_by_id")
    if column is not None and separator is not None:
        raise PetalsError("[data] group_column and group_by_id: name one way the rows are grouped")
    if column is not None:
        check_text(column, "[data] group_column")
    if separator is not None and not (isinstance(separator, str) and 0 < len(separator) <= MAX_SEPARATOR):
        raise PetalsError(
            f"[data] group_by_id {shown(separator)} is not a separator of 1 to {MAX_SEPARATOR} characters"
        )
    return {"group_column": column, "group_by_id": separator}


def competition_file(name: str) -> Path:
    """`competition/<name>/competition.toml`, or `name` itself when it is a path to a TOML file;
    a name is a plain name (ValueError for `../x`: it may come from a downloaded summary)."""
    if name.endswith(".toml"):
        return Path(name)
    try:
        return SPEC_DIR / check_name(name, "competition") / SPEC_FILE
    except PetalsError as err:
        raise ValueError(str(err)) from None


def competition_folder(name: str) -> Path:
    """The folder holding a competition's file, class list and recipes."""
    return competition_file(name).parent


def known_competitions() -> list[str]:
    return sorted(p.parent.name for p in SPEC_DIR.glob(f"*/{SPEC_FILE}"))


class CompetitionFileError(PetalsError, ValueError):
    """A competition file refused: a ValueError to the code that loads specs, and one line with
    exit 2 to the user of any stage that reaches it (the CLI prints PetalsErrors)."""


@cache
def load_spec(name: str = DEFAULT_COMPETITION) -> CompetitionSpec:
    """Load `competition/<name>/competition.toml` (or a path to a TOML file) into a CompetitionSpec."""
    try:
        return _load(name)
    except ValueError as err:
        raise CompetitionFileError(str(err)) from None


def _load(name: str) -> CompetitionSpec:
    path = competition_file(name)
    if not path.is_file():
        known = ", ".join(known_competitions())
        raise ValueError(f"unknown competition {name!r}: no {path} (known: {known})")
    try:  # read by the rule for shared folders; its line names the file
        raw = load_toml(path.parent, path.name, "competition file", path.parent)
    except PetalsError as err:
        raise ValueError(str(err)) from None
    try:
        spec = _spec_from(raw, path)
    except (KeyError, TypeError) as err:
        key = f"key {err}" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"{path}: not a competition file ({key})") from None
    except PetalsError as err:  # a field refused (pipeline/core/paths.py): the file named first
        raise ValueError(f"{path}: {err}") from None
    if spec.column_per_label and len(spec.submission_columns) != spec.num_classes:
        raise ValueError(
            f"{path}: [submission] label_columns name {len(spec.submission_columns)} columns for "
            f"{spec.num_classes} labels"
        )
    unknown = set(spec.labeled_splits) - set(spec.splits)
    if unknown:
        raise ValueError(f"{path}: labeled_splits {sorted(unknown)} are not among splits")
    return spec


def _task(raw: dict) -> str:
    """`task = ...`, or the task `input = ...` and `target = ...` compose (not both ways at once)."""
    pair = [key for key in ("input", "target") if key in raw]
    if "task" in raw and pair:
        raise ValueError(f"names a task and {' and '.join(pair)}: one or the other")
    if "task" in raw or not pair:
        return check_name(raw["task"], "task")  # neither: the KeyError names `task`
    return task_name(_text(raw, "input", "input"), _text(raw, "target", "target"))


def _spec_from(raw: dict, path: Path) -> CompetitionSpec:
    """The spec a parsed file describes: each field checked for its type, so a table where a string
    belongs (`id_column = {a = 1}`) is one line naming the key, never a traceback further on."""
    data, submission = _table(raw, "data", "[data]"), _table(raw, "submission", "[submission]")
    try:
        metric = get_metric(_text(raw, "metric", "metric"))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    value = _text(submission, "value", "[submission] value", "class")
    if value not in SUBMISSION_VALUES:
        raise ValueError(f"{path}: submission value {value!r} is not one of {', '.join(SUBMISSION_VALUES)}")
    by = _text(submission, "by", "[submission] by", "file")
    if by not in SUBMITTED_BY:
        raise ValueError(f"{path}: submission by {by!r} is not one of {', '.join(SUBMITTED_BY)}")
    splits = _splits(data["splits"], "[data] splits")
    labeled = _splits(data["labeled_splits"], "[data] labeled_splits")
    form = check_name(data["format"], "[data] format")
    label_columns = _texts(data["label_columns"], "[data] label_columns") if "label_columns" in data else ()
    if len(set(label_columns)) != len(label_columns) or len(label_columns) > MAX_CLASSES:
        raise ValueError(f"{path}: [data] label_columns name a column twice, or more than {MAX_CLASSES}")
    columns = _submission_columns(submission, value, label_columns)
    table = data.get(form)  # the format reads it (pipeline.formats.layout_of), and names what is missing
    if table is not None and not isinstance(table, dict):
        raise ValueError(f"{path}: [data.{form}] is not a table")
    return CompetitionSpec(
        name=check_name(raw["name"], "name"),  # names the leaderboard and the run dirs
        title=_text(raw, "title", "title"),
        slugs=_slugs(raw["slugs"]),
        classes=_classes(path.parent, raw, label_columns, value, submission),
        metric=metric,
        task=_task(raw),
        format=form,
        format_table=table,
        splits=splits,
        labeled_splits=labeled,
        sample_submission=check_relative(data["sample_submission"], "[data] sample_submission"),
        sample_submission_archive=None
        if data.get("sample_submission_archive") is None
        else check_relative(data["sample_submission_archive"], "[data] sample_submission_archive"),
        split_counts=_counts(data["counts"]),
        id_column=_text(submission, "id_column", "[submission] id_column"),
        label_column=columns[0],  # the one value column, or the first label's (named in errors)
        submission_value=value,
        submitted_by=by,
        submission_file=check_name(submission.get("file", "submission.csv"), "[submission] file"),
        keeps_label=frozenset(
            _texts(_table(raw, "augment", "[augment]", {}).get("keeps_label", []), "[augment] keeps_label")
        ),
        file=path,
        **_grouping(data),
        label_columns=label_columns,
        submission_columns=columns,
        value_range=_range(submission.get("range")),
        feature_columns=_texts(data.get("feature_columns", []), "[data] feature_columns"),
    )


def _range(value: object) -> tuple[float, float] | None:
    """`[submission] range`: two finite numbers, the first below the second."""
    if value is None:
        return None
    numbers = value if isinstance(value, list) and len(value) == 2 else []
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < float("inf") for v in numbers
    ):
        raise PetalsError(f"[submission] range {shown(value)} is not two finite numbers [low, high]")
    if not numbers[0] < numbers[1]:
        raise PetalsError(f"[submission] range {shown(value)}: low must be below high")
    return float(numbers[0]), float(numbers[1])
