"""The one thin layer over the official `kaggle` client.

Functions here raise PetalsError with one actionable line on failure; secrets are
never printed. Everything that talks to Kaggle goes through `api()`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import requests
import requests.adapters

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import listed, quoted, text
from pipeline.core.kaggle_answers import answers_checked, whole_number
from pipeline.core.paths import check_name

log = logging.getLogger(__name__)
T = TypeVar("T")

CREDENTIALS_HELP = (
    "create a token at kaggle.com > Settings > API and save kaggle.json in ~/.kaggle/ (chmod 600), "
    "or set KAGGLE_USERNAME and KAGGLE_KEY, or KAGGLE_API_TOKEN"
)


class UploadIncomplete(requests.ConnectionError):
    """The client's file upload stopped short; retried like a dropped connection."""


def is_production() -> bool:
    """True when the client talks to kaggle.com (not a loopback or staging server)."""
    return os.environ.get("KAGGLE_API_ENVIRONMENT") in (None, "", "PROD")


def config_dir() -> Path:
    """Where the client looks for kaggle.json (KAGGLE_CONFIG_DIR, ~/.kaggle, or XDG on Linux)."""
    if os.environ.get("KAGGLE_CONFIG_DIR"):
        return Path(os.environ["KAGGLE_CONFIG_DIR"])
    home = Path.home() / ".kaggle"
    if sys.platform.startswith("linux") and not home.exists():
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"
    return home


def access_token_file() -> Path:
    return Path.home() / ".kaggle" / "access_token"


def config_file_values() -> dict[str, str]:
    """What kaggle.json holds (`username`, `key`), or {} when it is missing or not valid JSON."""
    config = config_dir() / "kaggle.json"
    if not config.is_file():
        return {}
    try:
        values = json.loads(config.read_text() or "{}")
    except json.JSONDecodeError:
        return {}
    return values if isinstance(values, dict) else {}


def find_credentials() -> str | None:
    """Where the client will find credentials, checked without any network call; None if nowhere."""
    if os.environ.get("KAGGLE_API_TOKEN"):
        return "the KAGGLE_API_TOKEN variable"
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "the KAGGLE_USERNAME and KAGGLE_KEY variables"
    token = access_token_file()
    if token.is_file() and token.read_text().strip():
        return str(token)
    values = config_file_values()
    if values.get("username") and values.get("key"):
        return str(config_dir() / "kaggle.json")
    return None


@cache
def _api_class() -> type:
    # Importing any part of `kaggle` runs its package __init__, which tries to
    # authenticate and prints a help text when there are no credentials; we
    # report missing credentials ourselves, in one line.
    with contextlib.redirect_stdout(io.StringIO()):
        from kaggle.api.kaggle_api_extended import KaggleApi
    from kagglesdk import KaggleClient
    from kagglesdk.kaggle_env import get_env

    class PetalsKaggleApi(KaggleApi):
        """The official client, honouring KAGGLE_API_ENVIRONMENT for every call.

        kaggle 2.2.x maps only KAGGLE_API_ENVIRONMENT=LOCALHOST and otherwise always
        talks to production; kagglesdk itself also understands TEST
        (http://localhost:7777). Passing kagglesdk's own reading of the variable lets
        the unmodified client run end to end against a loopback server in tests.
        """

        def build_kaggle_client(self) -> Any:
            if not os.environ.get("KAGGLE_API_ENVIRONMENT"):
                return super().build_kaggle_client()
            return KaggleClient(
                env=get_env(),
                verbose="--verbose" in self.args,
                username=self.config_values.get(self.CONFIG_NAME_USER),
                password=self.config_values.get(self.CONFIG_NAME_KEY),
                api_token=self.config_values.get(self.CONFIG_NAME_TOKEN),
                response_processor=self.get_response_processor(),
            )

    return PetalsKaggleApi


def api() -> Any:
    """An authenticated official client; PetalsError saying where credentials go if there are none."""
    client = _api_class()()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            client.authenticate()
    except SystemExit:  # the client calls exit(1) when it finds no credentials
        raise PetalsError(f"no Kaggle credentials found: {CREDENTIALS_HELP}") from None
    return client


def explain_http_error(status: int, slug: str, action: str) -> str:
    """One actionable line for an HTTP status Kaggle answered with."""
    page = f"https://www.kaggle.com/competitions/{slug}"
    if status == 400:
        return f"Kaggle answered 400 while {action}: join the competition at {page} (and accept its rules)"
    if status == 401:
        return f"Kaggle rejected the credentials (401) while {action}: {CREDENTIALS_HELP}"
    if status == 403:
        return (
            f"Kaggle refused access (403) while {action}: accept the competition rules at {page}/rules "
            "and check that the credentials belong to that account"
        )
    if status == 404:
        return f"Kaggle has no competition {slug!r} (404) while {action}: check the competition slug"
    if status == 429:
        return f"Kaggle rate-limited the request (429) while {action}: wait a few minutes and rerun"
    return f"Kaggle answered {status} while {action}: the service may be down, rerun later"


def explain_kernel_error(status: int, kernel: str, action: str) -> str:
    """One actionable line for an HTTP status Kaggle answered a kernel call with."""
    if status == 400:
        return (
            f"Kaggle rejected the request (400) while {action}: "
            "check kernel-metadata.json (sources, accelerator)"
        )
    if status == 403:
        return (
            f"Kaggle refused access (403) while {action}: {kernel} belongs to another account, "
            "or the competition's rules are not accepted yet"
        )
    if status == 404:
        return (
            f"Kaggle has no kernel {kernel!r} (404) while {action}: "
            "push it first (make kernel-push) or check OWNER"
        )
    return explain_http_error(status, kernel, action)


TIMEOUT_VARIABLE = "PETALS_KAGGLE_TIMEOUT"  # seconds a Kaggle request may wait for an answer


@contextlib.contextmanager
def _timeouts() -> Any:
    """Every HTTP request made inside waits at most PETALS_KAGGLE_TIMEOUT seconds (default 120) for
    the server, 30 s to connect. The official client sets no timeout on its calls, its uploads or
    its downloads, so a server that stops answering would hang a stage forever; a timeout becomes
    `requests.Timeout`, retried like a 5xx."""
    read = float(os.environ.get(TIMEOUT_VARIABLE) or 120)
    limit = (min(30.0, read), read)
    adapter = requests.adapters.HTTPAdapter
    send = adapter.send

    def send_with_timeout(self, request, *args, timeout=None, **kwargs):
        return send(self, request, *args, timeout=timeout or limit, **kwargs)

    adapter.send = send_with_timeout
    try:
        yield
    finally:
        adapter.send = send


def call_with_retries(
    fn: Callable[[], T],
    *,
    slug: str,
    action: str,
    retries: int = 3,
    backoff_s: float = 2.0,
    explain: Callable[[int, str, str], str] = explain_http_error,
) -> T:
    """Run `fn`, retrying server errors (5xx), timeouts and dropped connections with exponential backoff.

    Client errors (4xx) are not retried: they need the user to act; `explain(status, slug, action)`
    says what to do.
    """
    for attempt in range(1, retries + 1):
        try:
            with _timeouts(), answers_checked(action):
                return fn()
        except requests.HTTPError as err:
            status = err.response.status_code if err.response is not None else 0
            if status < 500 or attempt == retries:
                raise PetalsError(explain(status, slug, action)) from None
            reason = f"HTTP {status}"
        except (requests.ConnectionError, requests.Timeout) as err:
            if attempt == retries:
                raise PetalsError(
                    f"cannot reach Kaggle while {action} ({type(err).__name__}): "
                    "check the network connection, then rerun"
                ) from None
            reason = type(err).__name__
        delay = backoff_s * 2 ** (attempt - 1)
        log.warning(
            "%s: %s, retrying in %.0f s (attempt %d of %d)", action, reason, delay, attempt + 1, retries
        )
        time.sleep(delay)
    raise AssertionError("unreachable")


def with_client(
    fn: Callable[[Any], T],
    *,
    slug: str,
    action: str,
    retries: int = 3,
    explain: Callable[[int, str, str], str] = explain_http_error,
) -> T:
    """Log in, then `fn(client)`: each retried on server errors and dropped connections, each 4xx
    one line from `explain`. Every call petals makes to Kaggle goes through here."""
    # Authenticating checks an access token over the network, so it is retried like the call.
    client = call_with_retries(api, slug=slug, action=action, retries=retries)
    return call_with_retries(lambda: fn(client), slug=slug, action=action, retries=retries, explain=explain)


def download_competition(slug: str, dest: Path, *, retries: int = 3, quiet: bool = False) -> Path:
    """Download the competition's data archive into `dest` and return its path.

    The client shows a progress bar and resumes a partial download left in `dest`. It names the
    archive `<slug>.<the extension of the URL Kaggle redirects to>` inside `dest`: with `slug` a plain
    name that stays inside `dest`, and what it left there is checked to be a plain file.
    """
    check_name(slug, "competition slug", "the Kaggle download")
    dest.mkdir(parents=True, exist_ok=True)
    with_client(
        lambda client: client.competition_download_files(slug, path=str(dest), quiet=quiet),
        slug=slug,
        action=f"downloading the data of {slug!r}",
        retries=retries,
    )
    archives = sorted(p for p in dest.glob(f"{slug}.*") if p.suffix != ".kaggle-partial")
    if not archives:
        raise PetalsError(f"Kaggle download of {slug!r} left no archive in {dest}")
    for archive in archives:
        if archive.is_symlink() or not archive.is_file():
            raise PetalsError(
                f"Kaggle download of {slug!r} left {archive.name!r} in {dest}, not an archive file: "
                "the server named its download oddly; remove it and run fetch again"
            )
    return archives[0]


def _newest_version(client: Any, kernel: str) -> int | None:
    """The newest version number of kernel `owner/slug` on Kaggle: 0 for one never pushed (404),
    None where Kaggle's answer does not say (another 4xx, a number that is not one)."""
    from kagglesdk.kernels.types.kernels_api_service import ApiGetKernelRequest

    request = ApiGetKernelRequest()
    request.user_name, request.kernel_slug = kernel.split("/", 1)
    try:
        with client.build_kaggle_client() as kaggle:
            answer = kaggle.kernels.kernels_api_client.get_kernel(request)
    except requests.HTTPError as err:
        status = err.response.status_code if err.response is not None else 0
        if status >= 500:
            raise  # retried like the push
        return 0 if status == 404 else None
    version = answer.metadata.current_version_number if answer.metadata else 0
    return int(version) if whole_number(version) else None


def push_kernel(folder: Path, slug: str, kernel: str, timeout: int | None, accelerator: str | None) -> int:
    """`kaggle kernels push -p folder [-t timeout] [--accelerator id]`: the version number Kaggle gave
    the new version. A push's 400/403/404 are about its competition source `slug`, so they get the
    competition's explanations; an answer that names an error or rejected sources raises.

    Each version runs, and spends accelerator quota, once pushed; an answer can be lost after Kaggle
    made it (a 502, a timeout). So the kernel's newest version is read before the first try, and a
    retry first looks for a newer one; where Kaggle does not say, the push is not sent again."""
    before: list[int | None] = []  # the newest version before the first try, once read
    lost = (
        f"pushing kernel {kernel}: no answer came back and Kaggle does not say the kernel's versions, "
        "so the push may have made one: `make kernel-status` says whether a new version runs; push "
        "again only if none does"
    )

    def once(client: Any) -> Any:
        if not before:
            before.append(_newest_version(client, kernel))
        else:  # a retry: did the last try make a version though its answer was lost?
            now = None if before[0] is None else _newest_version(client, kernel)
            if now is None:
                raise PetalsError(lost)
            if now > before[0]:
                log.warning(
                    "pushing kernel %s: the last try made version %d though its answer was lost", kernel, now
                )
                return now
        return client.kernels_push(str(folder), str(timeout) if timeout else None, accelerator)

    answer = with_client(once, slug=slug, action=f"pushing kernel {kernel}")
    if isinstance(answer, int):
        return answer
    if answer.error:
        raise PetalsError(f"Kaggle refused kernel {kernel}: {text(answer.error)}")
    rejected = (
        answer.invalid_competition_sources
        or answer.invalid_dataset_sources
        or answer.invalid_kernel_sources
        or answer.invalid_model_sources
    )
    if rejected:
        sources = listed(rejected if isinstance(rejected, list) else [rejected])
        raise PetalsError(
            f"Kaggle rejected the sources {sources} of kernel {kernel}: check the slugs in its metadata"
        )
    version = answer.version_number
    if not version:
        raise PetalsError(f"Kaggle accepted kernel {kernel} but named no version number; rerun the push")
    if not whole_number(version):  # read untyped
        raise PetalsError(
            f"Kaggle accepted kernel {kernel} but named version {quoted(version)}, not a whole number; "
            "`make kernel-status` says where it stands"
        )
    return int(version)


def accelerator_quota() -> Any | None:
    """The weekly accelerator quota, as `kaggle quota` reads it (`gpu_quota` and `tpu_quota`, each
    with `time_used`, `time_reserved` and `total_time_allowed`; `quota_refresh_time`); None where
    Kaggle answers none (404)."""
    unanswered = "Kaggle has no quota answer"

    def explain(status: int, slug: str, action: str) -> str:
        return unanswered if status == 404 else explain_http_error(status, slug, action)

    try:
        return with_client(
            lambda client: client.quota_view(),
            slug="quota",
            action="reading the weekly accelerator quota",
            explain=explain,
        )
    except PetalsError as err:
        if str(err) == unanswered:
            return None
        raise


def kernel_call(fn: Callable[[Any], T], kernel: str, action: str) -> T:
    try:
        return with_client(fn, slug=kernel, action=action, explain=explain_kernel_error)
    except ValueError as err:  # the client's own words for 401/403 on a kernel
        raise PetalsError(f"cannot see kernel {kernel}: check the owner and the slug ({text(err)})") from None


def kernel_status(kernel: str) -> Any:
    """The client's status answer (`status`, `failure_message`) for `owner/slug`."""
    return kernel_call(
        lambda c: c.kernels_status(kernel), kernel, f"asking for the status of kernel {kernel}"
    )
