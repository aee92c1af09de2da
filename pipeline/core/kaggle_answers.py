"""Kaggle's answers, checked for the shape petals reads before anything uses them.

The official client reads an answer's JSON into typed objects, but it raises on what it cannot
read (a status it has no name for: KeyError; a list where a string belongs: TypeError) and fills
other fields untyped (a submission's ref may come as a dict, a file name as a number). Whoever
answers in Kaggle's place can send any of it: each becomes one line naming the value, shown
safely, never a traceback and never a value of the wrong type on the leaderboard.
"""

from __future__ import annotations

import contextlib
from typing import Any

import requests

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import quoted, text


class UnreadableAnswer(PetalsError):
    """Kaggle answered something the client cannot read: not JSON, a status it does not know, a
    field of the wrong type."""


@contextlib.contextmanager
def answers_checked(action: str) -> Any:
    """Every answer read inside that the client cannot turn into its objects becomes one line,
    UnreadableAnswer, naming what it choked on (shown safely). kagglesdk reads an answer's JSON into
    typed fields: a status it has no name for raises KeyError, a list where a string belongs a
    TypeError or AttributeError, a body that is not JSON a ValueError, a deeply nested one a
    RecursionError; each would otherwise reach the user as a traceback."""
    from kagglesdk.kaggle_http_client import KaggleHttpClient

    prepare = KaggleHttpClient._prepare_response

    def prepare_checked(self, response_type, http_response):
        try:
            return prepare(self, response_type, http_response)
        except requests.HTTPError:
            raise
        except KeyError as err:  # an enum's unknown name: the value itself is the argument
            said = f"a value it does not know, {quoted(err.args[0] if err.args else '')} (a new status?)"
        except (ValueError, TypeError, AttributeError, RecursionError, OverflowError) as err:
            said = f"{type(err).__name__}: {text(err, 120)}"
        raise UnreadableAnswer(
            f"Kaggle's answer while {action} is not one this kaggle client can read ({said}); "
            "rerun later, and if it stays so, upgrade the kaggle package"
        )

    KaggleHttpClient._prepare_response = prepare_checked
    try:
        yield
    finally:
        KaggleHttpClient._prepare_response = prepare


def whole_number(value: object) -> bool:
    """True for a whole number, 0 or more, as Kaggle's JSON may carry one: an int (not a bool), or
    up to 20 ASCII digits (an int64 written as text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value >= 0
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20


def _submission_defect(sub: Any) -> tuple[str, object, str] | None:
    """The first field of one listed submission that is not what petals reads: (field, value, what
    it should be); None when the submission is fine."""
    if not whole_number(sub.ref):
        return "ref", sub.ref, "a whole number"
    for field, value in (("fileName", sub.file_name), ("description", sub.description)):
        if value is not None and not isinstance(value, str):
            return field, value, "text"
    return None


def check_submissions(submissions: object, slug: str) -> None:
    """Your submissions to `slug` as the client listed them, each of the shape petals reads: the
    client reads the list's scalars untyped, so a ref that is not a whole number or a file name or
    description that is not text is one line naming it (the status is the client's to read)."""
    if not isinstance(submissions, list):
        raise PetalsError(f"Kaggle's list of your submissions to {slug!r} is not a list")
    for number, sub in enumerate(submissions, 1):
        defect = _submission_defect(sub)
        if defect is not None:
            field, value, what = defect
            raise PetalsError(
                f"Kaggle's list of your submissions to {slug!r}: submission {number} has {field} "
                f"{quoted(value)}, not {what}"
            )
