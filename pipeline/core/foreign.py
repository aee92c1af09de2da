"""Values that came from elsewhere (a file, Kaggle's answers, a downloaded summary), rendered for a
terminal, a log line or a spreadsheet cell.

A class name, a label id, Kaggle's failure message or a leaderboard field is the stranger's to
choose: an ESC or CSI sequence in it would move the cursor, recolour or retitle the terminal, a
bidi override would reverse what follows, a newline would forge a second line, and a megabyte of
it would bury the one line that matters. A cell starting `=`, `+`, `-` or `@` is a formula to a
spreadsheet (`=HYPERLINK(...)`, `+cmd|...`). So every such value is shown through here: what the
terminal would act on is escaped visibly (`\\x1b`, `\\u202e`, as Python's repr writes it), what is
too long is cut with a count of what was cut, and a CSV cell cannot start a formula.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

TEXT = 200  # characters of foreign free text (a message, a log line) a line shows
EACH = 60  # characters of each item of a foreign list
ITEMS = 20  # items of a foreign list a line shows
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list: what a spreadsheet reads as a formula


def _escaped(char: str) -> str:
    """One character as a terminal may safely receive it: printable ones as they are; the rest
    (C0, DEL, C1 with CSI, bidi overrides and isolates, line separators) as repr writes them."""
    return char if char.isprintable() else repr(char)[1:-1]


def _cut(text: str, limit: int) -> tuple[str, int]:
    """`text` escaped, as much of it as fits in `limit` characters, and how many were left out."""
    pieces, size = [], 0
    for count, char in enumerate(text):
        piece = _escaped(char)
        if size + len(piece) > limit:
            return "".join(pieces), len(text) - count
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces), 0


def _more(left: int, what: str) -> str:
    return f" ({left:,} more {what})" if left else ""


def text(value: object, limit: int = TEXT) -> str:
    """Foreign free text for a terminal: control characters and bidi overrides escaped, cut after
    `limit` characters with a count of the rest (`... (1,024 more characters)`)."""
    shown, left = _cut(str(value), limit)
    return f"{shown}...{_more(left, 'characters')}" if left else shown


def quoted(value: object, limit: int = EACH) -> str:
    """A refused value as a one-line refusal shows it: repr'd (quoted, everything a terminal would
    act on escaped), cut to `limit` characters with a count of the rest."""
    value = str(value)
    whole = repr(value) if len(value) <= limit else ""
    if whole and len(whole) <= limit:
        return whole
    _, left = _cut(value, limit - 5)  # room for the quotes and the dots
    # repr of what was kept: the same quoting and escapes as a value shown whole
    kept = repr(value[: len(value) - left])
    return f"{kept[:-1]}...{kept[-1]}{_more(left, 'characters')}"  # closed by the quote it opened with


def listed(values: Iterable[object], limit: int = ITEMS, each: int = EACH) -> str:
    """Foreign items (class names, files) joined with ", " for a line: each escaped and cut, and
    past `limit` of them, how many more there are (`..., and 1,396 more`)."""
    items = list(values)
    shown = ", ".join(text(item, each) for item in items[:limit])
    return shown + (f", ... and {len(items) - limit:,} more" if len(items) > limit else "")


def cell(value: object) -> object:
    """A value as a CSV cell a spreadsheet may open: a string starting a formula gets a leading
    single quote (OWASP's rule); numbers, and strings that read as a finite number (`-0.5`), stay
    as they are. A cell already quoted is left alone, so writing a board read back changes nothing."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    try:
        if math.isfinite(float(value)):
            return value
    except ValueError:
        pass
    return "'" + value


def safe_cells(frame):
    """A copy of a pandas DataFrame whose text cells (and text index) cannot start a formula (`cell`),
    for a CSV written with foreign strings in it: class names, a downloaded summary's fields."""
    from pandas.api.types import is_object_dtype, is_string_dtype

    def texts(values) -> bool:  # object columns, and pandas 3's own string dtype
        return is_object_dtype(values.dtype) or is_string_dtype(values.dtype)

    frame = frame.copy()
    for name in frame.columns:
        if texts(frame[name]):
            frame[name] = frame[name].map(cell)
    if texts(frame.index):
        frame.index = frame.index.map(cell)
    return frame
