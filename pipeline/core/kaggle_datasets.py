"""A private Kaggle dataset that petals keeps: its files listed, created, given a new version, and
waited for until Kaggle has processed it. Every call goes through `kaggle_client.with_client`.

Kaggle's answers are checked, not trusted: a listing that never ends is refused, and the caller
compares what Kaggle lists after an upload with what it sent (the official client drops a file
whose upload failed without a word, and the dataset would be created without it).
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import quoted, text
from pipeline.core.kaggle_answers import whole_number
from pipeline.core.kaggle_client import explain_http_error, with_client

PAGE_SIZE = 200
MAX_LISTING_PAGES = 100  # 20,000 files: a listing still going on past that never ends
READY = "READY"
POLL_SECONDS = 10.0  # between status questions while Kaggle processes an upload
FAILED = ("FAILED", "DELETED")


def explain_dataset_error(status: int, dataset: str, action: str) -> str:
    """One actionable line for an HTTP status Kaggle answered a dataset call with."""
    if status == 403:
        return (
            f"Kaggle refused access (403) while {action}: dataset {dataset} belongs to another account; "
            "check OWNER and the credentials"
        )
    if status == 404:
        return f"Kaggle has no dataset {dataset!r} (404) while {action}"
    if status == 400:
        return f"Kaggle rejected the request (400) while {action}: check {dataset}'s dataset-metadata.json"
    return explain_http_error(status, dataset, action)


def dataset_files(dataset: str) -> dict[str, int] | None:
    """{file name: bytes} of the dataset's newest version; None when Kaggle has no such dataset."""
    from kagglesdk.datasets.types.dataset_api_service import ApiListDatasetFilesRequest

    owner, _, slug = dataset.partition("/")
    absent = f"Kaggle has no dataset {dataset!r}"

    def listing(client) -> dict[str, int]:
        files, token = {}, None
        with client.build_kaggle_client() as kaggle:
            for _ in range(MAX_LISTING_PAGES):
                request = ApiListDatasetFilesRequest()
                request.owner_slug, request.dataset_slug = owner, slug
                request.page_size, request.page_token = PAGE_SIZE, token
                answer = kaggle.datasets.dataset_api_client.list_dataset_files(request)
                if answer.error_message:
                    raise PetalsError(
                        f"Kaggle could not list dataset {dataset}: {text(answer.error_message)}"
                    )
                for item in answer.dataset_files or []:  # the client reads these untyped
                    size = item.total_bytes or 0  # a whole number; JSON may carry an int64 as text
                    if not whole_number(size):
                        raise PetalsError(
                            f"Kaggle's listing of dataset {dataset}: file {quoted(item.name)} has size "
                            f"{quoted(size)}, not a whole number"
                        )
                    files[str(item.name)] = int(size)
                token = answer.next_page_token or ""
                if not isinstance(token, str):
                    raise PetalsError(
                        f"Kaggle's listing of dataset {dataset} has page token {quoted(token)}, not text"
                    )
                if not token:
                    return files
        raise PetalsError(f"Kaggle's listing of dataset {dataset} goes on past {MAX_LISTING_PAGES} pages")

    def explain(status: int, name: str, action: str) -> str:
        return absent if status == 404 else explain_dataset_error(status, name, action)

    try:
        return with_client(listing, slug=dataset, action=f"listing dataset {dataset}", explain=explain)
    except PetalsError as err:
        if str(err).startswith(absent):
            return None
        raise


def upload(folder: Path, dataset: str, notes: str | None) -> None:
    """Upload `folder` (its dataset-metadata.json names `dataset`) as a new private dataset, or, with
    `notes`, as a new version of the existing one. One line if Kaggle refuses it."""

    def create(client):
        with contextlib.redirect_stdout(io.StringIO()):  # the client prints a line per file
            if notes is None:
                return client.dataset_create_new(str(folder), public=False, quiet=True, dir_mode="skip")
            return client.dataset_create_version(str(folder), notes, quiet=True, dir_mode="skip")

    action = f"{'creating' if notes is None else 'versioning'} dataset {dataset}"
    # Not retried: a create that reached Kaggle before its answer was lost would be refused the
    # second time (the title in use), a version uploaded twice; the rerun lists the dataset first.
    answer = with_client(create, slug=dataset, action=action, explain=explain_dataset_error, retries=1)
    if getattr(answer, "error", None):
        raise PetalsError(f"Kaggle refused dataset {dataset}: {text(answer.error)}")


def status(dataset: str) -> str:
    """The newest version's processing state, as kagglesdk names it: READY, FAILED, BLOBS_RECEIVED..."""
    answer = with_client(
        lambda client: client.dataset_status(dataset),
        slug=dataset,
        action=f"asking for the status of dataset {dataset}",
        explain=explain_dataset_error,
    )
    return text(answer, 60).upper()  # Kaggle's word, shown in lines


def wait_ready(dataset: str, *, limit_seconds: float = 1800.0) -> None:
    """Poll until Kaggle has processed the dataset's newest version; one line if it failed or is
    still processing after `limit_seconds` (a kernel attaching it before would find it missing)."""
    started = time.monotonic()
    while True:
        state = status(dataset)
        if state == READY:
            return
        if state in FAILED:
            raise PetalsError(
                f"Kaggle could not process dataset {dataset} ({state.lower()}): upload it again"
            )
        if time.monotonic() - started >= limit_seconds:
            raise PetalsError(
                f"dataset {dataset} is still {state.lower()} after {limit_seconds:.0f} s: rerun to go on "
                "waiting (nothing is uploaded twice)"
            )
        time.sleep(POLL_SECONDS)
