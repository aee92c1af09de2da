"""Submissions through the official client: a file to a competition (`submit_file`), a code
competition's kernel output (`submit_code`), and the list of yours Kaggle holds, each entry's shape
checked (`list_submissions`, `find_submission`). Uploads count against the day's limit, so a retry
never sends what Kaggle already took."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pipeline.core.kaggle_answers import check_submissions
from pipeline.core.kaggle_client import UploadIncomplete, with_client

log = logging.getLogger(__name__)


def list_submissions(slug: str) -> list[Any]:
    """Your submissions to `slug`, newest first, each checked to be of the shape petals reads: the
    client reads the list's scalars untyped, so a ref that is not a whole number or a file name or
    description that is not text is one line naming it (the status is the client's to read)."""
    return with_client(
        lambda client: _submissions(client, slug), slug=slug, action=f"listing your submissions to {slug!r}"
    )


def _submissions(client, slug: str) -> list[Any]:
    submissions = client.competition_submissions(slug, page_size=100) or []
    check_submissions(submissions, slug)
    return submissions


def find_submission(slug: str, file_name: str, message: str) -> Any | None:
    """Your submission to `slug` of `file_name` with this description, newest first, or None."""
    submissions = list_submissions(slug)
    return next(
        (s for s in submissions if (s.file_name or "") == file_name and (s.description or "") == message),
        None,
    )


def _unless_taken(slug: str, mine: tuple[str, str], send: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`send(client)` as one try of a retried call that never sends what Kaggle took already. Every
    submission counts against the day's, and an answer can be lost after Kaggle took it (a 502, a
    timeout): so the refs listed before the first try are kept, and each retry first looks for a
    submission of this file name and description (`mine`) that was not there before."""
    before: set[str] | None = None

    def once(client) -> Any:
        nonlocal before
        if before is None:
            before = {str(s.ref) for s in _submissions(client, slug)}
        else:
            added = [s for s in _submissions(client, slug) if str(s.ref) not in before]
            taken = next((s for s in added if ((s.file_name or ""), (s.description or "")) == mine), None)
            if taken is not None:
                log.warning(
                    "submit: the last try reached Kaggle (ref %s) though its answer was lost", taken.ref
                )
                return SimpleNamespace(
                    ref=taken.ref, message="accepted (its answer was lost; found on Kaggle)"
                )
        return send(client)

    return once


def submit_file(path: Path, slug: str, message: str, *, retries: int = 3) -> Any:
    """Upload a submission CSV with the official client; its answer (`message`, `ref`). The client's
    flow: ask for an upload URL, PUT the bytes there, then create the submission; a retry never
    uploads what Kaggle took already (`_unless_taken`)."""

    def send(client) -> Any:
        answer = client.competition_submit(str(path), message, slug, quiet=False)
        if answer.message == client.COMPETITION_SUBMIT_UPLOAD_FAILED_MESSAGE:
            raise UploadIncomplete("the file upload did not complete")
        return answer

    once = _unless_taken(slug, (path.name, message), send)
    return with_client(once, slug=slug, action=f"submitting {path.name} to {slug!r}", retries=retries)


def submit_code(
    slug: str, kernel: str, version: int, file_name: str, message: str, *, retries: int = 3
) -> Any:
    """Submit to a code competition the file `file_name` that version `version` of kernel `owner/slug`
    wrote: the client's code-submission call (POST CompetitionApiService/CreateCodeSubmission, body
    competitionName, kernelOwner, kernelSlug, kernelVersion, fileName, submissionDescription). Its
    answer (`message`, `ref`); a retry never submits what Kaggle took already (`_unless_taken`)."""

    def send(client) -> Any:
        return client.competition_submit_code(
            file_name, message, slug, kernel=kernel, kernel_version=version, quiet=True
        )

    return with_client(
        _unless_taken(slug, (file_name, message), send),
        slug=slug,
        action=f"submitting {file_name} of kernel {kernel} version {version} to {slug!r}",
        retries=retries,
    )
