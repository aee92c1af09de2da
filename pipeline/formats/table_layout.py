"""How one table of texts is written: plain data the competition file gives, read without pandas
(the spec loads it; the reader, tables.py, is the one that needs pandas)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableLayout:
    """How one table is written: separator, quoting, and which columns hold what."""

    separator: str
    id_column: str
    text_columns: tuple[str, ...]  # one text, or a pair (premise, hypothesis)
    label_column: str | None  # None for a split without labels
    escapechar: str | None = None  # "\\" where inner quotes are written \"
    labels_are: str = "ids"  # class ids 0..n-1, or "numbers" (a regression's target: CommonLit's)
