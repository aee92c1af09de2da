"""One containment rule for every path petals derives from input.

Competition files get shared, label CSVs and archives come from strangers, and Kaggle's answers
name files: none of them may make petals read or write outside the folder a path belongs to.
A name (a competition's, a run's, a kernel's) is one path component from a small alphabet; a
relative path is relative, has no `..`, and still lies inside its folder once symlinks are
resolved. A refusal is a PetalsError, so the user sees one line naming the field, the file it came
from and the value (cut short), and the stage exits 2 before writing anything.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import quoted

# Letters, digits, dot, dash and underscore; not starting with a dot or dash (no hidden files, no
# option look-alikes); at most 100 characters (Kaggle's slugs are shorter).
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
SHOWN = 60  # characters of a refused value the line shows


def shown(value: object) -> str:
    """A refused value as the line shows it: repr'd (control characters visible), cut short with a
    count of the rest (`pipeline.core.foreign.quoted`)."""
    return quoted(value, SHOWN)


def _refuse(field: str, source: object, value: object, why: str) -> PetalsError:
    where = f"{source}: " if source else ""
    return PetalsError(f"{where}{field} {shown(value)} {why}")


def check_name(value: object, field: str, source: object = None) -> str:
    """`value` if it is a plain name (NAME, never `.` or `..`); else the one-line refusal."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or value.strip(".") == "":
        raise _refuse(field, source, value, "is not a plain name (letters, digits, '.', '-', '_')")
    return value


def check_relative(value: object, field: str, source: object = None) -> str:
    """`value` if it is a relative path that stays below where it starts (no `..`, not absolute,
    no NUL or backslash, not empty); the lexical half of `inside`, for paths checked where they
    are loaded, before the folder they belong to is known."""
    if not isinstance(value, str) or not value or "\0" in value or "\\" in value:
        raise _refuse(field, source, value, "is not a relative path")
    parts = PurePosixPath(value).parts
    if value.startswith("/") or ".." in parts or not parts or parts == (".",):
        raise _refuse(field, source, value, "leaves its folder (absolute, or with '..')")
    return value


def inside(root: Path, value: str, field: str, source: object = None) -> Path:
    """`root / value`, refused unless it lies inside `root` once symlinks are resolved: a link in
    a shared folder pointing at `/etc` is as much a way out as `../`."""
    check_relative(value, field, source)
    path = Path(root) / value
    try:
        base, resolved = Path(root).resolve(), path.resolve()
    except (OSError, RuntimeError):  # a link loop: Python 3.11 raises RuntimeError, later ones OSError
        raise _refuse(field, source, value, "cannot be resolved (a loop of links)") from None
    if not resolved.is_relative_to(base):
        raise _refuse(field, source, value, f"leaves {root} (a link out of it)")
    return path
