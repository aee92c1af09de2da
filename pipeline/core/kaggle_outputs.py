"""A kernel's outputs, downloaded from Kaggle's answer without trusting it.

The official client joins each file name Kaggle lists onto the target folder and writes there, so
an answer naming `/etc/x` or `../../x` would land outside it. Petals lists the outputs itself and
checks the whole answer before writing anything: every name lies inside the target, no name is
another's folder or listed twice, every URL is http(s) with a host, the listing ends. It then
streams every file into a staging folder inside the target (its progress on a bar or in lines,
pipeline/core/progress.py), bounded by one size budget for them all, and moves them into place
only once all arrived: a refused or failed download leaves nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import requests

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.kaggle_client import call_with_retries, explain_kernel_error, kernel_call
from pipeline.core.lock import staging_folder
from pipeline.core.paths import check_name, inside, shown
from pipeline.core.progress import MB, Progress

# Kaggle keeps at most 20 GB of a kernel's /kaggle/working, all files together: outputs adding up
# to more are not its outputs, and streaming stops there instead of filling the disk.
MAX_OUTPUT_BYTES = 20 * 10**9
CHUNK = 1 << 20
PAGE_SIZE = 100
MAX_LISTING_PAGES = 1000  # 100,000 files: a listing still going on past that never ends


def _output_listing(kernel: str) -> tuple[list[tuple[object, object]], str]:
    """The kernel's latest outputs as Kaggle lists them, (file name, download URL) for each, and its
    log; nothing is written. Names and URLs are the server's to choose: the caller checks them."""
    from kagglesdk.kernels.types.kernels_api_service import ApiListKernelSessionOutputRequest

    owner, _, slug = kernel.partition("/")

    def listing(client) -> tuple[list[tuple[object, object]], str]:
        files, token, log_text = [], "", ""
        with client.build_kaggle_client() as kaggle:
            for _ in range(MAX_LISTING_PAGES):
                request = ApiListKernelSessionOutputRequest()
                request.user_name, request.kernel_slug = owner, slug
                request.page_size, request.page_token = PAGE_SIZE, token
                response = kaggle.kernels.kernels_api_client.list_kernel_session_output(request)
                files += [(item.file_name, item.url) for item in response.files or []]
                log, token = response.log or "", response.next_page_token or ""
                for field, value in (("log", log), ("nextPageToken", token)):
                    if not isinstance(value, str):  # the client reads these untyped
                        raise PetalsError(
                            f"kernel {kernel}: Kaggle's listing of its outputs has {field} "
                            f"{shown(value)}, not text; nothing downloaded"
                        )
                log_text = log_text or log
                if not token:
                    return files, log_text
        raise PetalsError(
            f"kernel {kernel}: Kaggle's listing of its outputs goes on past {MAX_LISTING_PAGES} pages "
            f"of {PAGE_SIZE} files; refused, nothing downloaded"
        )

    return kernel_call(listing, kernel, f"listing the output of kernel {kernel}")


def _check_url(url: object, name: object, kernel: str) -> str:
    """`url` if it is an http(s) URL with a host; the one-line refusal otherwise (`file://`, an
    empty URL or none would reach a file or fail with requests' own exception)."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        fine = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unbalanced `[` in the host
        fine = False
    if not fine:
        raise PetalsError(
            f"kernel {kernel}: output file {shown(name)} has download URL {shown(url)}, not an "
            "http(s) URL with a host; nothing downloaded"
        )
    return url


def _check_collisions(paths: list[tuple[str, Path]], target: Path, kernel: str) -> None:
    """Refuse two outputs that would land on one path, or one inside another's file (`a` and
    `a/b`), and an output meeting a file or folder already in `target` the other way round."""
    first: dict[Path, str] = {}
    for name, path in paths:
        if path in first:
            raise PetalsError(
                f"kernel {kernel}: output files {shown(first[path])} and {shown(name)} are the same "
                "file; nothing downloaded"
            )
        first[path] = name
    for name, path in paths:
        for parent in path.relative_to(target).parents:
            folder = target / parent
            if folder in first:
                raise PetalsError(
                    f"kernel {kernel}: output file {shown(name)} lies inside output file "
                    f"{shown(first[folder])}, which cannot be a file and a folder; nothing downloaded"
                )
            if folder.exists() and not folder.is_dir():
                raise PetalsError(
                    f"kernel {kernel}: output file {shown(name)} needs a folder where {folder} is a "
                    "file; move it away, then rerun"
                )
        if path.is_dir():
            raise PetalsError(
                f"kernel {kernel}: output file {shown(name)} would replace the folder {path}; move it "
                "away, then rerun"
            )


def kernel_output(kernel: str, target: Path) -> list[str]:
    """Download the kernel's latest outputs into `target` (the whole answer checked first, every
    file downloaded before any is moved into place); the files written. The log is saved as
    `<slug>.log`, as the client saves it."""
    owner, _, slug = kernel.partition("/")
    source = f"kernel {kernel}"
    check_name(owner, "owner", source)
    check_name(slug, "slug", source)
    files, log_text = _output_listing(kernel)
    checked = [
        (name, inside(target, name, "output file", source), _check_url(url, name, kernel))
        for name, url in files
    ]
    _check_collisions([(name, path) for name, path, _ in checked], target, kernel)
    written = _download_all(checked, target, kernel) if checked else []
    if log_text:
        log = target / f"{slug}.log"
        target.mkdir(parents=True, exist_ok=True)
        write_atomically(log, lambda tmp: tmp.write_text(log_text))
        written.append(str(log))
    return written


def _download_all(checked: list[tuple[str, Path, str]], target: Path, kernel: str) -> list[str]:
    """Each file streamed into a staging folder inside `target`, within one MAX_OUTPUT_BYTES budget,
    then all moved into place; on any failure the staging folder (and `target`, if this made it)
    is removed, so nothing is left."""
    made_target = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(target, ".petals-download-")  # a killed download's is removed
    arrived = False
    try:
        used = 0
        for index, (name, _, url) in enumerate(checked):
            used += _download(name, url, staging / str(index), MAX_OUTPUT_BYTES - used, kernel)
        arrived = True
        for index, (_, path, _) in enumerate(checked):
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / str(index), path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made_target and not arrived:
            shutil.rmtree(target, ignore_errors=True)
    return [str(path) for _, path, _ in checked]


def _download(name: str, url: str, tmp: Path, budget: int, kernel: str) -> int:
    """One output file into `tmp`, retried like every Kaggle call; its size. Any other failure of
    requests (a bad redirect, a broken stream) is one line, not a traceback."""
    try:
        return call_with_retries(
            lambda: _stream(url, tmp, budget, name, kernel),
            slug=kernel,
            action=f"downloading output {shown(name)} of kernel {kernel}",
            explain=explain_kernel_error,
        )
    except requests.RequestException as err:
        raise PetalsError(
            f"kernel {kernel}: downloading output {shown(name)} from {shown(url)} failed "
            f"({type(err).__name__}); nothing downloaded"
        ) from None


def _stream(url: str, tmp: Path, budget: int, name: str, kernel: str) -> int:
    """One output file from `url` into `tmp` (rewritten from the start on a retry), in chunks,
    stopped past `budget` bytes: what is left of MAX_OUTPUT_BYTES for the kernel's outputs."""
    with requests.get(url, stream=True) as response:
        response.raise_for_status()
        size, what = 0, f"kernel {kernel}: {shown(name)}"
        with open(tmp, "wb") as out, Progress(what, _said_length(response) / MB, "MB") as bar:
            for chunk in response.iter_content(CHUNK):
                size += len(chunk)
                bar.reach(size / MB)
                if size > budget:
                    raise PetalsError(
                        f"kernel {kernel}: outputs up to {shown(name)} add up to more than "
                        f"{MAX_OUTPUT_BYTES} bytes, more than Kaggle keeps of a kernel; nothing "
                        "downloaded"
                    )
                out.write(chunk)
        return size


def _said_length(response) -> int:
    """The bytes the server says a file holds (its progress's total): 0 when it says none, or
    nothing a whole number of bytes within MAX_OUTPUT_BYTES (then no progress is shown)."""
    said = response.headers.get("Content-Length", "")
    return int(said) if said.isdigit() and int(said) <= MAX_OUTPUT_BYTES else 0
